"""ComputeDomains in the simulated cluster: the controller and the node side of driver
``compute-domain.nvidia.com``.

* :class:`ComputeDomainController` runs :func:`kgpu.computedomain.reconcile.reconcile` in the
  controller loop, then lets every node's simulated IMEX daemon re-read its domain's clique
  (the node side rewrites the daemon's ``hosts`` mapping when the clique's daemons change, as
  upstream's daemon rewrites its /etc/hosts; ``nodes.cfg`` lists fixed names and never
  changes).
* :class:`ComputeDomainKubeletPlugin` is the kubelet's DRA plugin for that driver on every
  simulated node: it runs the agent's own :class:`~kgpu.kubelet.dra.plugin.DraPlugin` with the
  agent's :class:`~kgpu.drivers.computedomain.ComputeDomainHandler` (checkpoint, CDI files and IMEX
  config files under ``work_dir/<node>/``), so the simulator exercises the agent's code.

Placement in one NVLink clique is no simulator rule: the API server's admission step
(:mod:`kgpu.sim.admission`) runs kgpu's clique placement webhook mutation
(:mod:`kgpu.computedomain.admission`) and the stock InterPodAffinity filter does the rest, as on a
real cluster.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from kgpu.computedomain.api import (
    API_VERSION,
    DRIVER,
    KIND,
)
from kgpu.computedomain.imex import CHANNEL_DIR
from kgpu.computedomain.objects import DRIVER_NAMESPACE
from kgpu.computedomain.reconcile import reconcile
from kgpu.computedomain.slices import machine_clique
from kgpu.dra.api import RESOURCE_API
from kgpu.drivers.computedomain import ComputeDomainHandler
from kgpu.drivers.publish import publish_slices, unpublish_slices
from kgpu.hardware.model import Machine
from kgpu.kubelet.dra.handler import ClaimError, ClaimRef
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.sim.controllers.resourceclaim import pod_claim_name
from kgpu.sim.plugins import ContainerDevices, Event
from kgpu.store import NotFound, ObjectStore, list_read_only, object_ref

Obj = dict[str, Any]

#: Node agents per store, so the controller can wake the simulated IMEX daemons.
_AGENTS: weakref.WeakKeyDictionary[Any, weakref.WeakSet[ComputeDomainKubeletPlugin]] = (
    weakref.WeakKeyDictionary()
)


class ComputeDomainKubeletPlugin:
    """The kubelet DRA plugin of ``compute-domain.nvidia.com`` on every simulated node."""

    name = DRIVER

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)
        self._plugins: dict[str, DraPlugin] = {}
        self._handlers: dict[str, ComputeDomainHandler] = {}
        self._pods: dict[tuple[str, str], set[str]] = {}  # (node, claim uid) -> pod keys

    def handler(self, node_name: str) -> ComputeDomainHandler | None:
        return self._handlers.get(node_name)

    def node_dir(self, node_name: str) -> Path:
        return self.work_dir / node_name

    def _plugin(self, node_name: str, store: ObjectStore, clique: str | None) -> DraPlugin:
        plugin = self._plugins.get(node_name)
        if plugin is None:
            root = self.node_dir(node_name)
            handler = ComputeDomainHandler(
                node_name, store, root / "plugins" / DRIVER, clique=clique
            )
            plugin = DraPlugin(handler, root / "plugins" / DRIVER, root / "cdi", store)
            self._plugins[node_name] = plugin
            self._handlers[node_name] = handler
        elif clique is not None:
            self._handlers[node_name].clique = clique
        return plugin

    def register_node(self, node_name: str, machine: Machine | None, store: ObjectStore) -> None:
        _AGENTS.setdefault(store, weakref.WeakSet()).add(self)
        clique = machine_clique(machine)
        plugin = self._plugin(node_name, store, clique)
        slices = plugin.handler.resource_slices(node_name)
        if slices:
            publish_slices(store, DRIVER, node_name, slices)
        else:
            unpublish_slices(store, DRIVER, node_name)

    def prepare(self, pod: Obj, node_name: str, store: ObjectStore) -> dict[str, ContainerDevices]:
        """NodePrepareResources for the pod's claims of this driver; raises with the plugin's
        error (the kubelet keeps the pod in ContainerCreating) when one fails."""
        _AGENTS.setdefault(store, weakref.WeakSet()).add(self)
        plugin = self._plugin(node_name, store, None)
        spec = pod.get("spec") or {}
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        out: dict[str, ContainerDevices] = {}
        for entry in spec.get("resourceClaims") or []:
            name = pod_claim_name(pod, entry, store)
            if name is None:
                continue
            try:
                claim = store.get(RESOURCE_API, "ResourceClaim", name, ns)
            except NotFound:
                continue
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
            mine = [
                r
                for r in results.get("results") or []
                if r.get("driver") == DRIVER and r.get("pool") == node_name
            ]
            if not mine:
                continue
            meta = claim["metadata"]
            ref = ClaimRef(ns, str(meta["uid"]), str(meta["name"]))
            result = plugin.prepare([ref], {ref.uid: claim})[ref.uid]
            if result.error:
                raise ClaimError(f"{DRIVER}: claim {ns}/{ref.name}: {result.error}")
            self._pods.setdefault((node_name, ref.uid), set()).add(object_ref(pod))
            ids = [i for d in result.devices for i in d.cdi_device_ids]
            paths = self._device_paths(plugin, ref.uid)
            for container in spec.get("containers") or []:
                wanted = {
                    c.get("name") for c in (container.get("resources") or {}).get("claims") or []
                }
                if entry.get("name") in wanted:
                    got = out.setdefault(str(container["name"]), ContainerDevices())
                    got.devices.extend(ids + paths)
        return out

    def _device_paths(self, plugin: DraPlugin, claim_uid: str) -> list[str]:
        """The IMEX channel device nodes the runtime creates for the claim (shown per pod);
        for allocationMode All just the directory, not 2048 paths."""
        record = plugin.prepared().get(claim_uid)
        spec = (record.cdi_spec if record else None) or {}
        paths = [
            str(node["path"])
            for device in spec.get("devices") or []
            for node in (device.get("containerEdits") or {}).get("deviceNodes") or []
        ]
        return paths if len(paths) <= 8 else [f"{CHANNEL_DIR}/*"]

    def unprepare(self, pod: Obj, node_name: str, store: ObjectStore) -> None:
        plugin = self._plugins.get(node_name)
        if plugin is None:
            return
        key = object_ref(pod)
        for (node, uid), users in list(self._pods.items()):
            if node != node_name or key not in users:
                continue
            users.discard(key)
            if users:
                continue
            del self._pods[(node, uid)]
            record = plugin.checkpoint.get(uid)
            if record is not None:
                plugin.unprepare([ClaimRef(record.namespace, uid, record.name)])

    def sync_daemons(self, store: ObjectStore) -> list[tuple[str, str]]:
        """Let each node's IMEX daemons re-read their domain's node list; (node, uid) changed.
        A deleted node's daemons are gone with it: it is forgotten, not synced."""
        nodes = list_read_only(store, "v1", "Node")  # names only: no copy of every Node
        alive = {str((n.get("metadata") or {}).get("name")) for n in nodes}
        for gone in [n for n in self._handlers if n not in alive]:
            del self._handlers[gone]
            del self._plugins[gone]
            for key in [k for k in self._pods if k[0] == gone]:
                del self._pods[key]
        return [
            (node, uid)
            for node, handler in sorted(self._handlers.items())
            for uid in handler.sync_daemons()
        ]


def _to_event(e: Any) -> Event:
    return Event(type=e.type, reason=e.reason, object=e.object, message=e.message)


class ComputeDomainController:
    """The ComputeDomain controller in the simulator's controller loop."""

    name = "computedomain"

    def __init__(self, namespace: str = DRIVER_NAMESPACE) -> None:
        self.namespace = namespace

    def reconcile(self, store: ObjectStore, now: float) -> list[Event]:
        events = [_to_event(e) for e in reconcile(store, namespace=self.namespace)]
        domains = {
            str((d.get("metadata") or {}).get("uid")): d for d in store.list(API_VERSION, KIND)
        }
        for agent in list(_AGENTS.get(store, ())):
            for node, uid in agent.sync_daemons(store):
                meta = (domains.get(uid) or {}).get("metadata") or {}
                what = f"ComputeDomain {meta.get('namespace', 'default')}/{meta.get('name', uid)}"
                events.append(
                    Event(
                        "Normal",
                        "IMEXNodesConfigUpdated",
                        f"Node/{node}",
                        f"IMEX daemon of {what} rewrote its hosts mapping",
                    )
                )
        return events


__all__ = [
    "ComputeDomainController",
    "ComputeDomainKubeletPlugin",
]
