"""The kubelet device-plugin API (v1beta1): servicer, per-resource server and registration."""

from kgpu.kubelet.deviceplugin.registration import RegistrationError, register
from kgpu.kubelet.deviceplugin.server import PluginServer
from kgpu.kubelet.deviceplugin.servicer import DevicePluginServicer

__all__ = ["DevicePluginServicer", "PluginServer", "RegistrationError", "register"]
