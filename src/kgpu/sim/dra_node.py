"""The simulated kubelet's DRA side for driver ``gpu.nvidia.com``: the agent's own code, in
process.

Each simulated node gets the same :class:`~kgpu.kubelet.dra.plugin.DraPlugin` and
:class:`~kgpu.drivers.gpu.GpuHandler` that ``kgpu agent`` runs (checkpoint, CDI spec files
under ``work_dir/<node>/cdi``, opaque configs), minus the gRPC sockets. The kubelet's part is
played here as the real one does it: find the pod's claims (``spec.resourceClaims`` by
``resourceClaimName``, or through ``status.resourceClaimStatuses`` for claims made from
templates: :func:`kgpu.sim.controllers.resourceclaim.pod_claim_name`), prepare those with
devices of this driver, give each container the CDI devices of the claims (and requests) it
lists in ``resources.claims``, and unprepare a claim only when the last pod on the node using
it is gone. The claim kube-scheduler made for extended resources backed by DRA (named in
``status.extendedResourceClaimStatus``) is prepared too, and each container gets the devices of
the requests ``requestMappings`` gives it, as the kubelet does.

With consumable shares on (the scenario's ``draDriver: {consumableShares: memory}``), the
handler publishes shared whole GPUs and finds a share's consumer pods in the simulated API
server (its ``pod_lookup``). A release without ``DRAConsumableCapacity`` on (1.34-1.35 unless
``featureGates`` turns it on) stores those slices as its API server does: without
``allowMultipleAllocations`` and the capacities' ``requestPolicy`` (dropped fields of a
disabled gate), so the GPUs are exclusive there.

Beyond the agent, a partitionable MIG placement that does not exist yet is materialised (the
simulated GPU "creates" the MIG device), so the simulator can demonstrate on-demand MIG shapes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy
from kgpu.dra.withhold import OWNER_TAINT_KEY
from kgpu.drivers.gpu import DRIVER, GpuHandler, visible_uuids
from kgpu.drivers.ownership import GpuOwnership
from kgpu.drivers.publish import ServerForm, publish_slices
from kgpu.drivers.shares import pod_lookup
from kgpu.hardware.model import Machine
from kgpu.kubelet.dra.handler import ClaimError, ClaimRef
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.sim.controllers.resourceclaim import pod_claim_name
from kgpu.sim.dra_extended import claim_status
from kgpu.sim.plugins import ContainerDevices
from kgpu.store import MemoryStore, NotFound, ObjectStore, namespace_of

Obj = dict[str, Any]
PodKey = tuple[str, str, str]  # node, namespace, pod name
#: the pod-level name the extended-resource claim goes by here (no spec entry names it)
EXTENDED = "<extended-resources>"


class DraKubeletPlugin:
    """:class:`kgpu.sim.plugins.KubeletPlugin` for ``gpu.nvidia.com``."""

    name = DRIVER

    def __init__(
        self,
        work_dir: Path,
        *,
        partitionable: bool = False,
        shares: SharePolicy = DISABLED_POLICY,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.partitionable = partitionable
        self.shares = shares
        # per node, what the simulated API server drops from its slices (the store drops a
        # disabled gate's fields on write, as kube-apiserver does), learned as the agent learns it
        self._server_forms: dict[str, ServerForm] = {}
        self._store: ObjectStore | None = None  # the API server pod_lookup reads
        self.plugins: dict[str, DraPlugin] = {}
        self.handlers: dict[str, GpuHandler] = {}
        self._pods: dict[PodKey, list[ClaimRef]] = {}
        self.ownership: dict[str, GpuOwnership] = {}  # node -> the agent's ledger

    # -- one owner per GPU (kgpu.sim.ownership) ------------------------------------------------
    def attach_ownership(self, node_name: str, ownership: GpuOwnership) -> None:
        """The node's agent ledger, shared with its device plugin (a restart brings a new one)."""
        self.ownership[node_name] = ownership
        handler = self.handlers.get(node_name)
        if handler is not None:
            handler.ownership = ownership

    def node_ownership(self, node_name: str, store: ObjectStore) -> None:
        """The ledger or policy changed: republish when what the slices withhold did."""
        handler = self.handlers.get(node_name)
        if handler is not None and handler.ownership_changed():
            self._publish(store, handler, node_name)

    def restart_node(self, node_name: str, store: ObjectStore) -> None:
        """The agent restarts: the driver comes back from its checkpoint (which gives the new
        ledger its claims back, :meth:`GpuHandler.restore`)."""
        old = self.handlers.get(node_name)
        if old is None:
            return
        handler = self._start_driver(node_name, old.machine, store)
        handler.set_health(old.unhealthy)
        self._publish(store, handler, node_name)  # a starting agent publishes its slices

    def prepared_gpus(self, node_name: str) -> dict[str, str]:
        """GPU UUID -> claim uid of every claim prepared on the node (its checkpoint)."""
        plugin = self.plugins.get(node_name)
        if plugin is None:
            return {}
        out: dict[str, str] = {}
        for uid, record in plugin.prepared().items():
            for dev in (record.handler_state.get("devices") or {}).values():
                out[str(dev.get("parentUUID"))] = uid
        return out

    def offer_gaps(self, node_name: str, store: ObjectStore) -> list[str]:
        """GPUs the driver would publish, that the ledger does not withhold, missing from the
        node's published slices (a GPU left unoffered after its holder is gone)."""
        handler = self.handlers.get(node_name)
        if handler is None:
            return []
        from kgpu.dra.slices import resource_slices

        def gpus(slices: list[Obj]) -> set[str]:
            out = set()
            for slice_ in slices:
                for dev in slice_["spec"].get("devices") or []:
                    if any(t.get("key") == OWNER_TAINT_KEY for t in dev.get("taints") or []):
                        continue
                    attrs = dev.get("attributes") or {}
                    for name in ("parentUUID", "uuid"):
                        value = (attrs.get(name) or {}).get("string")
                        if value is not None:
                            out.add(str(value))
                            break
            return out

        would = gpus(
            resource_slices(
                handler.machine, node_name, partitionable=self.partitionable, shares=self.shares
            )
        ) & {g.uuid for g in handler.machine.gpus}
        withheld = handler.ownership.dra_withheld(handler.machine) if handler.ownership else {}
        published = gpus(
            [
                s
                for s in store.list(RESOURCE_API, "ResourceSlice")
                if (s.get("spec") or {}).get("nodeName") == node_name
                and (s.get("spec") or {}).get("driver") == DRIVER
            ]
        )
        index = {g.uuid: g.index for g in handler.machine.gpus}
        return [
            f"GPU {index[g]} is free but no ResourceSlice offers it"
            for g in sorted(would - set(withheld) - published, key=index.__getitem__)
        ]

    def _start_driver(self, node_name: str, machine: Machine, store: ObjectStore) -> GpuHandler:
        """The node's driver as its agent starts it (first start and restart alike): a handler
        that reads its checkpoint from the node's plugin directory, and its kubelet plugin."""
        plugin_dir = self.work_dir / node_name / "plugins" / DRIVER
        handler = GpuHandler(
            machine,
            node_name,
            plugin_dir,
            dynamic_mig=True,
            partitionable=self.partitionable,
            ownership=self.ownership.get(node_name),
            shares=self.shares,
            pod_lookup=self._pod,
        )
        self.handlers[node_name] = handler
        self.plugins[node_name] = DraPlugin(handler, plugin_dir, self.cdi_root(node_name), store)
        return handler

    def _pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The handler's ``pod_lookup``, read through the agent's own lookup
        (:func:`kgpu.drivers.shares.pod_lookup`) on the store the node uses now."""
        return None if self._store is None else pod_lookup(self._store)(namespace, name)

    def _publish(self, store: ObjectStore, handler: GpuHandler, node_name: str) -> None:
        """Publish the handler's slices as the API server stores them."""
        publish_slices(
            store,
            handler.driver,
            node_name,
            handler.resource_slices(node_name),
            server=self._server_forms.setdefault(node_name, ServerForm()),
        )

    def cdi_root(self, node_name: str) -> Path:
        return self.work_dir / node_name / "cdi"

    def register_node(self, node_name: str, machine: Machine | None, store: ObjectStore) -> None:
        self._store = store
        if machine is None:
            return
        handler = self.handlers.get(node_name)
        if handler is None:
            handler = self._start_driver(node_name, machine, store)
        else:
            handler.update_machine(machine)
        self._publish(store, handler, node_name)

    def node_health(self, node_name: str, unhealthy: Mapping[str, str], store: ObjectStore) -> None:
        """The node's health changed: republish its slices with unhealthy devices tainted (the
        agent's DRA driver does the same from its health view)."""
        handler = self.handlers.get(node_name)
        if handler is not None and handler.set_health(unhealthy):
            self._publish(store, handler, node_name)

    def _claims(self, pod: Mapping[str, Any], store: ObjectStore) -> dict[str, Obj]:
        """Pod-level claim name -> ResourceClaim, for claims with devices of this driver."""
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        out: dict[str, Obj] = {}
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            pod_name = str(entry.get("name"))
            claim: Obj | None = None
            name = pod_claim_name(pod, entry, store)
            if name is not None:
                with contextlib.suppress(NotFound):
                    claim = store.get(RESOURCE_API, "ResourceClaim", name, namespace)
            if claim is None:
                raise ClaimError(f"pod claim {pod_name!r}: its ResourceClaim does not exist")
            if _has_driver(claim):
                out[pod_name] = claim
        extended = _extended_claim(pod, store)
        if extended is not None and _has_driver(extended):
            out[EXTENDED] = extended
        return out

    def prepare(self, pod: Obj, node_name: str, store: ObjectStore) -> dict[str, ContainerDevices]:
        """Prepare the pod's claims; :class:`ClaimError` carries the first claim's failure."""
        plugin = self.plugins.get(node_name)
        claims = self._claims(pod, store)
        if not claims:
            return {}
        if plugin is None:
            raise ClaimError(f"DRA driver {DRIVER} is not registered on node {node_name}")
        plugin.store = store
        self._store = store
        refs = {
            pod_name: ClaimRef(
                str(c["metadata"].get("namespace", "default")),
                str(c["metadata"]["uid"]),
                str(c["metadata"]["name"]),
            )
            for pod_name, c in claims.items()
        }
        results = plugin.prepare(list(refs.values()))
        meta = pod.get("metadata") or {}
        # Remembered before any failure: claims that did get prepared are unprepared with the pod.
        self._pods[(node_name, str(meta.get("namespace", "default")), str(meta.get("name")))] = (
            list(refs.values())
        )
        for ref in refs.values():
            if results[ref.uid].error:
                raise ClaimError(
                    f"prepare claim {ref.namespace}/{ref.name}: {results[ref.uid].error}"
                )

        mappings = (claim_status(pod) or claim_status(_stored(pod, store)) or {}).get(
            "requestMappings"
        ) or []
        out: dict[str, ContainerDevices] = {}
        for container in (pod.get("spec") or {}).get("containers") or []:
            got = ContainerDevices()
            uuids: list[str] = []
            uses = list((container.get("resources") or {}).get("claims") or [])
            uses += [
                {"name": EXTENDED, "request": m.get("requestName")}
                for m in mappings
                if m.get("containerName") == container.get("name")
            ]
            for use in uses:
                used = refs.get(str(use.get("name")))
                if used is None:
                    continue
                record = plugin.checkpoint.get(used.uid)
                if record is None:
                    continue
                request = use.get("request")
                chosen = [
                    d
                    for d in record.devices
                    if not request
                    or not d.request_names
                    or any(r == request or r.split("/", 1)[0] == request for r in d.request_names)
                ]
                for dev in chosen:
                    got.devices.extend(i for i in dev.cdi_device_ids if i not in got.devices)
                got.env.update(_env(record.cdi_spec, chosen_names(record.cdi_spec, chosen)))
                uuids += visible_uuids(record.handler_state, [d.device_name for d in chosen])
            if got.devices:
                if uuids:
                    got.env["NVIDIA_VISIBLE_DEVICES"] = ",".join(dict.fromkeys(uuids))
                out[str(container.get("name"))] = got
        return out

    def unprepare(self, pod: Obj, node_name: str, store: ObjectStore) -> None:
        meta = pod.get("metadata") or {}
        key = (node_name, str(meta.get("namespace", "default")), str(meta.get("name")))
        refs = self._pods.pop(key, [])
        plugin = self.plugins.get(node_name)
        if plugin is None or not refs:
            return
        still_used = {
            r.uid
            for (node, _, _), others in self._pods.items()
            if node == node_name
            for r in others
        }
        done = [r for r in refs if r.uid not in still_used]
        errors = [e for e in plugin.unprepare(done).values() if e]
        if errors:
            raise ClaimError(errors[0])


def _has_driver(claim: Mapping[str, Any]) -> bool:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return any(r.get("driver") == DRIVER for r in results)


def _stored(pod: Mapping[str, Any], store: ObjectStore) -> Obj:
    """The pod as stored, only read (a MemoryStore's own object: no copy per pod start)."""
    meta = pod.get("metadata") or {}
    if isinstance(store, MemoryStore):
        shared = store.get_shared("v1", "Pod", str(meta.get("name", "")), namespace_of(pod))
        return shared if shared is not None else {}
    try:
        return store.get("v1", "Pod", str(meta.get("name", "")), namespace_of(pod))
    except NotFound:
        return {}


def _extended_claim(pod: Mapping[str, Any], store: ObjectStore) -> Obj | None:
    """The claim kube-scheduler made for the pod's extended resources (DRAExtendedResource),
    named in ``status.extendedResourceClaimStatus``; the kubelet prepares it like any claim."""
    status = claim_status(pod) or claim_status(_stored(pod, store))
    if status is None:
        return None
    try:
        return store.get(
            RESOURCE_API, "ResourceClaim", str(status["resourceClaimName"]), namespace_of(pod)
        )
    except NotFound:
        raise ClaimError(
            f"extended resource claim {status['resourceClaimName']!r} does not exist"
        ) from None


def chosen_names(spec: Mapping[str, Any] | None, chosen: list[Any]) -> list[str]:
    """CDI device names (inside the spec) of the chosen prepared devices."""
    names = []
    for dev in chosen:
        for cdi_id in dev.cdi_device_ids:
            names.append(cdi_id.split("=", 1)[1])
    return names


def _env(spec: Mapping[str, Any] | None, device_names: list[str]) -> dict[str, str]:
    """The environment a runtime would set from a CDI spec for the named devices: spec-level
    edits, then each device's, later entries overriding earlier ones."""
    if not spec or not device_names:
        return {}
    entries = list((spec.get("containerEdits") or {}).get("env") or [])
    for device in spec.get("devices") or []:
        if device.get("name") in device_names:
            entries += (device.get("containerEdits") or {}).get("env") or []
    env: dict[str, str] = {}
    for entry in entries:
        key, _, value = str(entry).partition("=")
        env[key] = value
    return env
