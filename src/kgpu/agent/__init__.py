"""The node agent: serves the node view to the kubelet and keeps it current.

:class:`Agent` is the shell around the pure node view: it reads the backend, configs and node
labels, serves every advertised resource over the kubelet's device-plugin API, watches device
health, runs MPS daemons, writes feature labels and hands every new view to its components
(metrics, DRA). Modules: ``daemon`` (the agent), ``components`` (the optional components),
``inputs`` (labels files, change detection), ``faults`` (the fault directory), ``nfd`` (feature
labels for node-feature-discovery).
"""

from kgpu.agent.daemon import Agent, AgentOptions

__all__ = ["Agent", "AgentOptions"]
