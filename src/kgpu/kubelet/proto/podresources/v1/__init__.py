"""Generated kubelet API stubs: v1."""
