"""kgpu: the GPU software stack for Kubernetes as one Python package."""

__version__ = "0.1.0"
