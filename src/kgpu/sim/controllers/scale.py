"""The ``scale`` subresource the autoscalers read and write: a workload's desired replicas
(``spec.replicas``), how many it has (``status.replicas``) and the label selector of its pods.

KEDA and the HPA controller both go through it, as on a real cluster both call the scale
subresource of whatever ``scaleTargetRef`` names. The simulator serves it for Deployments,
StatefulSets and ReplicaSets; another kind is answered as an API server without that resource
answers (``no matches for kind``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.node.selectors import operator_matches
from kgpu.sim import objects
from kgpu.sim.context import SimContext
from kgpu.sim.scenario_parts import ObjectRef
from kgpu.sim.state import PodRecord
from kgpu.store import NotFound

#: Kinds with a scale subresource in the simulator, and their API group's resource name.
SCALABLE = {
    "Deployment": "deployments.apps",
    "StatefulSet": "statefulsets.apps",
    "ReplicaSet": "replicasets.apps",
}


@dataclass(frozen=True)
class Scale:
    kind: str
    name: str
    namespace: str
    spec_replicas: int
    status_replicas: int
    selector: Mapping[str, Any] = field(default_factory=dict)

    @property
    def selector_string(self) -> str:
        """``status.selector`` as the API serves it (``app=web,tier in (a,b)``)."""
        parts = [f"{k}={v}" for k, v in sorted((self.selector.get("matchLabels") or {}).items())]
        for expr in self.selector.get("matchExpressions") or ():
            op, key = expr.get("operator"), expr.get("key")
            values = ",".join(sorted(str(v) for v in expr.get("values") or ()))
            if op == "Exists":
                parts.append(str(key))
            elif op == "DoesNotExist":
                parts.append(f"!{key}")
            else:
                parts.append(f"{key} {str(op).lower()} ({values})")
        return ",".join(parts)


class ScaleError(Exception):
    """The scale subresource could not be read; the message is the API server's."""


def get_scale(ctx: SimContext, api_version: str, kind: str, name: str, namespace: str) -> Scale:
    resource = SCALABLE.get(kind)
    if resource is None:
        group = api_version.rpartition("/")[0]
        raise ScaleError(f'no matches for kind "{kind}" in group "{group}"')
    try:
        obj = ctx.store.get("apps/v1", kind, name, namespace)
    except NotFound:
        raise ScaleError(f'{resource} "{name}" not found') from None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return Scale(
        kind,
        name,
        namespace,
        int(spec.get("replicas", 1)),
        int(status.get("replicas", 0)),
        spec.get("selector") or {},
    )


def set_replicas(ctx: SimContext, scale: Scale, replicas: int) -> None:
    """Write ``spec.replicas`` (``kubectl scale`` does the same)."""
    objects.scale(ctx, ObjectRef(scale.kind, scale.name, scale.namespace), replicas)


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if not selector:
        return False  # an empty selector of a scale target matches nothing
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(
        operator_matches(
            e.get("operator"), [str(v) for v in e.get("values") or ()], labels.get(str(e["key"]))
        )
        for e in selector.get("matchExpressions") or ()
    )


def selected_pods(ctx: SimContext, scale: Scale) -> list[PodRecord]:
    """The pods the target's selector matches in its namespace (the HPA's pod lister)."""
    prefix = f"{scale.namespace}/"
    return [
        rec
        for key, rec in ctx.pods.items()
        if key.startswith(prefix)
        and _selects(scale.selector, (rec.obj.get("metadata") or {}).get("labels") or {})
    ]


__all__ = ["SCALABLE", "Scale", "ScaleError", "get_scale", "selected_pods", "set_replicas"]
