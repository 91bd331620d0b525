"""The feature gates that change what kube-scheduler's DRA allocator does, per release.

Upstream's allocator takes a ``Features`` value built from kube-scheduler's gates; the same
names are used here so ``--feature-gates DRAPrioritizedList=false`` means what it means on a
cluster. What turning a gate off does is upstream's, not kgpu's own: a request using a disabled
feature is an error (``has subrequests, but the DRAPrioritizedList feature is disabled``), a
slice or device using one is ignored as if it did not exist.

Each release's defaults come from the one release table, :mod:`kgpu.releases`
(:meth:`Features.for_release`); :data:`DEFAULT` is the newest release's (1.37: every gate on).
Before 1.35 DeviceTaintRules had no gate of their own: ``DRADeviceTaints`` covered them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kgpu import releases

#: gate name -> (Features field, what it covers)
GATES: dict[str, tuple[str, str]] = {
    name: (attr, releases.GATES[name].what)
    for name, attr in (
        ("DRAAdminAccess", "admin_access"),
        ("DRAPrioritizedList", "prioritized_list"),
        ("DRAPartitionableDevices", "partitionable_devices"),
        ("DRADeviceTaints", "device_taints"),
        ("DRADeviceTaintRules", "device_taint_rules"),
        ("DRADeviceBindingConditions", "device_binding_conditions"),
        ("DRAResourceClaimDeviceStatus", "resource_claim_device_status"),
        ("DRAConsumableCapacity", "consumable_capacity"),
        ("DRAExtendedResource", "extended_resource"),
    )
}


class FeatureGateError(ValueError):
    """A ``--feature-gates`` value or ``featureGates`` entry that is not ``Name=true|false``
    with a known name."""


@dataclass(frozen=True)
class Features:
    """Which allocator features are on (field per gate, see :data:`GATES`)."""

    admin_access: bool = True
    prioritized_list: bool = True
    partitionable_devices: bool = True
    device_taints: bool = True
    device_taint_rules: bool = True
    device_binding_conditions: bool = True
    resource_claim_device_status: bool = True
    consumable_capacity: bool = True
    extended_resource: bool = True

    @property
    def binding(self) -> bool:
        """Upstream's DeviceBindingAndStatus: binding conditions need both gates."""
        return self.device_binding_conditions and self.resource_claim_device_status

    @classmethod
    def none(cls) -> Features:
        """Every gate off: upstream's zero ``Features``, used by its allocator tests."""
        return cls(**{f.name: False for f in fields(cls)})

    @classmethod
    def for_release(cls, minor: int, gates: Mapping[str, Any] | str = "") -> Features:
        """Release ``1.<minor>``'s defaults (:mod:`kgpu.releases`) with ``gates`` (a map or a
        ``Name=true,...`` list) applied as that release's kube-scheduler would: a gate the
        release does not have, or a locked gate set against its lock, is a
        :class:`FeatureGateError`."""
        rel = releases.release(minor)
        values = {name: _state_default(rel, name) for name in GATES}
        wanted = parse_gate_list(gates) if isinstance(gates, str) else dict(gates)
        for name, value in wanted.items():
            if name not in GATES:
                raise FeatureGateError(_unknown(name))
            state = rel.gate(name)
            if state is None:
                since = releases.GATES[name].since()
                raise FeatureGateError(
                    f"{name}: Kubernetes {rel.name} has no such feature gate (it exists from "
                    f"1.{since})"
                )
            if not isinstance(value, bool):
                raise FeatureGateError(f"{name}: must be true or false, not {value!r}")
            if state.locked and value != state.default:
                raise FeatureGateError(
                    f"{name}: cannot set it to {str(value).lower()} in Kubernetes {rel.name}, "
                    f"it is {state.stage} and locked to {str(state.default).lower()}"
                )
            values[name] = value
        if rel.gate("DRADeviceTaintRules") is None:  # before 1.35 DRADeviceTaints covers them
            values["DRADeviceTaintRules"] = values["DRADeviceTaints"]
        return cls.none().with_gates(values)

    @classmethod
    def enabled(cls, names: list[str] | tuple[str, ...]) -> Features:
        """Only the named gates on."""
        out = cls.none()
        return out.with_gates({n: True for n in names})

    def with_gates(self, gates: Mapping[str, Any]) -> Features:
        """A copy with ``{GateName: bool}`` applied; :class:`FeatureGateError` names the bad
        entry."""
        changes: dict[str, bool] = {}
        for name, value in gates.items():
            if name not in GATES:
                raise FeatureGateError(_unknown(name))
            if not isinstance(value, bool):
                raise FeatureGateError(f"{name}: must be true or false, not {value!r}")
            changes[GATES[name][0]] = value
        return replace(self, **changes)

    def parse(self, text: str) -> Features:
        """Apply a kube-scheduler style ``Name=true,Other=false`` list."""
        return self.with_gates(parse_gate_list(text))

    def gates(self) -> dict[str, bool]:
        """``{GateName: on}`` for every gate, for output and docs."""
        return {name: bool(getattr(self, attr)) for name, (attr, _) in GATES.items()}


def _unknown(name: str) -> str:
    return f"unknown feature gate {name!r}; known: {', '.join(sorted(GATES))}"


def _state_default(rel: releases.Release, name: str) -> bool:
    state = rel.gate(name)
    return state.default if state is not None else False


def parse_gate_list(text: str) -> dict[str, bool]:
    """A kube-scheduler style ``Name=true,Other=false`` list as a map."""
    gates: dict[str, bool] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or value not in ("true", "false"):
            raise FeatureGateError(
                f"{item!r}: expected Name=true or Name=false (e.g. DRAPrioritizedList=false)"
            )
        gates[name] = value == "true"
    return gates


DEFAULT = Features()
"""The newest release's defaults (every allocator gate on in 1.37)."""
