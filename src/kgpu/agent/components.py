"""Extension points: parts of the agent that other areas of kgpu provide.

A component is started after the device-plugin servers, receives every new node view (health
and config changes included) through ``on_view`` and is stopped before the sockets go away.
The metrics exporter and the DRA kubelet plugin are loaded lazily by module path, so the agent
runs (with a warning) on an install that lacks either.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from kgpu.cluster.store import ObjectStore
from kgpu.hardware.backend import Backend
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)

METRICS_MODULE = "kgpu.metrics.component"
METRICS_CLASS = "MetricsComponent"
DRA_MODULE = "kgpu.kubelet.dra.component"
DRA_CLASS = "DraComponent"
#: The ComputeDomain driver joins the DRA component on fabric-attached nodes.
COMPUTE_DOMAIN_MODULE = "kgpu.computedomain.node"
COMPUTE_DOMAIN_FACTORY = "compute_domain_driver"


@runtime_checkable
class Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def on_view(self, view: NodeView) -> None: ...


def _load_class(module: str, name: str) -> Any | None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.startswith(exc.name):
            return None
        raise
    return getattr(mod, name, None)


def available(module: str, name: str) -> bool:
    try:
        return _load_class(module, name) is not None
    except Exception:  # a broken optional module must not stop the agent
        return False


def load_metrics(
    address: str,
    backend: Backend,
    kubelet_root: Path,
    node_name: str,
    hostname_label: str = "Hostname",
) -> Component | None:
    cls = _load_class(METRICS_MODULE, METRICS_CLASS)
    if cls is None:
        log.warning(
            "--metrics-address given but %s.%s is not installed; serving no metrics",
            METRICS_MODULE,
            METRICS_CLASS,
        )
        return None
    component: Component = cls(
        address=address,
        backend=backend,
        kubelet_root=kubelet_root,
        node_name=node_name,
        hostname_label=hostname_label,
    )
    return component


def load_dra(
    kubelet_root: Path,
    cdi_root: Path,
    node_name: str,
    backend: Backend,
    *,
    required: bool,
    store: ObjectStore | None = None,
) -> Component | None:
    cls = _load_class(DRA_MODULE, DRA_CLASS)
    if cls is None:
        if required:
            log.warning("--dra given but %s.%s is not installed; DRA is off", DRA_MODULE, DRA_CLASS)
        return None
    factory = _load_class(COMPUTE_DOMAIN_MODULE, COMPUTE_DOMAIN_FACTORY)
    component: Component = cls(
        kubelet_root=kubelet_root,
        cdi_root=cdi_root,
        node_name=node_name,
        backend=backend,
        store=store,
        driver_factories=() if factory is None else (factory,),
    )
    return component
