"""Finding the DRA and ComputeDomain plugins in this build.

Each feature lives in its own module; a build without one (or with one that fails to import
or start) still simulates everything else, and says in the run's warnings what it left out.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from kgpu.sim.journal import SimStore
from kgpu.sim.plugins import Controller, KubeletPlugin, SchedulerPlugin

#: (module under kgpu.sim, factory, kind, sub-directory of the work dir it is given)
_PLUGINS: tuple[tuple[str, str, str, str | None], ...] = (
    ("dra_scheduler", "DraSchedulerPlugin", "sched", None),
    ("computedomain", "ComputeDomainSchedulerPlugin", "sched", None),
    ("dra_node", "DraKubeletPlugin", "kubelet", "dra"),
    ("computedomain", "ComputeDomainKubeletPlugin", "kubelet", "computedomain"),
    ("computedomain", "ComputeDomainController", "ctrl", None),
)


def _make(module: str, attr: str, args: tuple[Any, ...], notes: list[str]) -> Any:
    """``kgpu.sim.<module>.<attr>(*args)``, or None when the module or factory is absent or
    broken (a note says which)."""
    try:
        mod = importlib.import_module(f"kgpu.sim.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"kgpu.sim.{module}":
            notes.append(f"plugin module kgpu.sim.{module} failed to import: {exc}")
        return None
    except Exception as exc:  # another part's module is broken: run without it, say so
        notes.append(f"plugin module kgpu.sim.{module} failed to import: {exc}")
        return None
    factory = getattr(mod, attr, None)
    if factory is None:
        return None
    try:
        return factory(*args)
    except Exception as exc:
        notes.append(f"plugin {module}.{attr} failed to start: {exc}")
        return None


def load_plugins(
    work_dir: Path,
) -> tuple[list[SchedulerPlugin], list[KubeletPlugin], list[Controller], list[str]]:
    """The DRA and ComputeDomain plugins, when their modules exist in this build."""
    sched: list[SchedulerPlugin] = []
    kubelet: list[KubeletPlugin] = []
    ctrls: list[Controller] = []
    notes: list[str] = []
    for module, attr, kind, sub in _PLUGINS:
        plugin = _make(module, attr, () if sub is None else (work_dir / sub,), notes)
        if plugin is None:
            continue
        if kind == "sched":
            sched.append(plugin)
        elif kind == "kubelet":
            kubelet.append(plugin)
        else:
            ctrls.append(plugin)
    return sched, kubelet, ctrls, notes


def install_device_classes(store: SimStore, warnings: list[str]) -> None:
    """The DRA driver is installed: its DeviceClasses exist (``gpu.nvidia.com``,
    ``mig.nvidia.com`` and the ComputeDomain classes), as the Helm chart creates them."""
    try:
        from kgpu.dra.classes import device_classes
        from kgpu.sim.dra_scheduler import ensure_classes
    except ImportError as exc:
        warnings.append(f"DRA DeviceClasses not installed: {exc}")
        return
    with store.muted():
        ensure_classes(store, device_classes())
