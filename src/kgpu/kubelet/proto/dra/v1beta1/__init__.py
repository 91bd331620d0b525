"""Generated kubelet API stubs: v1beta1."""
