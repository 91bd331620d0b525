"""AllocationResults as kube-scheduler writes them, and its prioritized-list score.

* ``devices.results``: request (``parent/sub`` for an alternative), driver, pool, device, plus
  ``adminAccess``, the request's ``tolerations``, the device's ``bindingConditions`` and
  ``bindingFailureConditions`` (with the binding gates on), ``shareID`` and
  ``consumedCapacity`` for shared devices.
* ``devices.config``: each class's configs once, ``FromClass``, listing the requests that use
  the class; then the claim's configs, ``FromClaim``, those without ``requests`` and those
  naming a request or the chosen ``request/subrequest`` (once per request they name).
* ``nodeSelector``: ``metadata.name In [node]`` as soon as one device is node-local or binds to
  the node; else the union of the slices' (or devices') selectors in one term; none when every
  device is available on all nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kgpu.dra.capacity import format_quantity
from kgpu.dra.nodeselect import local_selector
from kgpu.dra.requests import FIRST_AVAILABLE_MAX, AllocationError, Slot

if TYPE_CHECKING:
    from kgpu.dra.search import Taken

Obj = dict[str, Any]


def device_results(taken: Sequence[Taken], binding: bool) -> list[Obj]:
    out = []
    for t in taken:
        req, dev = t.req, t.dev
        item: Obj = {
            "request": req.result_name,
            "driver": dev.id[0],
            "pool": dev.id[1],
            "device": dev.id[2],
        }
        if req.admin:
            item["adminAccess"] = True
        if req.tolerations:
            item["tolerations"] = [dict(t) for t in req.tolerations]
        if binding:
            for key in ("bindingConditions", "bindingFailureConditions"):
                if dev.raw.get(key):
                    item[key] = list(dev.raw[key])
        if t.share:
            item["shareID"] = t.share
            if t.consumed:
                caps = dev.capacities
                item["consumedCapacity"] = {
                    caps[k].name: format_quantity(v) for k, v in t.consumed.items()
                }
        out.append(item)
    return out


def configs(claim: Mapping[str, Any], slots: Sequence[Slot]) -> list[Obj]:
    chosen = [slot.alternatives[slot.chosen] for slot in slots]
    out: list[Obj] = []
    by_class: dict[str, list[Obj]] = {}
    for req in chosen:
        if req.class_name in by_class:
            for seen in by_class[req.class_name]:
                seen["requests"].append(req.result_name)
            continue
        entries: list[Obj] = []
        for cfg in (req.class_obj.get("spec") or {}).get("config") or []:
            body = {k: v for k, v in cfg.items() if k != "requests"}
            entries.append({"source": "FromClass", "requests": [req.result_name], **body})
        by_class[req.class_name] = entries
        out.extend(entries)
    for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        wanted = list(cfg.get("requests") or [])
        body = {k: v for k, v in cfg.items() if k != "requests"}
        if not wanted:
            out.append({"source": "FromClaim", **body})
            continue
        for slot, req in zip(slots, chosen, strict=True):
            if slot.name in wanted or (slot.subrequests and req.result_name in wanted):
                out.append({"source": "FromClaim", "requests": wanted, **body})
    return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a.get("key") == b.get("key")
        and a.get("operator") == b.get("operator")
        and set(a.get("values") or []) == set(b.get("values") or [])
    )


def node_selector(taken: Iterable[Taken], node_name: str) -> Obj | None:
    fields: list[Obj] = []
    exprs: list[Obj] = []
    for t in taken:
        dev = t.dev
        spec = dev.raw if dev.per_device else dev.slice.spec
        if spec.get("nodeName") or dev.raw.get("bindsToNode"):
            return local_selector(node_name)
        selector = spec.get("nodeSelector")
        if not selector:
            continue
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if terms:
            for src, into in (
                (terms[0].get("matchFields"), fields),
                (terms[0].get("matchExpressions"), exprs),
            ):
                for r in src or []:
                    if not any(_same(r, x) for x in into):
                        into.append(r)
    if not fields and not exprs:
        return None
    term: Obj = {}
    if exprs:
        term["matchExpressions"] = exprs
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def prioritized_list_score(claims: Sequence[Mapping[str, Any]], allocations: Sequence[Obj]) -> int:
    """kube-scheduler 1.35's DynamicResources Score for one node: for every ``firstAvailable``
    request, ``8 - index`` of the subrequest that was chosen (the first alternative scores
    highest), summed over the pod's claims. The framework then normalizes scores across nodes
    to 0..100."""
    score = 0
    for claim, allocation in zip(claims, allocations, strict=True):
        chosen = {
            str(r.get("request"))
            for r in (allocation.get("devices") or {}).get("results") or []
            if "/" in str(r.get("request"))
        }
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            for i, sub in enumerate(req.get("firstAvailable") or []):
                if f"{req.get('name')}/{sub.get('name')}" in chosen:
                    score += FIRST_AVAILABLE_MAX - i
    return score
