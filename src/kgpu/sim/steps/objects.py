"""Steps on objects: ``apply`` (files or inline manifests), ``delete`` (files or
``{kind, name, namespace}``) and ``scale``, as ``kubectl`` does them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import join_path, shown
from kgpu.sim.manifests import Manifest
from kgpu.sim.scenario_parts import MAX_PODS, SCALABLE, ObjectRef, parse_objects, parse_ref
from kgpu.sim.steps.base import Step, StepInput, Verbs


@dataclass(frozen=True, kw_only=True)
class ApplyStep(Step):
    action = "apply"
    manifests: tuple[Manifest, ...]

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step:
        manifests = parse_objects(value, into.path, into.base, into.err)
        return cls(manifests=tuple(manifests), title=into.title, index=into.index)

    def summary(self) -> str:
        return "apply " + ", ".join(m.name for m in self.manifests)

    def perform(self, cluster: Verbs) -> None:
        for manifest in self.manifests:
            cluster.apply(manifest)


@dataclass(frozen=True, kw_only=True)
class DeleteStep(Step):
    action = "delete"
    items: tuple[ObjectRef | Manifest, ...]

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step:
        items = value if isinstance(value, list) else [value]
        refs: list[ObjectRef | Manifest] = []
        for i, item in enumerate(items):
            at = join_path(into.path, i) if isinstance(value, list) else into.path
            if isinstance(item, str):
                refs.extend(parse_objects(item, at, into.base, into.err))
            else:
                ref = parse_ref(item, at, into.err)
                if ref:
                    refs.append(ref)
        return cls(items=tuple(refs), title=into.title, index=into.index)

    def summary(self) -> str:
        return "delete " + ", ".join(
            m.name if isinstance(m, Manifest) else f"{m.kind}/{m.name}" for m in self.items
        )

    def perform(self, cluster: Verbs) -> None:
        for item in self.items:
            cluster.delete(item)


@dataclass(frozen=True, kw_only=True)
class ScaleStep(Step):
    action = "scale"
    ref: ObjectRef
    replicas: int

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        ref = parse_ref(value, into.path, into.err, default_kind="Deployment")
        replicas = value.get("replicas") if isinstance(value, Mapping) else None
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            into.problem(
                f"{shown(replicas, 40)}: must be a non-negative integer",
                join_path(into.path, "replicas"),
            )
            return None
        if replicas > MAX_PODS:
            into.problem(
                f"{replicas}: at most {MAX_PODS} pods (kgpu sim's limit for one scenario)",
                join_path(into.path, "replicas"),
            )
            return None
        if ref and ref.kind not in SCALABLE:
            into.problem(
                f"{shown(ref.kind)}: allowed: {', '.join(SCALABLE)}", join_path(into.path, "kind")
            )
            return None
        if ref is None:
            return None
        return cls(ref=ref, replicas=replicas, title=into.title, index=into.index)

    def summary(self) -> str:
        return f"scale {self.ref.kind}/{self.ref.name} to {self.replicas}"

    def perform(self, cluster: Verbs) -> None:
        cluster.scale(self.ref, self.replicas)


__all__ = ["ApplyStep", "DeleteStep", "ScaleStep"]
