"""The scenario key ``migManager``: how the MIG manager on each simulated node behaves.

Written at the top of a scenario (every node) or on a node group (``nodes[i].migManager``,
``addNodes``), where each given field overrides the scenario's::

    migManager:
      enabled: true       # the GPU Operator's migManager.enabled: false leaves layouts unapplied
      evictPods: false    # evict the pods holding GPUs whose layout changes (kgpu's evictPods)
      drainTimeout: 5m    # how long to wait for them before the GPU fails (upstream: 5 minutes)
      withReboot: false   # WITH_REBOOT: reboot the node when a mode change needs a GPU reset

The fields are the agent's MIG manager options (:class:`kgpu.drivers.migmanager.MigManagerOptions`)
under the names of docs/mig-manager.md. Only the parsing lives here: the scenario loader and the
node groups read it without importing the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Protocol

from kgpu.errors import join_path

#: the fields of ``migManager``
KEYS = ("enabled", "evictPods", "drainTimeout", "withReboot")


@dataclass(frozen=True)
class MigManagerSettings:
    """What a scenario or node group says; None: not said (the scenario's, else the default)."""

    enabled: bool | None = None
    evict_pods: bool | None = None
    drain_timeout_s: float | None = None
    with_reboot: bool | None = None

    def over(self, base: MigManagerSettings) -> MigManagerSettings:
        """These settings where given, ``base``'s elsewhere."""
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(base, **{k: v for k, v in given.items() if v is not None})


class _Problems(Protocol):
    """The scenario's error list (:class:`kgpu.sim.scenario_parts.Errors`)."""

    def add(self, message: str, path: str) -> None: ...


def parse_mig_manager(
    raw: object, path: str, err: _Problems, duration: Callable[[object], float]
) -> MigManagerSettings:
    """``migManager`` as written; each problem is added to ``err`` with its field path.
    ``duration`` reads ``drainTimeout`` as the scenario reads every duration (ValueError)."""
    if raw is None:
        return MigManagerSettings()
    if not isinstance(raw, Mapping):
        err.add(f"must be a map with {', '.join(KEYS)}", path)
        return MigManagerSettings()
    for key in raw:
        if key not in KEYS:
            err.add(f"unknown field {key!r}; allowed: {', '.join(KEYS)}", join_path(path, str(key)))
    flags: dict[str, bool | None] = {}
    for key in ("enabled", "evictPods", "withReboot"):
        value = raw.get(key)
        if value is not None and not isinstance(value, bool):
            err.add("must be true or false", join_path(path, key))
            value = None
        flags[key] = value
    timeout: float | None = None
    if raw.get("drainTimeout") is not None:
        try:
            timeout = duration(raw["drainTimeout"])
        except ValueError as exc:
            err.add(str(exc), join_path(path, "drainTimeout"))
    return MigManagerSettings(
        enabled=flags["enabled"],
        evict_pods=flags["evictPods"],
        drain_timeout_s=timeout,
        with_reboot=flags["withReboot"],
    )


__all__ = ["KEYS", "MigManagerSettings", "parse_mig_manager"]
