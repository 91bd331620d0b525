"""DeviceClasses kept present: the classes kgpu's DRA drivers' claims name
(:func:`kgpu.dra.classes.device_classes`), in the ``resource.k8s.io`` version the cluster serves.

Why the controller and not only the Helm chart: a class deleted by hand (or never installed,
when the chart was rendered for another version) makes every claim naming it unschedulable
with no hint on the kgpu side. A DeviceClass informer watches them; a missing class is created
and a changed selector is put back, at once, by an event (no timer). The version is the
store's business: :class:`~kgpu.cluster.kube.KubeStore` speaks the newest of ``v1``,
``v1beta2``, ``v1beta1`` the server serves and converts at the edge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kgpu.computedomain.objects import covers
from kgpu.dra.api import RESOURCE_API
from kgpu.dra.classes import device_classes
from kgpu.store import AlreadyExists, Informer, NotFound, ObjectStore, SharedInformers

log = logging.getLogger(__name__)

Obj = dict[str, Any]
API = RESOURCE_API
#: ``--device-classes`` values: the Helm value groups of NVIDIA's DRA driver chart.
GROUPS = ("gpus", "compute-domains")
KEY = ("deviceclasses",)


def wanted_classes(groups: Sequence[str]) -> list[Obj]:
    """The classes of the chosen groups."""
    return device_classes(gpus="gpus" in groups, compute_domains="compute-domains" in groups)


class DeviceClassKeeper:
    """Creates missing classes and restores changed ones; ``store`` is the fenced store."""

    def __init__(self, store: ObjectStore, informers: SharedInformers, groups: Sequence[str]):
        self.store = store
        self.informers = informers
        self.wanted = {c["metadata"]["name"]: c for c in wanted_classes(groups)}
        self.informer: Informer | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.created = 0
        self.restored = 0

    def start(self, enqueue: Callable[[tuple[str, ...]], None]) -> None:
        if not self.wanted:
            return
        self.informer = self.informers.acquire(API, "DeviceClass")

        def changed(*objs: Obj) -> None:
            if any(o.get("metadata", {}).get("name") in self.wanted for o in objs):
                enqueue(KEY)

        self._unsubscribe = self.informer.add_handler(
            on_update=lambda old, new: changed(new), on_delete=changed
        )

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.informer is not None:
            self.informers.release(self.informer)
            self.informer = None

    def sync(self) -> None:
        informer = self.informer
        if informer is None:
            return
        for name, desired in sorted(self.wanted.items()):
            current = informer.get(name)
            if current is None:
                try:
                    self.store.create(desired)
                    self.created += 1
                    log.info("DeviceClass %s was missing: created", name)
                except AlreadyExists:
                    continue  # the cache lags: it exists
            elif not covers(current.get("spec"), desired["spec"]):
                try:
                    self.store.patch(API, "DeviceClass", name, {"spec": desired["spec"]})
                    self.restored += 1
                    log.warning("DeviceClass %s was changed: its selectors are restored", name)
                except NotFound:
                    continue
