"""The agent's own Node, watched: per-node configs come from its labels.

The GPU Operator runs a config-manager sidecar next to the device plugin that watches the
node's ``nvidia.com/device-plugin.config`` label and restarts the plugin with the config it
names; its MIG manager watches ``nvidia.com/mig.config`` the same way. The agent does both
itself: one informer on its Node (field selector ``metadata.name=<node>``, shared through the
store's :class:`~kgpu.store.SharedInformers`, so the DRA component's reads of the same Node
come from the same cache) and a reload when either label changes. Other label changes (the
MIG manager's own state label, NFD's labels) reload nothing.

At start the agent waits for the first list, up to ``sync_timeout_s``, so the first view
already uses the Node's config; an API server that does not answer by then is logged, and the
labels apply (with a reload) when the watch catches up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kgpu.config.loader import MIG_CONFIG_LABEL, PLUGIN_CONFIG_LABEL
from kgpu.store import CachedStore
from kgpu.store.informer import Informer

log = logging.getLogger(__name__)

#: The labels whose change makes the agent rebuild its view.
CONFIG_LABELS = (PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL)


class NodeWatch:
    """Labels and uid of one Node, kept current by a shared informer."""

    def __init__(
        self,
        store: CachedStore,
        node_name: str,
        on_config_change: Callable[[], None],
        *,
        sync_timeout_s: float = 10.0,
    ) -> None:
        self.store = store
        self.node_name = node_name
        self._on_config_change = on_config_change
        self._sync_timeout_s = sync_timeout_s
        self._informer: Informer | None = None
        self._remove: Callable[[], None] | None = None
        self._seen: tuple[str | None, ...] | None = None
        self._missing_logged = False

    def start(self) -> bool:
        """Open the watch; True once the Node's first list arrived within the timeout."""
        self._informer = self.store.informers.acquire(
            "v1", "Node", fields={"metadata.name": self.node_name}, wait=False
        )
        synced = self._informer.wait_synced(self._sync_timeout_s)
        if not synced:
            log.warning(
                "no answer from the API server about Node %s within %g s: serving without "
                "its labels until the watch catches up",
                self.node_name,
                self._sync_timeout_s,
            )
        self._seen = self._config_labels()
        self._remove = self._informer.add_handler(on_change=self._changed)
        return synced

    def stop(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None
        if self._informer is not None:
            self.store.informers.release(self._informer)
            self._informer = None

    def node(self) -> dict[str, object] | None:
        return self._informer.get(self.node_name) if self._informer is not None else None

    def labels(self) -> dict[str, str]:
        node = self.node()
        if node is None:
            return {}
        metadata = node.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        return {str(k): str(v) for k, v in (labels or {}).items()}

    def uid(self) -> str | None:
        node = self.node()
        metadata = node.get("metadata") if node is not None else None
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        return str(uid) if uid else None

    def _config_labels(self) -> tuple[str | None, ...]:
        labels = self.labels()
        return tuple(labels.get(key) for key in CONFIG_LABELS)

    def _changed(self) -> None:
        if self._informer is not None and self._informer.synced and self.node() is None:
            if not self._missing_logged:
                log.warning("Node %s does not exist (yet): no labels from it", self.node_name)
                self._missing_logged = True
        else:
            self._missing_logged = False
        now = self._config_labels()
        if now == self._seen:
            return
        before, self._seen = self._seen, now
        changes = ", ".join(
            f"{key}={value or '(unset)'}"
            for key, value, old in zip(CONFIG_LABELS, now, before or (), strict=False)
            if value != old
        )
        log.info("Node %s: %s", self.node_name, changes or "config labels changed")
        self._on_config_change()
