"""The agent's components and how each is built from the agent's options.

The agent is a composition: it keeps the node view (configs, labels, health) and hands every
view to each component in :data:`FACTORIES` order; the components do the rest. A factory gets an
:class:`AgentContext` and returns its component, or None when the options turn it off. A new
component (a MIG manager, say) is one more factory in :data:`FACTORIES` (or passed to
``Agent(factories=...)``). Everything ships in one wheel, so these are plain imports: a broken
module fails the agent at start, loudly.

Order matters only where one component's work is another's input: the MPS daemons are started
before the device-plugin servers advertise the replicas that use them, and the device plugin
comes before the components that may talk to the API server, so a health change reaches
ListAndWatch first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kgpu.agent.nfd import FeaturesComponent
from kgpu.agent.options import HOSTNAME_LABELS, AgentOptions
from kgpu.drivers.component import Component
from kgpu.drivers.computedomain import compute_domain_driver
from kgpu.drivers.deviceplugin import DevicePluginComponent
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.metrics import MetricsComponent
from kgpu.drivers.mps import MpsComponent
from kgpu.hardware.backend import Backend
from kgpu.store import ObjectStore


@dataclass(frozen=True)
class AgentContext:
    """What a component factory may use."""

    options: AgentOptions
    backend: Backend
    store: Callable[[], ObjectStore | None]  # the API server, connected on first use
    on_change: Callable[[], None]  # a component's own state changed: rewrite the status file


ComponentFactory = Callable[[AgentContext], Component | None]


def mps(ctx: AgentContext) -> Component:
    return MpsComponent(
        use_binary=ctx.options.machine == "nvml",
        refresh_interval_s=ctx.options.health_probe_interval_s,
        on_change=ctx.on_change,
    )


def device_plugin(ctx: AgentContext) -> Component:
    return DevicePluginComponent(
        ctx.options.kubelet_root,
        poll_s=ctx.options.kubelet_poll_s,
        register_timeout_s=ctx.options.register_timeout_s,
        on_change=ctx.on_change,
    )


def nfd(ctx: AgentContext) -> Component | None:
    directory = ctx.options.nfd_features_dir
    return FeaturesComponent(directory) if directory is not None else None


def metrics(ctx: AgentContext) -> Component | None:
    opts = ctx.options
    if not opts.metrics_address:
        return None
    return load_metrics(
        opts.metrics_address, ctx.backend, opts.kubelet_root, opts.node_name, opts.hostname_label
    )


def dra(ctx: AgentContext) -> Component | None:
    opts = ctx.options
    if opts.dra is False:
        return None
    return load_dra(
        opts.kubelet_root, opts.cdi_root, opts.node_name, ctx.backend, store=ctx.store()
    )


#: The agent's components, in the order views reach them.
FACTORIES: tuple[ComponentFactory, ...] = (mps, device_plugin, nfd, metrics, dra)


def load_metrics(
    address: str,
    backend: Backend,
    kubelet_root: Path,
    node_name: str,
    hostname_label: str = HOSTNAME_LABELS[0],
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
