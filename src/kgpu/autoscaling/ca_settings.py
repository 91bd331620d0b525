"""cluster-autoscaler's settings: its command-line flags, by their names, with their defaults.

A scenario's ``clusterAutoscaler`` map takes the flags as a user passes them to
cluster-autoscaler (``scale-down-unneeded-time: 10m``), so a platform team can paste its own.
Durations use Go's syntax (``1m30s``, ``500ms``). Defaults are cluster-autoscaler's (v1.3x
``main.go``/``flags.go``). Two keys are kgpu's own, not flags: ``provisioning-delay``, how long
the simulated cloud takes from a scale-up to a Ready node (real GPU VMs take minutes: boot,
driver, device plugin; the default 0 makes them join right after the scan that asked), and
``expander-priorities``, the content of the ``cluster-autoscaler-priority-expander``
ConfigMap the ``priority`` expander reads (priority -> list of node-group name regexes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kgpu.config.goduration import INFINITE
from kgpu.config.goduration import parse_go_duration as go_parse
from kgpu.errors import FieldError, FieldProblem, join_path, shown
from kgpu.regex import RegexError
from kgpu.regex import compile as compile_regex

EXPANDERS = ("random", "most-pods", "least-waste", "priority")
#: The range of a Go ``int`` flag (64-bit): cluster-autoscaler refuses a value beyond it.
_GO_INT = (-(2**63), 2**63 - 1)


def parse_go_duration(value: object) -> float:
    """Seconds from a Go duration (``10m``, ``1m30s``, ``0``: Go's ``time.ParseDuration``, as
    the flag is parsed); plain numbers are seconds. Never negative, never past Go's largest
    duration (2562047h: a flag beyond it does not parse)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{shown(value)} is not a duration (write e.g. 10m, 1m30s, 500ms)")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{shown(value)} must not be negative")
        try:
            seconds = float(value)
        except OverflowError:  # an integer of hundreds of digits
            seconds = math.inf
        if not seconds * 1e9 <= INFINITE:  # inf and nan too
            raise ValueError(
                f"{shown(value, 40)} seconds is out of range for a Go duration (at most "
                f"{INFINITE // 10**9} seconds)"
            )
        return seconds
    text = value.strip()
    try:
        nanoseconds = go_parse(text)
    except ValueError:
        raise ValueError(
            f'time: invalid duration "{text[:80]}" (write e.g. 10m, 1m30s, 500ms)'
        ) from None
    if nanoseconds < 0:
        raise ValueError(f"{shown(text)} must not be negative")
    return nanoseconds / 1e9


def go_duration(seconds: float) -> str:
    """Seconds as Go prints a time.Duration: ``15m0s``, ``1h0m0s``, ``30s``, ``1.5s``."""
    if seconds == 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text_secs = f"{secs:g}s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{text_secs}"
    if minutes:
        return f"{int(minutes)}m{text_secs}"
    return text_secs


@dataclass(frozen=True)
class CASettings:
    scan_interval: float = 10.0
    provisioning_delay: float = 0.0  # kgpu's: the simulated cloud's time to a Ready node
    max_node_provision_time: float = 900.0
    scale_down_enabled: bool = True
    scale_down_unneeded_time: float = 600.0
    scale_down_unready_time: float = 1200.0
    scale_down_utilization_threshold: float = 0.5
    scale_down_gpu_utilization_threshold: float = 0.5
    scale_down_delay_after_add: float = 600.0
    scale_down_delay_after_delete: float = 0.0  # 0: the scan interval, as upstream
    scale_down_delay_after_failure: float = 180.0
    expander: tuple[str, ...] = ("random",)
    max_nodes_total: int = 0
    max_scale_down_parallelism: int = 10
    max_drain_parallelism: int = 1
    skip_nodes_with_system_pods: bool = True
    skip_nodes_with_local_storage: bool = True
    new_pod_scale_up_delay: float = 0.0
    expendable_pods_priority_cutoff: int = -10
    ignore_daemonsets_utilization: bool = False
    initial_node_group_backoff_duration: float = 300.0
    max_node_group_backoff_duration: float = 1800.0
    expander_priorities: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def delay_after_delete(self) -> float:
        return self.scale_down_delay_after_delete or self.scan_interval


_DURATIONS = {
    "scan-interval",
    "provisioning-delay",
    "max-node-provision-time",
    "scale-down-unneeded-time",
    "scale-down-unready-time",
    "scale-down-delay-after-add",
    "scale-down-delay-after-delete",
    "scale-down-delay-after-failure",
    "new-pod-scale-up-delay",
    "initial-node-group-backoff-duration",
    "max-node-group-backoff-duration",
}
_BOOLS = {
    "scale-down-enabled",
    "skip-nodes-with-system-pods",
    "skip-nodes-with-local-storage",
    "ignore-daemonsets-utilization",
}
_INTS = {
    "max-nodes-total",
    "max-scale-down-parallelism",
    "max-drain-parallelism",
    "expendable-pods-priority-cutoff",
}
_RATIOS = {"scale-down-utilization-threshold", "scale-down-gpu-utilization-threshold"}
#: Flag name -> field name, for every key the map accepts.
KEYS = {f.name.replace("_", "-"): f.name for f in fields(CASettings)}


def parse_settings(raw: object, path: str = "clusterAutoscaler") -> CASettings:
    """The settings of a scenario's ``clusterAutoscaler`` map; raises :class:`FieldError` with
    each problem at its key."""
    if raw is None:
        return CASettings()
    if not isinstance(raw, Mapping):
        raise FieldError(FieldProblem("must be a map of cluster-autoscaler flags", path))
    problems: list[FieldProblem] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        at = join_path(path, str(key))
        name = KEYS.get(str(key))
        if name is None:
            problems.append(
                FieldProblem(
                    f"unknown setting {key!r}: use cluster-autoscaler's flag names ("
                    + ", ".join(sorted(KEYS))
                    + ")",
                    at,
                )
            )
            continue
        try:
            values[name] = _value(str(key), value)
        except ValueError as exc:
            problems.append(FieldProblem(str(exc), at))
    if problems:
        raise FieldError(problems)
    return CASettings(**values)


def _value(key: str, value: object) -> Any:
    if key in _DURATIONS:
        seconds = parse_go_duration(value)
        if key == "scan-interval" and seconds <= 0:
            raise ValueError("must be longer than 0 (cluster-autoscaler scans every interval)")
        return seconds
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {shown(value)}")
        return value
    if key in _INTS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, got {shown(value)}")
        if key != "expendable-pods-priority-cutoff" and value < 0:
            raise ValueError("must not be negative")
        if not _GO_INT[0] <= value <= _GO_INT[1]:
            raise ValueError(
                f"{shown(value, 40)} is out of range for a Go int ({_GO_INT[0]} to {_GO_INT[1]})"
            )
        return value
    if key in _RATIOS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"must be a number between 0 and 1, got {shown(value)}")
        return float(value)
    if key == "expander":
        names = tuple(part.strip() for part in str(value).split(",") if part.strip())
        for name in names:
            if name not in EXPANDERS:
                raise ValueError(
                    f"unknown expander {name!r}: kgpu simulates "
                    + ", ".join(EXPANDERS)
                    + " (price and grpc need a cloud)"
                )
        if not names:
            raise ValueError("name at least one expander")
        return names
    assert key == "expander-priorities"
    if not isinstance(value, Mapping):
        raise ValueError("must map priorities (integers) to lists of node-group name regexes")
    out: dict[int, tuple[str, ...]] = {}
    for priority, patterns in value.items():
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"priority {shown(priority)} is not an integer")
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ValueError(f"priority {priority}: expected a list of regexes")
        for pattern in patterns:
            try:
                compile_regex(pattern)
            except RegexError as exc:
                raise ValueError(f"priority {priority}: bad regex {pattern!r}: {exc}") from None
        out[priority] = tuple(patterns)
    return out
