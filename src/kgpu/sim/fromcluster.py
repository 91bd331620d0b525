"""A real cluster's objects as an ordinary ``kgpu sim`` scenario (``kgpu sim --from-cluster``).

Pure: the objects come in as lists (read by :mod:`kgpu.cluster.snapshot`, list-only), a scenario
map comes out, the same map ``--save`` writes and ``kgpu sim FILE`` loads, so an imported cluster
and its saved copy run identically. What the mapping keeps and why:

- **Nodes**: one node group per Node, named as the Node, with its labels, taints,
  ``spec.unschedulable`` and the CPU, memory and pod count of ``status.allocatable`` (what
  kube-scheduler fits against). Its GPUs come from a built-in machine profile found from the GFD
  label ``nvidia.com/gpu.product`` (``-SHARED`` and ``-MIG-...`` suffixes dropped) or, without
  one, from the ``productName`` of its ``gpu.nvidia.com`` ResourceSlice devices; the profile with
  that product and the node's ``nvidia.com/gpu.count`` wins; ``--machine-map PRODUCT=PROFILE``
  names one by hand. The labels GFD derives from the GPUs are left to the simulated GFD, so they
  change when a what-if step changes the config; the config-selecting labels
  (``nvidia.com/device-plugin.config``, ``nvidia.com/mig.config``) stay.
- **Pods**: as bare Pods (owners dropped: the simulated controllers would otherwise make their
  own), in two runs of ``apply``: bound pods first, each with ``spec.nodeName`` (its kubelet
  admits it where it is and allocates its devices), then the Pending ones, which the simulated
  kube-scheduler places again. Finished pods (``Succeeded``, ``Failed``) hold nothing and are
  left out. A bound pod's generated ResourceClaims are named directly
  (``resourceClaimName``), so the claim it holds is the one it keeps.
- **Configs and DRA**: ConfigMaps holding a device-plugin or mig-parted config, PriorityClasses,
  DeviceClasses, ResourceClaims and templates, ComputeDomains (spec only: the simulated
  controller makes their status, templates and daemons), and ResourceSlices of drivers kgpu does
  not run (kgpu's own drivers publish theirs in the simulation).
- **Unsupported**: what the simulator cannot model is listed (``Kind ns/name: why``) and
  skipped: a GPU product without a built-in machine, KEDA ScaledObjects and HPAs (their target
  workloads are not imported, as pods are imported as they are), claims whose pod is not
  imported.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.sim.kubeversion import DEFAULT_VERSION, SUPPORTED_MINORS
from kgpu.sim.scenario_parts import MAX_NODES, MAX_PODS

Obj = dict[str, Any]

GPU_DRIVER = "gpu.nvidia.com"
KGPU_DRIVERS = frozenset({GPU_DRIVER, "compute-domain.nvidia.com"})
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
#: Labels GFD (and kgpu's simulated GFD) derives from the GPUs and the config in use: left to
#: the simulation, which sets them from what the node advertises.
GFD_PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/cuda.",
    "nvidia.com/mig.",
    "nvidia.com/mig-",
    "nvidia.com/gfd.",
    "nvidia.com/mps.",
    "nvidia.com/vgpu.",
)
#: Config-selecting labels a user (or the GPU Operator) sets: kept.
KEPT_NVIDIA_LABELS = frozenset(
    {"nvidia.com/device-plugin.config", "nvidia.com/mig.config", "nvidia.com/gpu.deploy.operands"}
)
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
_POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_SHARED = re.compile(r"-SHARED$")
_MIG_SUFFIX = re.compile(r"-MIG-.*$")
#: Pod spec fields admission sets from other fields: the simulated admission sets them again.
_ADMITTED_SPEC = ("priority", "preemptionPolicy")


@dataclass(frozen=True)
class ClusterObjects:
    """What ``--from-cluster`` read, kind by kind (wire-form dicts, ``resource.k8s.io`` in
    kgpu's internal ``v1``); ``namespaces`` empty means every namespace was read."""

    nodes: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()
    priority_classes: Sequence[Obj] = ()
    device_classes: Sequence[Obj] = ()
    resource_slices: Sequence[Obj] = ()
    resource_claims: Sequence[Obj] = ()
    claim_templates: Sequence[Obj] = ()
    config_maps: Sequence[Obj] = ()
    compute_domains: Sequence[Obj] = ()
    scaled_objects: Sequence[Obj] = ()
    hpas: Sequence[Obj] = ()
    server_version: str = ""
    source: str = ""
    namespaces: tuple[str, ...] = ()


@dataclass
class Imported:
    """The scenario map, what was skipped and why, and notes (approximations made)."""

    scenario: Obj
    unsupported: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    #: node -> the ``nvidia.com/*`` allocatable the API server reports, to hold the simulated
    #: nodes to (:func:`differences`)
    expected: dict[str, dict[str, int]] = field(default_factory=dict)


class TooLarge(ValueError):
    """The cluster is above the simulator's bounds (the message says what to do)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _ref(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    ns = meta.get("namespace")
    name = str(meta.get("name") or "?")
    return f"{obj.get('kind') or '?'} {ns}/{name}" if ns else f"{obj.get('kind') or '?'} {name}"


def check_bounds(nodes: int, pods: int, namespaces: Sequence[str]) -> None:
    """:class:`TooLarge` when the simulator cannot hold this cluster (before any mapping)."""
    if nodes > MAX_NODES:
        raise TooLarge(
            f"the cluster has {nodes} nodes; kgpu sim runs at most {MAX_NODES} in one scenario"
        )
    if pods > MAX_PODS:
        hint = (
            "name fewer namespaces with --namespace"
            if namespaces
            else "import only some namespaces with --namespace NS (repeatable)"
        )
        raise TooLarge(
            f"the cluster has {pods} pods to import; kgpu sim runs at most {MAX_PODS} in one "
            f"scenario: {hint}"
        )


def gfd_product(name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GFD writes for an NVML product name."""
    return name.strip().replace(" ", "-")


@functools.cache
def _profiles() -> tuple[tuple[str, str, int], ...]:
    """(profile, GFD product value, GPU count) of every built-in machine."""
    from kgpu.hardware.profiles import describe_profiles

    out: list[tuple[str, str, int]] = []
    for entry in describe_profiles():
        out.append(
            (
                str(entry.get("name")),
                gfd_product(str(entry.get("product") or "")),
                int(str(entry.get("gpus") or 0)),
            )
        )
    return tuple(out)


def find_machine(
    product: str, count: int | None, machine_map: Mapping[str, str]
) -> tuple[str | None, str]:
    """The built-in machine for a GFD product value and GPU count: (profile, note); (None, why)
    when none has that product."""
    base = _MIG_SUFFIX.sub("", _SHARED.sub("", product))
    for key in (product, base):
        if key in machine_map:
            return machine_map[key], ""
    matches = [(name, n) for name, prod, n in _profiles() if prod == base]
    if not matches:
        return None, (
            f"GPU product {product!r} has no built-in machine profile; map it with "
            f"--machine-map {base}=PROFILE (see kgpu machines)"
        )
    exact = [name for name, n in matches if count is None or n == count]
    if exact:
        return exact[0], ""
    name, n = min(matches, key=lambda m: (abs(m[1] - (count or 0)), m[0]))
    return name, (
        f"{count} x {base}: the nearest built-in machine is {name} with {n} GPUs; name another "
        f"with --machine-map {base}=PROFILE"
    )


def _slice_product(slices: Iterable[Obj]) -> tuple[str, int]:
    """(GFD product value, GPU count) from a node's ``gpu.nvidia.com`` ResourceSlices."""
    names: list[str] = []
    for s in slices:
        for device in (s.get("spec") or {}).get("devices") or []:
            attrs = device.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            product = (attrs.get("productName") or {}).get("string")
            if product and kind in (None, "gpu"):
                names.append(str(product))
    if not names:
        return "", 0
    return gfd_product(names[0]), len(names)


def _quantity(value: object) -> str | None:
    return str(value) if value is not None and str(value) != "" else None


def _node_group(node: Obj, slices: list[Obj], machine_map: Mapping[str, str], out: Imported) -> Obj:
    meta = _meta(node)
    name = str(meta.get("name"))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    product = labels.get(PRODUCT_LABEL, "")
    count_label = labels.get(COUNT_LABEL, "")
    count: int | None = int(count_label) if count_label.isdigit() else None
    if not product:
        product, found = _slice_product(slices)
        count = found or None
    machine: str | None = None
    if product:
        machine, note = find_machine(product, count, machine_map)
        if machine is None:
            out.unsupported.append(f"Node {name}: {note}; imported without GPUs")
        elif note:
            out.warnings.append(f"Node {name}: {note}")
    group: Obj = {"name": name}
    if machine is not None:
        group["machine"] = machine
        labels = {
            k: v
            for k, v in labels.items()
            if k in KEPT_NVIDIA_LABELS or not k.startswith(GFD_PREFIXES)
        }
    if labels:
        group["labels"] = labels
    taints = [
        {"key": str(t.get("key")), "value": str(t.get("value") or ""), "effect": str(t["effect"])}
        for t in (node.get("spec") or {}).get("taints") or []
        if isinstance(t, Mapping)
        and t.get("key")
        and t.get("effect")
        # the node lifecycle controller's unschedulable taint follows spec.unschedulable
        and t.get("key") != "node.kubernetes.io/unschedulable"
    ]
    if taints:
        group["taints"] = taints
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for key in ("cpu", "memory", "pods"):
        value = _quantity(allocatable.get(key))
        if value is not None:
            group[key] = value
    if (node.get("spec") or {}).get("unschedulable"):
        group["unschedulable"] = True
    return group


def _clean_meta(obj: Obj, keep_owner: bool = False) -> Obj:
    meta = _meta(obj)
    out: Obj = {"name": meta.get("name")}
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    if meta.get("labels"):
        out["labels"] = dict(meta["labels"])
    notes = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS
    }
    if notes:
        out["annotations"] = notes
    if keep_owner and meta.get("ownerReferences"):
        out["ownerReferences"] = list(meta["ownerReferences"])
    return out


def _plain(obj: Obj, *, status: bool = False) -> Obj:
    """``obj`` as a manifest: apiVersion, kind, cleaned metadata, its spec (and status).

    The top level and ``spec`` are new dicts (what the mapping edits); deeper parts are shared
    with the object read, which nothing changes (a deep copy of 50,000 pods costs seconds)."""
    out: Obj = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": _clean_meta(obj),
    }
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        out[key] = dict(value) if key == "spec" and isinstance(value, Mapping) else value
    if status and obj.get("status"):
        out["status"] = obj["status"]
    return out


def _pod_manifest(pod: Obj, bound: bool) -> Obj:
    out = _plain(pod)
    spec = out.setdefault("spec", {})
    for key in _ADMITTED_SPEC:
        spec.pop(key, None)
    if not bound:
        spec.pop("nodeName", None)
        return out
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in ((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        if isinstance(s, Mapping)
    }
    claims = []
    for claim in spec.get("resourceClaims") or []:
        name = str(claim.get("name"))
        if claim.get("resourceClaimTemplateName") and generated.get(name):
            claims.append({"name": name, "resourceClaimName": generated[name]})
        else:
            claims.append(claim)
    if claims:
        spec["resourceClaims"] = claims
    return out


def _owner_pod(obj: Obj) -> str | None:
    """The pod that owns a generated ResourceClaim, ``ns/name``."""
    meta = _meta(obj)
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod":
            return f"{meta.get('namespace')}/{ref.get('name')}"
    return None


def _owned_by(obj: Obj, kind: str) -> bool:
    return any(
        isinstance(ref, Mapping) and ref.get("kind") == kind
        for ref in _meta(obj).get("ownerReferences") or []
    )


def _selected(cm: Obj, plugin_labels: set[str], mig_labels: set[str]) -> tuple[bool, bool]:
    """(selected, has a ``default`` entry): whether a config ConfigMap holds an entry a node's
    ``nvidia.com/device-plugin.config`` names, or a mig-parted config with a layout a node's
    ``nvidia.com/mig.config`` names."""
    import yaml

    data = cm.get("data") or {}
    hit = False
    for key, text in data.items():
        if key in plugin_labels:
            hit = True
        doc = yaml.safe_load(text) if isinstance(text, str) else None
        if isinstance(doc, Mapping) and set(doc.get("mig-configs") or {}) & mig_labels:
            hit = True
    return hit, "default" in data


def is_config_map(cm: Obj) -> bool:
    """A ConfigMap holding device-plugin or mig-parted configs (what the simulated plugin and
    MIG manager read), told apart from every other ConfigMap by its entries' shape."""
    import yaml

    from kgpu.config.loader import classify

    data = cm.get("data")
    if not isinstance(data, Mapping) or not data:
        return False
    for text in data.values():
        if not isinstance(text, str) or len(text) > 1_000_000:
            return False
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            return False
        if classify(doc) not in ("plugin-config", "mig-parted"):
            return False
    return True


def kubernetes_version(server: str, out: Imported) -> str:
    """The ``kubernetesVersion`` for a server's ``gitVersion`` (``v1.34.2-eks-...``)."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", server or "")
    if match is None or match.group(1) != "1":
        if server:
            out.warnings.append(
                f"server version {server!r} not understood: using {DEFAULT_VERSION}"
            )
        return DEFAULT_VERSION
    minor = int(match.group(2))
    if minor not in SUPPORTED_MINORS:
        near = min(SUPPORTED_MINORS, key=lambda m: abs(m - minor))
        out.warnings.append(
            f"the API server is Kubernetes 1.{minor}; kgpu models 1.{SUPPORTED_MINORS[0]} to "
            f"1.{SUPPORTED_MINORS[-1]}: simulating 1.{near}"
        )
        return f"1.{near}"
    return f"1.{minor}" + (f".{match.group(3)}" if match.group(3) else "")


def _count(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def differences(
    expected: Mapping[str, Mapping[str, int]], simulated: Iterable[Mapping[str, Any]]
) -> list[str]:
    """Where the simulated nodes (``kgpu sim -o json``'s ``nodes``) advertise other
    ``nvidia.com/*`` amounts than the API server reports for the real ones: each a sentence
    naming the node, the resource and both amounts (a config or machine the import got wrong)."""
    out: list[str] = []
    for node in simulated:
        name = str(node.get("name"))
        want = expected.get(name)
        if want is None:
            continue
        have = {
            str(k): _count(v)
            for k, v in (node.get("allocatable") or {}).items()
            if str(k).startswith("nvidia.com/")
        }
        for resource in sorted(set(want) | set(have)):
            if want.get(resource, 0) != have.get(resource, 0):
                out.append(
                    f"Node {name}: the API server reports {resource} {want.get(resource, 0)}, "
                    f"the simulated node advertises {have.get(resource, 0)}"
                )
    return out


def import_cluster(
    objects: ClusterObjects, machine_map: Mapping[str, str] | None = None
) -> Imported:
    """The scenario map for ``objects`` (see the module's docstring for what is kept)."""
    machine_map = dict(machine_map or {})
    live = [
        p
        for p in objects.pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    check_bounds(len(objects.nodes), len(live), objects.namespaces)
    out = Imported({})
    node_names = {str(_meta(n).get("name")) for n in objects.nodes}
    slices_by_node: dict[str, list[Obj]] = {}
    foreign_slices: list[Obj] = []
    for s in objects.resource_slices:
        spec = s.get("spec") or {}
        if spec.get("driver") in KGPU_DRIVERS:
            if spec.get("nodeName"):
                slices_by_node.setdefault(str(spec["nodeName"]), []).append(s)
        else:
            foreign_slices.append(_plain(s))
    groups = [
        _node_group(n, slices_by_node.get(str(_meta(n).get("name")), []), machine_map, out)
        for n in sorted(objects.nodes, key=lambda n: str(_meta(n).get("name")))
    ]
    bound: list[Obj] = []
    pending: list[Obj] = []
    imported_pods: set[str] = set()
    held_claims: set[str] = set()
    for pod in sorted(live, key=lambda p: str(_meta(p).get("creationTimestamp") or "")):
        meta = _meta(pod)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node not in node_names:
            out.unsupported.append(f"Pod {key}: bound to node {node!r}, which was not listed")
            continue
        manifest = _pod_manifest(pod, bool(node))
        imported_pods.add(key)
        if node:
            bound.append(manifest)
            for claim in manifest["spec"].get("resourceClaims") or []:
                if claim.get("resourceClaimName"):
                    held_claims.add(f"{meta.get('namespace')}/{claim['resourceClaimName']}")
        else:
            pending.append(manifest)
    claims: list[Obj] = []
    for claim in objects.resource_claims:
        meta = _meta(claim)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        owner = _owner_pod(claim)
        if owner is not None and key not in held_claims:
            # made from a template for a pod the simulated resourceclaim controller sees again
            # (a Pending pod), or for a pod that is not imported
            if owner not in imported_pods:
                out.unsupported.append(f"ResourceClaim {key}: its pod {owner} is not imported")
            continue
        if _owned_by(claim, "ComputeDomain"):
            continue
        manifest = _plain(claim, status=True)
        claims.append(manifest)
    templates = [_plain(t) for t in objects.claim_templates if not _owned_by(t, "ComputeDomain")]
    plugin_labels = {
        str(_meta(n).get("labels", {}).get("nvidia.com/device-plugin.config"))
        for n in objects.nodes
        if (_meta(n).get("labels") or {}).get("nvidia.com/device-plugin.config")
    }
    mig_labels = {
        str(_meta(n).get("labels", {}).get("nvidia.com/mig.config"))
        for n in objects.nodes
        if (_meta(n).get("labels") or {}).get("nvidia.com/mig.config")
    }
    configs: list[Obj] = []
    default_entry = False
    for cm in objects.config_maps:
        if not is_config_map(cm):
            continue
        hit, has_default = _selected(cm, plugin_labels, mig_labels)
        if hit:
            configs.append(_plain(cm))
            default_entry = default_entry or has_default
    domains = [_plain(cd) for cd in objects.compute_domains]
    for obj in [*objects.scaled_objects, *objects.hpas]:
        out.unsupported.append(
            f"{_ref(obj)}: its target workload is not imported (pods are imported as they "
            "are); add the workload and this object in a steps file to try autoscaling"
        )
    device_plugin = any(
        str(k).startswith("nvidia.com/")
        for n in objects.nodes
        for k in ((n.get("status") or {}).get("allocatable") or {})
    )
    dra = bool(slices_by_node) or any(
        str(_meta(c).get("name", "")).endswith(".nvidia.com") for c in objects.device_classes
    )
    apply: list[Obj] = [
        *[_plain(pc) for pc in objects.priority_classes],
        *configs,
        *[_plain(dc) for dc in objects.device_classes],
        *foreign_slices,
        *domains,
        *templates,
        *claims,
        *bound,
        *pending,
    ]
    where = objects.source or "the cluster"
    scope = f" (namespaces {', '.join(objects.namespaces)})" if objects.namespaces else ""
    out.scenario = {
        "name": "from-cluster",
        "description": (
            f"imported from {where}{scope}: {len(groups)} nodes, {len(bound)} bound pods, "
            f"{len(pending)} pending pods"
        ),
        "kubernetesVersion": kubernetes_version(objects.server_version, out),
        "devicePlugin": device_plugin,
        "draDriver": dra,
        "nodes": groups,
        "apply": apply,
    }
    if default_entry:
        # the device plugin's "named" fallback: a node without the label takes ``default``
        out.scenario["defaultConfig"] = "default"
    out.expected = {
        str(_meta(n).get("name")): {
            str(k): _count(v)
            for k, v in ((n.get("status") or {}).get("allocatable") or {}).items()
            if str(k).startswith("nvidia.com/")
        }
        for n in objects.nodes
    }
    out.counts = {
        "nodes": len(groups),
        "boundPods": len(bound),
        "pendingPods": len(pending),
        "resourceClaims": len(claims),
        "configMaps": len(configs),
        "unsupported": len(out.unsupported),
    }
    return out


__all__ = [
    "ClusterObjects",
    "Imported",
    "TooLarge",
    "check_bounds",
    "differences",
    "find_machine",
    "gfd_product",
    "import_cluster",
    "is_config_map",
]
