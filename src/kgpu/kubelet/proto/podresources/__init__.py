"""Generated kubelet API stubs: podresources."""
