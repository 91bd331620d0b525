"""What kube-apiserver drops on write when a feature gate is off (``dropDisabledFields`` in each
kind's registry strategy), for the gates kgpu publishes or reads fields of.

A real API server keeps a gated field out of storage when its gate is off, unless the object
already used it before the write (so turning a gate off does not strip existing objects on
their next update). The schema of an alpha release has the field either way, so checking the
schema alone would keep it; the stand-in applies these rules after the schema check.

Modelled: ``DRAConsumableCapacity`` on ResourceSlices (each device's
``allowMultipleAllocations`` and each capacity's ``requestPolicy``), ResourceClaims and
ResourceClaimTemplates (capacity requests, ``distinctAttribute`` constraints, results'
``shareID`` and ``consumedCapacity``): the rule is :func:`kgpu.dra.gated_fields.drop_disabled`,
which the simulator's store applies too. A driver that publishes shared GPUs to a 1.34-1.35
server without the gate thus sees its GPUs stored as ordinary, exclusive devices, and a claim
asking for GPU memory is stored as a plain claim for a device, as on a real cluster.
"""

from __future__ import annotations

from kgpu.dra.gated_fields import drop_disabled

__all__ = ["drop_disabled"]
