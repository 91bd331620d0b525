"""The kubelet device-plugin API (v1beta1): servicer, per-resource server and registration."""
