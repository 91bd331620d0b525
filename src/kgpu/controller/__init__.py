"""``kgpu controller``: the cluster-wide process (ComputeDomains, DeviceClasses, the clique
placement webhook), leader-elected with a ``coordination.k8s.io/v1`` Lease.

``process`` wires the parts: ``index`` (informers and the indexes a domain's sync reads),
``domains`` (which keys an event queues, what syncing a key does), ``workqueue`` (client-go's
rate-limited work queue), ``leaderelection`` (client-go's Lease semantics), ``fence`` (no write
unless leading), ``deviceclasses`` (DeviceClasses kept present), ``webhook`` (the mutating
admission webhook) and ``health`` (``/healthz``, ``/readyz``). The decisions are the core's
(:mod:`kgpu.computedomain`); this package only reads, queues and writes.
"""

from kgpu.controller.process import Controller, ControllerOptions

__all__ = ["Controller", "ControllerOptions"]
