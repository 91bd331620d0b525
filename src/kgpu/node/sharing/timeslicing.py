"""Time-slicing: the GPU's scheduler runs the replicas' contexts in turns.

Device plugin (``sharing.timeSlicing``): each selected device becomes ``replicas`` ids and
nothing else changes for the container; a request for several replicas is refused only with
``failRequestsGreaterThanOne: true``. DRA (``strategy: TimeSlicing``): a ``GpuConfig`` may pick
the time-slice length (``timeSlicingConfig.interval``: Default, Short, Medium, Long, which
``nvidia-smi compute-policy`` takes as 0-3); a ``MigDeviceConfig`` has no interval (MIG devices
are not time-sliced by the driver's policy). kgpu records the interval and never changes a GPU's
compute policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kgpu.errors import FieldError, FieldProblem
from kgpu.node.sharing.base import SharingMode, SharingPlan, mapping_of, reject_unknown

#: Upstream's time-slice intervals and the value nvidia-smi's compute-policy takes for each.
INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}


@dataclass(frozen=True)
class TimeSlicingConfig:
    """``timeSlicingConfig`` of a DRA ``GpuConfig``."""

    interval: str = "Default"


class TimeSlicing(SharingMode):
    name = "time-slicing"
    title = "time-slicing"
    config_key = "timeSlicing"
    precedence = 1
    dra_strategy = "TimeSlicing"
    dra_config_key = "timeSlicingConfig"
    dra_kinds: ClassVar[frozenset[str]] = frozenset({"GpuConfig"})

    def parse_dra(self, raw: Mapping[str, Any], path: str, kind: str) -> object:
        if kind not in self.dra_kinds:
            return None
        ts_path = f"{path}.{self.dra_config_key}"
        given = raw.get(self.dra_config_key or "")
        ts = mapping_of(given, ts_path) if given is not None else {}
        reject_unknown(ts, ("interval",), ts_path)
        interval = ts.get("interval", "Default")
        if interval not in INTERVALS:
            raise FieldError(
                FieldProblem(
                    f"unknown time-slice interval {interval!r}; one of {', '.join(INTERVALS)}",
                    f"{ts_path}.interval",
                )
            )
        return TimeSlicingConfig(str(interval))

    def dra_plan(
        self, settings: object, claim_uid: str, uuids: Sequence[str], path: str
    ) -> SharingPlan:
        interval = settings.interval if isinstance(settings, TimeSlicingConfig) else "Default"
        return SharingPlan(
            settings={
                "strategy": self.dra_strategy,
                "interval": interval,
                "timeslice": INTERVALS[interval],
            }
        )


TIME_SLICING = TimeSlicing()
