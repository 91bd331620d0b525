"""The feature gates that change what kube-scheduler's DRA allocator does, with 1.36 defaults.

Upstream's allocator takes a ``Features`` value built from kube-scheduler's gates; the same
names are used here so ``--feature-gates DRAPrioritizedList=false`` means what it means on a
cluster. What turning a gate off does is upstream's, not kgpu's own: a request using a disabled
feature is an error (``has subrequests, but the DRAPrioritizedList feature is disabled``), a
slice or device using one is ignored as if it did not exist.

Defaults are those of Kubernetes 1.36 (every gate on), with one deliberate exception:
``DRADeviceTaintRules`` is beta but off in 1.36 only because its API version is off by default;
DeviceTaintRule objects in kgpu's input mean that API is served, so kgpu honours them unless the
gate is turned off explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

#: gate name -> (Features field, what it covers)
GATES: dict[str, tuple[str, str]] = {
    "DRAAdminAccess": ("admin_access", "adminAccess requests (GA in 1.36)"),
    "DRAPrioritizedList": ("prioritized_list", "firstAvailable subrequests (GA in 1.36)"),
    "DRAPartitionableDevices": (
        "partitionable_devices",
        "sharedCounters, consumesCounters, perDeviceNodeSelection (beta in 1.36)",
    ),
    "DRADeviceTaints": ("device_taints", "device taints and request tolerations (beta in 1.36)"),
    "DRADeviceTaintRules": (
        "device_taint_rules",
        "DeviceTaintRule objects (beta in 1.36; upstream default off, see docs/dra.md)",
    ),
    "DRADeviceBindingConditions": (
        "device_binding_conditions",
        "bindingConditions, bindingFailureConditions, bindsToNode (beta in 1.36)",
    ),
    "DRAResourceClaimDeviceStatus": (
        "resource_claim_device_status",
        "device status in claims; binding conditions need it too (beta)",
    ),
    "DRAConsumableCapacity": (
        "consumable_capacity",
        "allowMultipleAllocations, capacity requests, distinctAttribute (beta in 1.36)",
    ),
    "DRAExtendedResource": (
        "extended_resource",
        "DeviceClass.extendedResourceName for pod resource requests (beta in 1.36)",
    ),
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
                raise FeatureGateError(
                    f"unknown feature gate {name!r}; known: {', '.join(sorted(GATES))}"
                )
            if not isinstance(value, bool):
                raise FeatureGateError(f"{name}: must be true or false, not {value!r}")
            changes[GATES[name][0]] = value
        return replace(self, **changes)

    def parse(self, text: str) -> Features:
        """Apply a kube-scheduler style ``Name=true,Other=false`` list."""
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
        return self.with_gates(gates)

    def gates(self) -> dict[str, bool]:
        """``{GateName: on}`` for every gate, for output and docs."""
        return {name: bool(getattr(self, attr)) for name, (attr, _) in GATES.items()}


DEFAULT = Features()
