"""Generated kubelet API stubs: deviceplugin."""
