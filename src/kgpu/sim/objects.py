"""``kubectl apply``, ``delete`` and ``scale`` against the simulated cluster.

Pods go straight to the simulator's records (a pod's spec is immutable, so re-applying one
changes nothing); every other object goes to the store, where the workload controllers and
plugins find it. Re-applying an object merges as ``kubectl apply`` does: fields in the manifest
are set, fields the previous apply set and this one does not are removed, everything else
(status, labels and spec fields others wrote, the object's identity) stays; a manifest that
changes nothing writes nothing. A ConfigMap holding device-plugin or mig-parted configs is
loaded as the agent would load it, and every node is recomputed under the new configs; a bad
one leaves the last good configs serving. Kinds nothing simulates are stored and reported as
unsupported.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from kgpu.errors import FieldError
from kgpu.sim import nodeside
from kgpu.sim.admission import AdmissionDenied
from kgpu.sim.context import SimContext
from kgpu.sim.controllers.base import API_VERSIONS
from kgpu.sim.manifests import Manifest, check, passes_through, simulated
from kgpu.sim.node_lifecycle import refresh_all
from kgpu.sim.pod_lifecycle import create_pod, delete_pod
from kgpu.sim.scenario_parts import ObjectRef
from kgpu.store import CLUSTER_SCOPED, NotFound, group_of, key_of

Obj = dict[str, Any]


def _not_found(ctx: SimContext, kind: str, namespace: str, name: str) -> None:
    ctx.emit("Warning", "NotFound", f"{kind}/{namespace}/{name}", f"{kind} {name!r} not found")


def merge_applied(current: Obj, desired: Obj, last: Obj) -> Obj:
    """``kubectl apply``'s three-way merge of maps: ``desired`` (this manifest) wins, keys the
    ``last`` applied manifest had and ``desired`` drops are removed, the rest of ``current``
    stays. Lists and values are replaced whole."""
    out = dict(current)
    for key, value in desired.items():
        mine = current.get(key)
        if isinstance(value, dict) and isinstance(mine, dict):
            before = last.get(key)
            out[key] = merge_applied(mine, value, before if isinstance(before, dict) else {})
        else:
            out[key] = copy.deepcopy(value)
    for key in last:
        if key not in desired:
            out.pop(key, None)
    return out


def _store_apply(ctx: SimContext, obj: Obj) -> tuple[Obj, bool]:
    """Create the object, or merge the manifest into it; (stored object, created?). Nothing is
    written when the merge changes nothing ("unchanged", as kubectl says)."""
    desired = copy.deepcopy(obj)
    desired.pop("status", None)  # status is the controllers' to write
    if desired.get("kind") not in CLUSTER_SCOPED:
        desired.setdefault("metadata", {}).setdefault("namespace", "default")
    key = key_of(desired)
    _group, kind, ns, name = key
    last = ctx.last_applied.get(key, {})
    try:
        current = ctx.store.get(str(obj.get("apiVersion")), kind, name, ns or None)
    except NotFound:
        ctx.admission.admit_object(obj)  # AdmissionDenied: nothing applied
        ctx.last_applied[key] = desired
        return ctx.store.apply(obj), True
    merged = merge_applied(current, desired, last)
    ctx.admission.admit_object(merged, current)
    ctx.last_applied[key] = desired
    if merged == current:
        return current, False
    return ctx.store.update(merged), False


def apply(ctx: SimContext, manifest: Manifest | Obj) -> None:
    """``kubectl apply`` for one object."""
    if not isinstance(manifest, Manifest):
        manifest = check(manifest, "", 0)
    obj = manifest.obj
    kind = manifest.kind
    if kind == "Pod":
        if "/".join(key_of(obj)[2:]) not in ctx.pods:
            try:
                create_pod(ctx, copy.deepcopy(obj))
            except AdmissionDenied as exc:  # kubectl: Error from server (Forbidden)
                ns, name = key_of(obj)[2:]
                ctx.emit("Warning", "Forbidden", f"Pod/{ns or 'default'}/{name}", str(exc))
        return
    try:
        with ctx.store.muted():
            stored, created = _store_apply(ctx, obj)
    except AdmissionDenied as exc:  # kubectl: Error from server (Forbidden)
        ns, name = key_of(obj)[2:]
        ctx.emit("Warning", "Forbidden", f"{kind}/{ns or 'default'}/{name}", str(exc))
        return
    meta = stored["metadata"]
    if kind == "ConfigMap" and nodeside.is_config_map(stored):
        name = f"ConfigMap {meta['namespace']}/{meta['name']}"
        text = yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "data": stored.get("data"),
            }
        )
        if ctx.inline_configs.get(name) != text:
            ctx.inline_configs[name] = text
            _reload_configs(ctx)
    if created and not simulated(kind) and not passes_through(kind):
        what = f"{kind} {meta['name']} ({obj.get('apiVersion')})"
        ctx.unsupported.append(what)
        ctx.emit(
            "Warning",
            "Unsupported",
            f"{kind}/{meta.get('namespace', '')}/{meta['name']}".replace("//", "/"),
            f"{what} is stored but not simulated",
        )


def delete(ctx: SimContext, item: ObjectRef | Manifest) -> None:
    """``kubectl delete`` for one object (cascading through its controllers)."""
    if isinstance(item, Manifest):
        _group, kind, ns, name = key_of(item.obj)
        api = str(item.obj.get("apiVersion"))
    else:
        kind, name, ns = item.kind, item.name, item.namespace
        api = item.api_version or API_VERSIONS.get(kind, "v1")
    if kind == "Pod":
        if f"{ns}/{name}" in ctx.pods:
            delete_pod(ctx, f"{ns}/{name}")
        return
    with ctx.store.muted():
        try:
            ctx.store.delete(api, kind, name, None if kind == "Node" else ns)
        except NotFound:
            _not_found(ctx, kind, ns, name)
            return
    ctx.last_applied.pop((group_of(api), kind, "" if kind in CLUSTER_SCOPED else ns, name), None)
    if kind == "ConfigMap" and ctx.inline_configs.pop(f"ConfigMap {ns}/{name}", ""):
        _reload_configs(ctx)


def scale(ctx: SimContext, ref: ObjectRef, replicas: int) -> None:
    """``kubectl scale``: a Job's parallelism, an MPIJob's workers, others' replicas."""
    api = ref.api_version or API_VERSIONS[ref.kind]
    try:
        obj = ctx.store.get(api, ref.kind, ref.name, ref.namespace)
    except NotFound:
        _not_found(ctx, ref.kind, ref.namespace, ref.name)
        return
    spec = obj.setdefault("spec", {})
    if ref.kind == "Job":
        spec["parallelism"] = replicas
    elif ref.kind == "MPIJob":
        spec["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    else:
        spec["replicas"] = replicas
    with ctx.store.muted():
        ctx.store.update(obj)


def _reload_configs(ctx: SimContext) -> None:
    try:
        ctx.configs = nodeside.load_configs(ctx.scenario.configs, ctx.inline_configs)
    except FieldError as exc:
        ctx.emit("Warning", "InvalidConfig", "ConfigMap", str(exc))
        return
    refresh_all(ctx)
