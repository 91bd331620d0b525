"""A small cluster on a MemoryStore for ComputeDomain tests: real controller, real admission
(the clique placement webhook's mutation), real InterPodAffinity and node-affinity filters, real
DRA allocator and DeviceClasses, real node handler (through the agent's DraPlugin), with the
parts kube-scheduler's loop, the DaemonSet controller and the kubelet play done here in a few
lines. It lets these tests run before and independently of ``kgpu sim``; it does not check
resource fit beyond what :func:`kgpu.computedomain.placement.pod_fits` does."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from kgpu.computedomain.api import CLIQUE_LABEL
from kgpu.computedomain.placement import pod_fits
from kgpu.dra.allocator import allocate
from kgpu.dra.classes import device_classes
from kgpu.hardware.profiles import load_machine
from kgpu.sim import interpod
from kgpu.sim.admission import Admission
from kgpu.sim.computedomain import ComputeDomainController, ComputeDomainKubeletPlugin
from kgpu.sim.podindex import NAMESPACE_NAME_LABEL, PodIndex, indexed
from kgpu.sim.podspec import node_affinity_matches, pod_requirements
from kgpu.store import MemoryStore, NotFound

Obj = dict[str, Any]
RES = "resource.k8s.io/v1"
#: Two GB200 NVL72 racks: NVLink cliques as GPU feature discovery labels them.
RACK_A = "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0"
RACK_B = "1f0c0a3e-2c4b-4d8e-9a51-6b8e2f3d4c5a.0"


def load_docs(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


class MiniCluster:
    def __init__(self, work: Path, cliques: dict[str, int]) -> None:
        self.store = MemoryStore()
        self.kubelet = ComputeDomainKubeletPlugin(work)
        self.controller = ComputeDomainController()
        self.admission = Admission(self.store)  # the API server runs kgpu's webhook
        self.messages: dict[str, str] = {}
        self.devices: dict[str, dict[str, list[str]]] = {}
        self.events: list[Any] = []
        for cls in device_classes():
            self.store.create(cls)
        n = 0
        for clique, count in cliques.items():
            for _ in range(count):
                name = f"gb200-{n}"
                self.add_node(name, clique, f"192.168.{n // 250}.{n % 250 + 1}")
                n += 1

    def add_node(self, name: str, clique: str, ip: str) -> None:
        self.store.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {CLIQUE_LABEL: clique, "nvidia.com/gpu.present": "true"},
                },
                "status": {
                    "allocatable": {"nvidia.com/gpu": "4", "cpu": "72", "memory": "800Gi"},
                    "addresses": [{"type": "InternalIP", "address": ip}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        machine = load_machine("gb200", hostname=name, clique=clique)
        self.kubelet.register_node(name, machine, self.store)

    # -- objects -----------------------------------------------------------------------------
    def apply(self, objs: Iterable[Obj]) -> None:
        for obj in objs:
            obj = copy.deepcopy(obj)
            if obj["kind"] == "MPIJob":
                self._expand_mpijob(obj)
            elif obj["kind"] == "Pod":
                self.store.create(self.admission.admit_pod(obj))
            else:
                self.store.create(obj)

    def _expand_mpijob(self, job: Obj) -> None:
        spec = job["spec"]["mpiReplicaSpecs"]["Worker"]
        for i in range(int(spec.get("replicas", 1))):
            tpl = copy.deepcopy(spec["template"])
            meta = tpl.setdefault("metadata", {})
            meta["name"] = f"{job['metadata']['name']}-worker-{i}"
            meta.setdefault("labels", {})["gang"] = job["metadata"]["name"]
            meta["ownerReferences"] = [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": "MPIJob",
                    "name": job["metadata"]["name"],
                    "uid": "x",
                }
            ]
            self.store.create(self.admission.admit_pod({"apiVersion": "v1", "kind": "Pod", **tpl}))

    def pod(self, name: str, ns: str = "default") -> Obj:
        return self.store.get("v1", "Pod", name, ns)

    def domain(self, name: str, ns: str = "default") -> Obj:
        return self.store.get("resource.nvidia.com/v1beta1", "ComputeDomain", name, ns)

    def handler(self, node: str) -> Any:
        return self.kubelet.handler(node)

    # -- loop --------------------------------------------------------------------------------
    def run(self, rounds: int = 12) -> None:
        for _ in range(rounds):
            before = self.store.revision
            self.events += self.controller.reconcile(self.store, 0.0)
            self._daemonsets()
            self._schedule()
            if self.store.revision == before:
                return

    def _daemonsets(self) -> None:
        nodes = self.store.list("v1", "Node")
        for ds in self.store.list("apps/v1", "DaemonSet"):
            ns = ds["metadata"]["namespace"]
            tpl = ds["spec"]["template"]
            selector = tpl["spec"].get("nodeSelector") or {}
            want = {
                n["metadata"]["name"]
                for n in nodes
                if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            }
            have = {
                p["spec"].get("nodeName"): p
                for p in self.store.list("v1", "Pod", namespace=ns)
                if (p["metadata"].get("labels") or {}).items()
                >= ds["spec"]["selector"]["matchLabels"].items()
            }
            for node in want - set(have):
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": copy.deepcopy(tpl["metadata"]),
                    "spec": copy.deepcopy(tpl["spec"]),
                }
                pod["metadata"]["name"] = f"{ds['metadata']['name']}-{node}"
                pod["metadata"]["namespace"] = ns
                pod["spec"]["nodeName"] = ""
                pod["spec"]["affinityNode"] = node  # harness-only: the DaemonSet's target
                self.store.create(pod)
            for node, pod in have.items():
                if node not in want:
                    self.delete_pod(pod)

    def delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if pod["spec"].get("nodeName"):
            self.kubelet.unprepare(pod, pod["spec"]["nodeName"], self.store)
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            with contextlib.suppress(NotFound):
                self.store.delete(RES, "ResourceClaim", st["resourceClaimName"], meta["namespace"])
        with contextlib.suppress(NotFound):
            self.store.delete("v1", "Pod", meta["name"], meta["namespace"])

    def _schedule(self) -> None:
        pending = [p for p in self.store.list("v1", "Pod") if not p["spec"].get("nodeName")]
        gangs: dict[str, list[Obj]] = {}
        for p in pending:
            gangs.setdefault(
                (p["metadata"].get("labels") or {}).get("gang") or p["metadata"]["name"], []
            ).append(p)
        for members in gangs.values():
            placed: list[tuple[Obj, str]] = []
            for pod in members:
                node = self._find(pod, placed)
                if node is None:
                    placed = []  # all or none: the gang waits
                    break
                placed.append((pod, node))
            for pod, node in placed:
                self._bind(pod, node)

    def _affinity(self, pod: Obj, pods: list[Obj], nodes: list[Obj]) -> Any:
        """InterPodAffinity's PreFilter over the pods placed so far (None: nothing to check)."""
        labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
        index = PodIndex()
        for i, other in enumerate(pods):
            where = other["spec"].get("nodeName")
            if where and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                key = f"{other['metadata'].get('namespace', 'default')}/{other['metadata']['name']}"
                index.add(indexed(key, pod_requirements(other), where, i))
        return interpod.prefilter(
            pod_requirements(pod),
            index,
            labels.get,
            lambda ns: {NAMESPACE_NAME_LABEL: ns},
        )

    def _claims_for(self, pod: Obj) -> list[Obj]:
        ns = pod["metadata"].get("namespace", "default")
        out = []
        for rc in pod["spec"].get("resourceClaims") or []:
            tpl = self.store.get(RES, "ResourceClaimTemplate", rc["resourceClaimTemplateName"], ns)
            out.append(
                {
                    "apiVersion": RES,
                    "kind": "ResourceClaim",
                    "metadata": {
                        "name": f"{pod['metadata']['name']}-{rc['name']}",
                        "namespace": ns,
                        # as Kubernetes: the template's spec.metadata labels are copied
                        "labels": dict((tpl["spec"].get("metadata") or {}).get("labels") or {}),
                        "annotations": {"resource.kubernetes.io/pod-claim-name": rc["name"]},
                    },
                    "spec": copy.deepcopy(tpl["spec"]["spec"]),
                }
            )
        return out

    def _find(self, pod: Obj, assumed: list[tuple[Obj, str]]) -> str | None:
        key = pod["metadata"]["name"]
        try:
            claims = self._claims_for(pod)
        except NotFound:
            self.messages[key] = "claim template not found"
            return None
        pods = self.store.list("v1", "Pod")
        pods += [{**p, "spec": {**p["spec"], "nodeName": n}} for p, n in assumed]
        used = self.store.list(RES, "ResourceClaim")
        used += [c for p, _ in assumed for c in p["_claims"]]
        nodes = self.store.list("v1", "Node")
        req = pod_requirements(pod)
        affinity = self._affinity(pod, pods, nodes)
        for node in nodes:
            name = node["metadata"]["name"]
            if pod["spec"].get("affinityNode") not in (None, name):
                continue
            labels = node["metadata"].get("labels") or {}
            if not node_affinity_matches(req, labels, name):
                continue
            on_node = [p for p in pods if p["spec"].get("nodeName") == name]
            if not pod_fits(pod, node, on_node):
                continue
            if affinity is not None and affinity.check(labels) is not None:
                continue
            results = allocate(
                node,
                claims,
                classes=self.store.list(RES, "DeviceClass"),
                slices=self.store.list(RES, "ResourceSlice"),
                allocated=used,
            )
            if results is None:
                continue
            pod["_claims"] = [
                {**c, "status": {"allocation": r}} for c, r in zip(claims, results, strict=True)
            ]
            return name
        self.messages[key] = "no node fits"
        return None

    def _bind(self, pod: Obj, node: str) -> None:
        ns = pod["metadata"].get("namespace", "default")
        statuses = []
        for claim in pod.pop("_claims", []):
            status = claim.pop("status")
            created = self.store.create(claim)
            created["status"] = {
                **status,
                "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": "p"}],
            }
            self.store.update(created)
            statuses.append(
                {
                    "name": created["metadata"]["annotations"][
                        "resource.kubernetes.io/pod-claim-name"
                    ],
                    "resourceClaimName": created["metadata"]["name"],
                }
            )
        current = self.store.get("v1", "Pod", pod["metadata"]["name"], ns)
        current["spec"]["nodeName"] = node
        current["status"] = {"phase": "Pending", "resourceClaimStatuses": statuses}
        current = self.store.update(current)
        got = self.kubelet.prepare(current, node, self.store)
        current["status"]["phase"] = "Running"
        self.devices[f"{ns}/{pod['metadata']['name']}"] = {k: v.devices for k, v in got.items()}
        self.store.update(current)

    # -- failures ----------------------------------------------------------------------------
    def fail_node(self, name: str) -> None:
        """The node goes NotReady; like the node lifecycle controller's eviction, its pods are
        deleted and the workload controller (MPIJob here) recreates them Pending."""
        node = self.store.get("v1", "Node", name)
        node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        self.store.update(node)
        for pod in self.store.list("v1", "Pod"):
            if pod["spec"].get("nodeName") == name:
                self.delete_pod(pod)
                if (pod["metadata"].get("labels") or {}).get("gang"):
                    fresh: Obj = {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            k: v
                            for k, v in pod["metadata"].items()
                            if k in ("name", "namespace", "labels", "ownerReferences")
                        },
                        "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"},
                    }
                    self.store.create(self.admission.admit_pod(fresh))
