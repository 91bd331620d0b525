"""Generated kubelet API stubs: proto."""
