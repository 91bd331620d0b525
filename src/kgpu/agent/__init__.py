"""The node agent: serves the node view to the kubelet and keeps it current.

:class:`kgpu.agent.daemon.Agent` is the shell around the pure node view: it reads the backend,
configs and node labels, watches device health and hands every new view to its components
(:mod:`kgpu.agent.components`: MPS daemons, device-plugin servers, NFD labels, metrics, DRA),
which do the serving. :class:`kgpu.agent.options.AgentOptions` holds its options, defaults and
their checks.
"""

from kgpu.agent.daemon import Agent
from kgpu.agent.options import AgentOptions

__all__ = ["Agent", "AgentOptions"]
