"""kgpu: the GPU software stack for Kubernetes as one Python package.

Packages, in layer order (each imports only earlier ones; docs/architecture.md):

1. core, no I/O: ``errors``, ``quantity``, ``store`` (the object-store protocol and the
   in-memory store), ``hardware``, ``config``, ``node``, ``dra``, ``computedomain``,
   ``manifests`` (Kubernetes objects as the API server checks them);
2. shells: ``kubelet`` (gRPC, CDI, checkpoints), ``metrics`` (the exporter), ``cluster`` (a real
   API server);
3. ``drivers``: components joining a shell to the core for one role;
4. processes: ``testing``, ``agent``, ``sim``;
5. ``cli``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
