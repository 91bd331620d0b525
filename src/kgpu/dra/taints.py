"""Device taints, request tolerations and DeviceTaintRules, with kube-scheduler's semantics.

A device's taints come from its ResourceSlice and from every DeviceTaintRule whose selector
matches it; rules are merged into (copies of) the slices before the allocator sees them, as
kube-scheduler's ResourceSlice tracker does. Only the ``NoSchedule`` and ``NoExecute`` effects
keep a device from being allocated, and only when no toleration of the request tolerates them;
``None`` and effects this version does not know are ignored, so a newer cluster's taints never
block by accident.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

#: effects that prevent allocation unless tolerated
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """resourceclaim.ToleratesTaint: an empty effect or key in the toleration matches any;
    ``Exists`` matches any value, ``Equal`` (the default) the exact value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def blocking_taint(
    taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first taint that keeps the device from a request with these tolerations."""
    for taint in taints:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return taint
    return None


def _rule_taint(rule: Mapping[str, Any]) -> Obj:
    taint = dict((rule.get("spec") or {}).get("taint") or {})
    return {k: taint[k] for k in ("key", "value", "effect", "timeAdded") if taint.get(k)}


def _rule_matches(
    rule: Mapping[str, Any], slice_spec: Mapping[str, Any], device: Mapping[str, Any]
) -> bool:
    """Whether a DeviceTaintRule's ``deviceSelector`` (driver, pool, device name; each
    optional) picks this device; a rule without a selector taints every device."""
    sel = (rule.get("spec") or {}).get("deviceSelector") or {}
    if sel.get("driver") and sel["driver"] != slice_spec.get("driver"):
        return False
    if sel.get("pool") and sel["pool"] != (slice_spec.get("pool") or {}).get("name"):
        return False
    return not (sel.get("device") and sel["device"] != device.get("name"))


def apply_taint_rules(slices: Sequence[Obj], rules: Sequence[Obj]) -> list[Obj]:
    """The slices with every matching rule's taint appended to its devices' ``taints``. Slices
    no rule touches are returned as they are (not copied)."""
    if not rules:
        return list(slices)
    out: list[Obj] = []
    for s in slices:
        spec = s.get("spec") or {}
        patched: Obj | None = None
        for i, device in enumerate(spec.get("devices") or []):
            for rule in rules:
                if not _rule_matches(rule, spec, device):
                    continue
                if patched is None:
                    patched = copy.deepcopy(s)
                target = patched["spec"]["devices"][i]
                target["taints"] = [*(target.get("taints") or []), _rule_taint(rule)]
        out.append(patched if patched is not None else s)
    return out
