"""The DRA and ComputeDomain plugins every simulated cluster runs: plain imports, since they
ship in the same wheel (a broken module fails the run loudly instead of vanishing into a note).
"""

from __future__ import annotations

from pathlib import Path

from kgpu.dra.classes import device_classes
from kgpu.dra.features import DEFAULT, Features
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy
from kgpu.sim.computedomain import ComputeDomainController, ComputeDomainKubeletPlugin
from kgpu.sim.dra_node import DraKubeletPlugin
from kgpu.sim.dra_scheduler import DraSchedulerPlugin, ensure_classes
from kgpu.sim.journal import SimStore
from kgpu.sim.plugins import Controller, KubeletPlugin, SchedulerPlugin


def load_plugins(
    work_dir: Path,
    features: Features = DEFAULT,
    shares: SharePolicy = DISABLED_POLICY,
) -> tuple[list[SchedulerPlugin], list[KubeletPlugin], list[Controller], list[str]]:
    """The scheduler plugins, kubelet plugins and controllers of DRA and ComputeDomains, each
    kubelet plugin with its own directory under ``work_dir``; the scheduler plugin's allocator
    runs with ``features`` (the scenario release's gates); the DRA driver publishes its GPUs
    under ``shares`` (the scenario's ``draDriver`` values); the simulated API server (its
    store) drops the shared fields when ``DRAConsumableCapacity`` is off."""
    sched: list[SchedulerPlugin] = [DraSchedulerPlugin(features)]
    kubelet: list[KubeletPlugin] = [
        DraKubeletPlugin(work_dir / "dra", shares=shares),
        ComputeDomainKubeletPlugin(work_dir / "computedomain"),
    ]
    ctrls: list[Controller] = [ComputeDomainController()]
    return sched, kubelet, ctrls, []


def install_device_classes(store: SimStore, warnings: list[str]) -> None:
    """The DRA driver is installed: its DeviceClasses exist (``gpu.nvidia.com``,
    ``mig.nvidia.com`` and the ComputeDomain classes), as the Helm chart creates them."""
    with store.muted():
        ensure_classes(store, device_classes())
