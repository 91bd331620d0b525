"""The ComputeDomain API (``resource.nvidia.com/v1beta1``) as users write it, the
ComputeDomainClique objects the controller keeps per NVLink clique, and the names kgpu shares
with NVIDIA's DRA driver.

The seed guides' manifests must load unchanged, so the field names, defaults and enums follow
the current upstream CRD exactly (``spec.numNodes`` optional and deprecated, default 0;
``channel.allocationMode`` ``Single`` | ``All``); parsing is strict (unknown fields are errors)
because a misspelt ``numNodes`` would otherwise silently build a one-node domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.config.fields import dns_subdomain_problem, is_dns_subdomain
from kgpu.errors import FieldError, FieldProblem, join_path

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ComputeDomain"
#: One object per (domain, NVLink clique) in the driver namespace, named ``<uid>.<cliqueID>``,
#: listing the domain's IMEX daemons in that clique (upstream's ComputeDomainClique).
CLIQUE_KIND = "ComputeDomainClique"

#: The DRA driver that owns IMEX channel and daemon devices (separate from gpu.nvidia.com).
DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"

#: Label on every object a domain owns (value: the domain's uid); also the finalizer name.
DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
FINALIZER = DOMAIN_LABEL
#: Which of a domain's claim templates an object is ("Workload" channel or "Daemon").
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
TARGET_WORKLOAD = "Workload"
TARGET_DAEMON = "Daemon"
#: The NVLink clique of a node (``<clusterUUID>.<cliqueId>``), set by GPU feature discovery.
CLIQUE_LABEL = "nvidia.com/gpu.clique"
#: The clique id on a ComputeDomainClique object (upstream's key).
CLIQUE_ID_LABEL = "resource.nvidia.com/computeDomain.cliqueID"
#: Set by kgpu's admission webhook on a pod that uses a domain's channel claim (value: the
#: domain's uid); the pod's clique affinity selects its siblings by it.
WORKLOAD_LABEL = "resource.nvidia.com/computeDomainWorkload"
#: IMEX allows this many nodes in one IMEX domain (upstream's --max-nodes-per-imex-domain).
MAX_NODES_PER_IMEX_DOMAIN = 18

ALLOCATION_MODES = ("Single", "All")
STATUSES = ("Ready", "NotReady")


def node_label(uid: str) -> str:
    """The node label that marks a node as hosting pods of one domain.

    Upstream uses a single ``resource.nvidia.com/computeDomain=<uid>`` label, so a node can
    belong to one domain at a time. kgpu lets several domains share a node (each gets its own
    IMEX channel there), so the key carries the uid: ``resource.nvidia.com/computeDomain.<uid>``.
    The DaemonSet of each domain selects on its own key.
    """
    return f"{DOMAIN_LABEL}.{uid}"


def clique_object_name(uid: str, clique_id: str) -> str:
    """The ComputeDomainClique of one domain in one clique: ``<uid>.<cliqueID>``, as upstream."""
    return f"{uid}.{clique_id}"


@dataclass(frozen=True)
class ComputeDomainSpec:
    num_nodes: int  # deprecated upstream; 0 (the default) means "not given"
    channel_template: str  # spec.channel.resourceClaimTemplate.name
    allocation_mode: str = "Single"


@dataclass(frozen=True)
class DomainNode:
    """One entry of ``status.nodes``, and of a ComputeDomainClique's ``daemons`` (where the
    name is ``nodeName``): a node whose IMEX daemon belongs to the domain. ``index`` is the
    daemon's place in its clique, which names it (``compute-domain-daemon-<index>``) in every
    IMEX daemon's node list."""

    name: str
    ip_address: str
    clique_id: str
    index: int = 0
    status: str = "NotReady"

    def to_obj(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ipAddress": self.ip_address,
            "cliqueID": self.clique_id,
            "index": self.index,
            "status": self.status,
        }

    def to_daemon_obj(self) -> dict[str, Any]:
        """The entry as a ComputeDomainClique lists it."""
        return {
            "nodeName": self.name,
            "ipAddress": self.ip_address,
            "cliqueID": self.clique_id,
            "index": self.index,
            "status": self.status,
        }

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any]) -> DomainNode | None:
        """An entry of ``status.nodes`` or of a clique's ``daemons``; None when malformed."""
        name = obj.get("name", obj.get("nodeName"))
        index = obj.get("index", 0)
        if not isinstance(name, str) or not name or isinstance(index, bool):
            return None
        if not isinstance(index, int):
            return None
        return cls(
            name,
            str(obj.get("ipAddress") or ""),
            str(obj.get("cliqueID") or ""),
            index,
            "Ready" if obj.get("status") == "Ready" else "NotReady",
        )


@dataclass(frozen=True)
class ComputeDomain:
    name: str
    namespace: str
    uid: str
    spec: ComputeDomainSpec
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _problem(message: str, *path: str | int) -> FieldProblem:
    return FieldProblem(message, join_path(*path))


def parse_compute_domain(obj: Mapping[str, Any]) -> ComputeDomain:
    """A typed ComputeDomain from its wire form; every problem found is reported at once."""
    problems: list[FieldProblem] = []
    if obj.get("apiVersion") != API_VERSION:
        problems.append(
            _problem(f"must be {API_VERSION!r}, got {obj.get('apiVersion')!r}", "apiVersion")
        )
    if obj.get("kind") != KIND:
        problems.append(_problem(f"must be {KIND!r}, got {obj.get('kind')!r}", "kind"))
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
        problems.append(_problem("is required (an object with a name)", "metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not is_dns_subdomain(name):
        problems.append(_problem(dns_subdomain_problem(name), "metadata", "name"))
    for key in obj:
        if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
            problems.append(_problem("unknown field", key))

    spec = obj.get("spec")
    num_nodes = 0
    template = ""
    mode = "Single"
    if not isinstance(spec, Mapping):
        problems.append(_problem("is required (channel, and optionally numNodes)", "spec"))
    else:
        for key in spec:
            if key not in ("numNodes", "channel"):
                problems.append(_problem("unknown field (allowed: numNodes, channel)", "spec", key))
        raw = spec.get("numNodes", 0)  # optional and deprecated upstream; default 0
        if isinstance(raw, bool) or not isinstance(raw, int):
            problems.append(_problem(f"must be an integer >= 0, got {raw!r}", "spec", "numNodes"))
        elif raw < 0:
            problems.append(_problem(f"must be zero or greater, got {raw}", "spec", "numNodes"))
        else:
            num_nodes = raw
        channel = spec.get("channel")
        if not isinstance(channel, Mapping):
            problems.append(_problem("is required (resourceClaimTemplate.name)", "spec", "channel"))
        else:
            for key in channel:
                if key not in ("resourceClaimTemplate", "allocationMode"):
                    problems.append(
                        _problem(
                            "unknown field (allowed: resourceClaimTemplate, allocationMode)",
                            "spec",
                            "channel",
                            key,
                        )
                    )
            rct = channel.get("resourceClaimTemplate")
            tname = rct.get("name") if isinstance(rct, Mapping) else None
            if not isinstance(tname, str) or not is_dns_subdomain(tname):
                problems.append(
                    _problem(
                        f"must be a DNS subdomain naming the ResourceClaimTemplate to create, "
                        f"got {tname!r}",
                        "spec",
                        "channel",
                        "resourceClaimTemplate",
                        "name",
                    )
                )
            else:
                template = tname
            raw_mode = channel.get("allocationMode", "Single")
            if raw_mode not in ALLOCATION_MODES:
                problems.append(
                    _problem(
                        f"must be one of Single, All, got {raw_mode!r}",
                        "spec",
                        "channel",
                        "allocationMode",
                    )
                )
            else:
                mode = str(raw_mode)
    status = obj.get("status")
    if status is not None and not isinstance(status, Mapping):
        problems.append(_problem("must be an object", "status"))
    if problems:
        entry = f"ComputeDomain {name}" if isinstance(name, str) else ""
        raise FieldError(problems).located(entry=entry)
    return ComputeDomain(
        name=str(name),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid") or ""),
        spec=ComputeDomainSpec(
            num_nodes=num_nodes, channel_template=template, allocation_mode=mode
        ),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        status=dict(status or {}),
    )
