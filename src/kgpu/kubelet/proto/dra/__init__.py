"""Generated kubelet API stubs: dra."""
