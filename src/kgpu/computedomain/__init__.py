"""ComputeDomains: multi-node NVLink domains with IMEX channels (``resource.nvidia.com/v1beta1``).

``api`` (the typed model and names shared with NVIDIA's driver), ``crd`` (the CRD and schema
validation), ``objects`` (what a domain owns), ``reconcile`` (the controller pass),
``placement`` (clique-bounded placement), ``imex`` (channels and IMEX config files), ``slices``
(the node's devices) and ``node`` (the ``compute-domain.nvidia.com`` DRA driver handler).
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
    Reconciler,
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
    "Reconciler",
    "StoreView",
    "domain_status",
    "node_label",
    "parse_compute_domain",
    "reconcile",
    "sync_domain",
]
