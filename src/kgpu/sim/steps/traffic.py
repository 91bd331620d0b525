"""``traffic``: GPU load on a workload (:mod:`kgpu.sim.traffic`), so the metrics, dashboards
and autoscalers reading them have something to see."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import join_path, shown
from kgpu.sim.scenario_parts import TRAFFIC_KINDS, ObjectRef, parse_ref
from kgpu.sim.steps.base import Step, StepInput, Verbs

#: A load beyond this is a typo, not a workload (a million GPUs busy).
MAX_GPU_UTILIZATION = 100_000_000


@dataclass(frozen=True, kw_only=True)
class TrafficStep(Step):
    action = "traffic"
    ref: ObjectRef
    gpu_utilization: float

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        ref = parse_ref(value, into.path, into.err, default_kind="Deployment")
        if isinstance(value, Mapping):
            for key in value:
                if key not in ("kind", "name", "namespace", "apiVersion", "gpuUtilization"):
                    into.problem(
                        f"unknown field {shown(key)}; allowed: kind, name, namespace, "
                        "gpuUtilization",
                        join_path(into.path, str(key)),
                    )
        load = value.get("gpuUtilization") if isinstance(value, Mapping) else None
        if (
            isinstance(load, bool)
            or not isinstance(load, int | float)
            or not math.isfinite(load)
            or not 0 <= load <= MAX_GPU_UTILIZATION
        ):
            into.problem(
                f"{shown(load)}: must be the percent of one GPU the workload keeps busy in total, "
                "a number >= 0 (300: three GPUs busy)",
                join_path(into.path, "gpuUtilization"),
            )
            return None
        if ref is not None and ref.kind not in TRAFFIC_KINDS:
            into.problem(
                f"{shown(ref.kind)}: allowed: {', '.join(TRAFFIC_KINDS)}",
                join_path(into.path, "kind"),
            )
            return None
        if ref is None:
            return None
        return cls(ref=ref, gpu_utilization=float(load), title=into.title, index=into.index)

    def summary(self) -> str:
        return f"traffic on {self.ref.kind}/{self.ref.name}: {self.gpu_utilization:g}% of one GPU"

    def perform(self, cluster: Verbs) -> None:
        cluster.set_traffic(self.ref, self.gpu_utilization)


__all__ = ["TrafficStep"]
