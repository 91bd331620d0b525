"""The agent's optional components, built from its options. Everything ships in one wheel, so
these are plain imports: a broken module fails the agent at start, loudly."""

from __future__ import annotations

from pathlib import Path

from kgpu.drivers.component import Component
from kgpu.drivers.computedomain import compute_domain_driver
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.metrics import MetricsComponent
from kgpu.hardware.backend import Backend
from kgpu.store import ObjectStore


def load_metrics(
    address: str,
    backend: Backend,
    kubelet_root: Path,
    node_name: str,
    hostname_label: str = "Hostname",
) -> Component:
    return MetricsComponent(
        address=address,
        backend=backend,
        kubelet_root=kubelet_root,
        node_name=node_name,
        hostname_label=hostname_label,
    )


def load_dra(
    kubelet_root: Path,
    cdi_root: Path,
    node_name: str,
    backend: Backend,
    *,
    store: ObjectStore | None = None,
) -> Component:
    return DraComponent(
        kubelet_root=kubelet_root,
        cdi_root=cdi_root,
        node_name=node_name,
        backend=backend,
        store=store,
        driver_factories=(compute_domain_driver,),
    )
