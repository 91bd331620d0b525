"""ComputeDomains: multi-node NVLink domains with IMEX channels (``resource.nvidia.com/v1beta1``).

``api`` (the typed model and names shared with NVIDIA's driver), ``crd`` (the ComputeDomain
and ComputeDomainClique CRDs and schema validation), ``objects`` (what a domain owns),
``members`` (which pods belong to a domain: one rule), ``status`` (daemons and status, pure),
``view`` (how a sync reads the cluster), ``reconcile`` (one domain's sync, and the full pass),
``placement`` (clique room and its explanation), ``admission`` (the pod mutation of the clique
placement webhook), ``imex`` (channels and IMEX config files) and ``slices`` (the node's
devices). The ``compute-domain.nvidia.com`` DRA driver that runs on a node is
:mod:`kgpu.drivers.computedomain`; the process that runs the sync is :mod:`kgpu.controller`.
"""

from kgpu.computedomain.api import (
    API_VERSION,
    CHANNEL_CLASS,
    CLIQUE_LABEL,
    DAEMON_CLASS,
    DOMAIN_LABEL,
    DRIVER,
    KIND,
    ComputeDomain,
    ComputeDomainSpec,
    DomainNode,
    node_label,
    parse_compute_domain,
)
from kgpu.computedomain.reconcile import (
    DomainEvent,
    StoreView,
    domain_status,
    reconcile,
    sync_domain,
)

__all__ = [
    "API_VERSION",
    "CHANNEL_CLASS",
    "CLIQUE_LABEL",
    "DAEMON_CLASS",
    "DOMAIN_LABEL",
    "DRIVER",
    "KIND",
    "ComputeDomain",
    "ComputeDomainSpec",
    "DomainEvent",
    "DomainNode",
    "StoreView",
    "domain_status",
    "node_label",
    "parse_compute_domain",
    "reconcile",
    "sync_domain",
]
