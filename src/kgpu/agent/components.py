"""The agent's components and how each is built from the agent's options.

The agent is a composition: it keeps the node view (configs, labels, health) and hands every
view to each component in :data:`FACTORIES` order; the components do the rest. A factory gets an
:class:`AgentContext` and returns its component, or None when the options turn it off. A new
component is one more factory in :data:`FACTORIES` (or passed to ``Agent(factories=...)``).
Everything ships in one wheel, so these are plain imports: a broken module fails the agent at
start, loudly.

Order matters only where one component's work is another's input: the MPS daemons are started
before the device-plugin servers advertise the replicas that use them; the device plugin comes
before the components that may talk to the API server, so a health change reaches ListAndWatch
first; the NFD labels come before the MIG manager, which writes its state label through them
when there is no API server; the MIG manager comes last, so its first look at the GPUs happens
with everything else serving.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kgpu.agent.nfd import FeaturesComponent
from kgpu.agent.options import HOSTNAME_LABELS, AgentOptions
from kgpu.config.loader import EMPTY, ConfigSet
from kgpu.dra.allocated_shares import ClaimShare
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy
from kgpu.drivers.component import Component
from kgpu.drivers.computedomain import compute_domain_driver
from kgpu.drivers.deviceplugin import DevicePluginComponent
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.metrics import MetricsComponent
from kgpu.drivers.migmanager import (
    MIG_STATE_LABEL,
    MigManagerOptions,
    mig_manager,
    store_event_sink,
)
from kgpu.drivers.mps import EventSink, MpsComponent
from kgpu.drivers.ownership import GpuOwnership
from kgpu.hardware.backend import Backend, ComputeModeBackend
from kgpu.kubelet.nvidia_cdi import NodeDriver
from kgpu.metrics.counters import DEFAULT as DEFAULT_COUNTERS
from kgpu.metrics.counters import CounterSet
from kgpu.node.model import NodeView
from kgpu.store import ObjectStore


@dataclass(frozen=True)
class AgentContext:
    """What a component factory may use."""

    options: AgentOptions
    backend: Backend
    store: Callable[[], ObjectStore | None]  # the API server, connected on first use
    on_change: Callable[[], None]  # a component's own state changed: rewrite the status file
    # the node's driver for CDI specs and device specs (None on simulated machines)
    driver: Callable[[], NodeDriver | None] = lambda: None
    kubernetes_version: str | None = None  # the API server's (``v1.35.2``), when there is one
    namespace: str = "default"  # the agent's own (its NodeFeature lives there)
    node_uid: Callable[[], str | None] = lambda: None  # from the watched Node
    # the configs and node labels the current view was built from (the MIG manager's inputs)
    inputs: Callable[[], tuple[ConfigSet, Mapping[str, str]]] = lambda: (EMPTY, {})
    view: Callable[[], NodeView | None] = lambda: None  # the view served right now
    # something the view depends on changed (the MIG manager's withheld GPUs, the hardware):
    # rebuild and re-serve it soon
    refresh: Callable[[], None] = lambda: None
    components: Callable[[], list[Component]] = field(default=lambda: [])  # started so far
    # the node's one ledger of who holds each GPU, shared by the device plugin and the DRA
    # driver (None unless both run)
    ownership: GpuOwnership | None = None


ComponentFactory = Callable[[AgentContext], Component | None]


def mps(ctx: AgentContext) -> Component | None:
    if not ctx.options.device_plugin:  # MPS daemons serve the device plugin's replicas
        return None
    backend = ctx.backend
    node_name = ctx.options.node_name

    def record(kind: str, reason: str, message: str) -> None:  # on the Node, when connected
        store = ctx.store()
        if store is not None and node_name:
            store_event_sink(store, node_name, component="kgpu-mps")(kind, reason, message)

    return MpsComponent(
        use_binary=ctx.options.machine == "nvml",
        refresh_interval_s=ctx.options.health_probe_interval_s,
        on_change=ctx.on_change,
        # sets each MPS GPU's compute mode to EXCLUSIVE_PROCESS while its daemon serves
        backend=backend if isinstance(backend, ComputeModeBackend) else None,
        on_event=record,
    )


def device_plugin(ctx: AgentContext) -> Component | None:
    if not ctx.options.device_plugin:
        return None
    return DevicePluginComponent(
        ctx.options.kubelet_root,
        poll_s=ctx.options.kubelet_poll_s,
        register_timeout_s=ctx.options.register_timeout_s,
        on_change=ctx.on_change,
        cdi_root=ctx.options.cdi_root,
        driver=ctx.driver,
        ownership=ctx.ownership,
    )


def nfd(ctx: AgentContext) -> Component | None:
    opts = ctx.options
    if opts.nfd_features_dir is None:
        return None
    return FeaturesComponent(
        opts.nfd_features_dir,
        store=ctx.store(),
        node_name=opts.node_name,
        namespace=ctx.namespace,
        node_uid=ctx.node_uid,
        # the MIG manager owns the state label: the view's guess must not race its writes
        drop=(MIG_STATE_LABEL,) if opts.mig_manager else (),
    )


def metrics(ctx: AgentContext) -> Component | None:
    opts = ctx.options
    if not opts.metrics_address:
        return None
    counters = DEFAULT_COUNTERS
    if opts.collectors is not None:
        from kgpu.metrics.counters import load_counters

        counters = load_counters(opts.collectors)  # checked with the options: it loads
    exporter = load_metrics(
        opts.metrics_address,
        ctx.backend,
        opts.kubelet_root if opts.metrics_pods is not False else None,
        opts.node_name,
        opts.hostname_label,
        counters=counters,
    )
    if isinstance(exporter, MetricsComponent):
        exporter.set_share_source(partial(dra_shares, ctx))
    return exporter


def dra_shares(ctx: AgentContext) -> dict[str, tuple[ClaimShare, ...]]:
    """The GPU shares the agent's DRA driver prepared (none without one): the exporter's
    ``kgpu_dra_share_*`` series, read on its attribution refresh (the DRA component starts
    after the exporter, so it is looked up at each read)."""
    dra = next((c for c in ctx.components() if isinstance(c, DraComponent)), None)
    return dra.prepared_shares() if dra is not None else {}


def dra(ctx: AgentContext) -> Component | None:
    opts = ctx.options
    if opts.dra is False:
        return None
    node_name = opts.node_name
    sinks: list[EventSink] = []  # one sink: its names stay unique across events

    def record(kind: str, reason: str, message: str) -> None:  # on the Node, when connected
        # memory shares' MPS daemons: MpsNotEnforced, ComputeModeNotRestored
        store = ctx.store()
        if store is None or not node_name:
            return
        if not sinks:
            sinks.append(store_event_sink(store, node_name, component="kgpu-dra"))
        sinks[0](kind, reason, message)

    return load_dra(
        opts.kubelet_root,
        opts.cdi_root,
        opts.node_name,
        ctx.backend,
        store=ctx.store(),
        kubernetes_version=ctx.kubernetes_version,
        driver=ctx.driver,
        ownership=ctx.ownership,
        namespace=ctx.namespace,
        shares=opts.share_policy,
        on_event=record,
    )


def migmanager(ctx: AgentContext) -> Component | None:
    """``--mig-manager``: nothing else ever changes a GPU's MIG layout. Its state label goes
    to the Node through the API server, else through the NFD features (when those are
    written), else nowhere (``kgpu agent --status`` still shows it)."""
    opts = ctx.options
    if not opts.mig_manager:
        return None
    store = ctx.store()
    features = next((c for c in ctx.components() if isinstance(c, FeaturesComponent)), None)
    return mig_manager(
        ctx.backend,
        ctx.inputs,
        MigManagerOptions(default_config=opts.mig_config_name),
        node_name=opts.node_name,
        kubelet_root=opts.kubelet_root,
        view=ctx.view,
        store=store,
        on_change=ctx.refresh,
        write_labels=features.set_labels if store is None and features is not None else None,
    )


#: The agent's components, in the order views reach them.
FACTORIES: tuple[ComponentFactory, ...] = (mps, device_plugin, nfd, metrics, dra, migmanager)


def load_metrics(
    address: str,
    backend: Backend,
    kubelet_root: Path | None,
    node_name: str,
    hostname_label: str = HOSTNAME_LABELS[0],
    *,
    counters: CounterSet = DEFAULT_COUNTERS,
) -> Component:
    return MetricsComponent(
        address=address,
        backend=backend,
        kubelet_root=kubelet_root,
        node_name=node_name,
        hostname_label=hostname_label,
        counters=counters,
    )


def load_dra(
    kubelet_root: Path,
    cdi_root: Path,
    node_name: str,
    backend: Backend,
    *,
    store: ObjectStore | None = None,
    kubernetes_version: str | None = None,
    driver: Callable[[], NodeDriver | None] | None = None,
    ownership: GpuOwnership | None = None,
    namespace: str | None = None,
    shares: SharePolicy = DISABLED_POLICY,
    on_event: EventSink | None = None,
) -> Component:
    """The DRA drivers; ``namespace``: the agent's, which is the controller's (the chart's
    release namespace), the one namespace whose IMEX daemon claims are prepared; ``on_event``
    records the Warnings of memory shares' MPS daemons (on the Node)."""
    from kgpu.kubelet.nvidia_cdi import for_backend

    return DraComponent(
        kubelet_root=kubelet_root,
        cdi_root=cdi_root,
        node_name=node_name,
        backend=backend,
        store=store,
        driver_factories=(
            partial(compute_domain_driver, daemon_namespace=namespace)
            if namespace
            else compute_domain_driver,
        ),
        kubernetes_version=kubernetes_version,
        node_driver_for=(lambda _backend: driver()) if driver is not None else for_backend,
        ownership=ownership,
        shares=shares,
        on_event=on_event,
    )
