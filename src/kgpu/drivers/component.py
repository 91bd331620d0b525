"""What the agent runs: a component joins one shell to the core for one role (the metrics
exporter, the DRA kubelet drivers, the MPS daemons, the device-plugin servers).

A component is started after the agent has its first node view, receives every new view
(health and config changes included) through ``on_view`` and is stopped before the agent exits.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kgpu.node.model import NodeView


@runtime_checkable
class Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def on_view(self, view: NodeView) -> None: ...
