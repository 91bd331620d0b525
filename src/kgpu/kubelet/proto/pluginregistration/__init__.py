"""Generated kubelet API stubs: pluginregistration."""
