"""The object-store protocol and its in-memory implementation: kgpu's view of the Kubernetes
API, in the core (no I/O). The real API server implements the same protocol in
:mod:`kgpu.cluster`."""

from kgpu.store.cache import CachedStore, SharedInformers
from kgpu.store.forwarding import ForwardingStore
from kgpu.store.informer import Backoff, Informer, InformerStats, Scope
from kgpu.store.memory import MemoryStore, MemoryWatch, clone, list_read_only
from kgpu.store.objects import (
    CLUSTER_SCOPED,
    Obj,
    field_value,
    group_of,
    key_of,
    matches_fields,
    matches_labels,
    merge_patch,
    namespace_of,
    object_ref,
)
from kgpu.store.protocol import (
    AlreadyExists,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    ObjectList,
    ObjectStore,
    StoreError,
    Watch,
    WatchEvent,
)

__all__ = [
    "CLUSTER_SCOPED",
    "AlreadyExists",
    "Backoff",
    "CachedStore",
    "Conflict",
    "ForwardingStore",
    "Gone",
    "Informer",
    "InformerStats",
    "Invalid",
    "MemoryStore",
    "MemoryWatch",
    "NotFound",
    "Obj",
    "ObjectList",
    "ObjectStore",
    "Scope",
    "SharedInformers",
    "StoreError",
    "Watch",
    "WatchEvent",
    "clone",
    "field_value",
    "group_of",
    "key_of",
    "list_read_only",
    "matches_fields",
    "matches_labels",
    "merge_patch",
    "namespace_of",
    "object_ref",
]
