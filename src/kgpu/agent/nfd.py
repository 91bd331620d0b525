"""GPU feature labels for node-feature-discovery: a ``NodeFeature`` object, or the features file.

NFD turns two inputs into node labels: ``NodeFeature`` objects (``nfd.k8s-sigs.io/v1alpha1``,
its API since v0.14; nfd-master reads them from every namespace) and, on each node, the
``key=value`` files its local source reads from ``features.d``. gpu-feature-discovery writes
either; so does the agent. With an API server (``--kubeconfig``/``--in-cluster``) that serves
the NodeFeature API, the labels go into one object per node, named as GFD names its own
(``nvidia-features-for-<node>``, label ``nfd.node.kubernetes.io/node-name: <node>``) in the
agent's namespace, owned by the Node (garbage-collected with it). It is written with
server-side apply, only when the labels change (one request), so labels that disappear from
the view disappear from the object. Without such an API (no store, NFD older than v0.14, the
CRD not installed, or the API refusing the write) the labels go to ``DIR/kgpu-features`` as
before: written atomically (temp file + rename) so NFD never reads half a label set. When the
object is published, a features file left from before is removed, so a later downgrade of NFD
cannot resurrect stale labels.

Labels the MIG manager owns (``nvidia.com/mig.config.state``) are overlaid by it
(:meth:`FeaturesComponent.set_labels`): without an API server that is how its state reaches
the Node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from kgpu.kubelet.cdi import write_atomic
from kgpu.kubelet.dirs import ensure_directory
from kgpu.node.model import NodeView
from kgpu.store import NotFound, ObjectStore, StoreError
from kgpu.store.objects import Obj

log = logging.getLogger(__name__)

DEFAULT_FEATURES_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")
FEATURES_FILE = "kgpu-features"
NODE_FEATURE_API = "nfd.k8s-sigs.io/v1alpha1"
NODE_FEATURE_KIND = "NodeFeature"
#: NFD's label naming the node a NodeFeature describes (``NodeFeatureObjNodeNameLabel``).
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
#: gpu-feature-discovery's prefix of its NodeFeature's name.
NAME_PREFIX = "nvidia-features-for-"
#: How often a NodeFeature publication that failed is tried again while nothing changes.
RETRY_S = 60.0


def render(labels: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))


def write_features(directory: Path, labels: Mapping[str, str]) -> bool:
    """Write the features file; False (nothing written) when it already says this."""
    ensure_directory(directory, 0o755)  # nfd-worker reads it; whatever the umask
    target = directory / FEATURES_FILE
    text = render(labels)
    try:
        if target.read_text() == text:
            return False
    except OSError:
        pass
    write_atomic(target, text, mode=0o644)
    return True


def node_feature(
    node_name: str, namespace: str, labels: Mapping[str, str], node_uid: str | None = None
) -> Obj:
    """The NodeFeature object carrying ``labels`` for ``node_name`` (GFD's name and shape:
    empty raw features, the labels in ``spec.labels``)."""
    metadata: Obj = {
        "name": NAME_PREFIX + node_name,
        "namespace": namespace,
        "labels": {NODE_NAME_LABEL: node_name},
    }
    if node_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node_name,
                "uid": node_uid,
                "blockOwnerDeletion": False,
            }
        ]
    return {
        "apiVersion": NODE_FEATURE_API,
        "kind": NODE_FEATURE_KIND,
        "metadata": metadata,
        "spec": {
            "features": {"flags": {}, "attributes": {}, "instances": {}},
            "labels": dict(sorted(labels.items())),
        },
    }


def _not_served(exc: StoreError) -> bool:
    """The API server does not serve the NodeFeature API (discovery said 404)."""
    return isinstance(exc, NotFound) or getattr(exc, "code", None) == 404


#: GFD's timestamp label (its ``NewTimestampLabeler``), left out under ``flags.gfd.noTimestamp``.
TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"


class FeaturesComponent:
    """Publishes every view's labels for NFD (an agent component): as a NodeFeature through
    ``store`` when it serves the API, else into ``DIR/kgpu-features``. Nothing is written while
    the labels stay the same; a failed write is logged once per reason and tried again with a
    later view (a NodeFeature at most every :data:`RETRY_S` while nothing changes)."""

    name = "nfd"

    def __init__(
        self,
        directory: Path,
        *,
        store: ObjectStore | None = None,
        node_name: str = "",
        namespace: str = "default",
        node_uid: Callable[[], str | None] = lambda: None,
        drop: Collection[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.store = store
        self.node_name = node_name
        self.namespace = namespace
        self._node_uid = node_uid
        self._drop = frozenset(drop)  # view labels another component owns
        self._clock = clock
        self._wall_clock = wall_clock
        self._stamp = True  # the view's flags.gfd.noTimestamp, inverted
        self._stamped: tuple[dict[str, str], str] | None = None  # (labels, their timestamp)
        self._lock = threading.Lock()
        self._view_labels: dict[str, str] = {}
        self._overlay: dict[str, str] = {}
        self._published: dict[str, str] | None = None
        self._published_uid: str | None = None
        self._failing = ""
        self._retry_at = 0.0
        #: where the labels went last: "NodeFeature <ns>/<name>", the file, or "" (not yet)
        self.target = ""

    def on_view(self, view: NodeView) -> None:
        with self._lock:
            self._view_labels = {k: v for k, v in view.labels.items() if k not in self._drop}
            self._stamp = view.gfd_timestamp
            self._publish()

    def set_labels(self, labels: Mapping[str, str]) -> None:
        """Labels another component owns (the MIG manager's state), over the view's."""
        with self._lock:
            self._overlay.update(labels)
            self._publish()

    def labels(self) -> dict[str, str]:
        """The view's labels and the overlay, with GFD's ``nvidia.com/gfd.timestamp`` (unless
        ``noTimestamp``): when this set of labels was first published, in Unix seconds. GFD
        stamps every relabelling run; the agent relabels when the labels change, so the stamp
        moves only then and an unchanged node costs no write."""
        labels = {**self._view_labels, **self._overlay}
        if not self._stamp:
            return labels
        if self._stamped is None or self._stamped[0] != labels:
            self._stamped = (dict(labels), str(int(self._wall_clock())))
        return {**labels, TIMESTAMP_LABEL: self._stamped[1]}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def _publish(self) -> None:
        labels = self.labels()
        uid = self._node_uid() if self.store is not None else None
        if self.store is not None:
            same = labels == self._published and uid == self._published_uid
            if same and self.target.startswith(NODE_FEATURE_KIND):
                return
            if same and self._clock() < self._retry_at:
                return
            if self._apply(labels, uid):
                return
        try:
            if write_features(self.directory, labels):
                log.info("wrote %d labels to %s", len(labels), self.directory / FEATURES_FILE)
            self._published, self._published_uid = labels, uid
            self.target = str(self.directory / FEATURES_FILE)
            if not self.store:
                self._failing = ""
        except OSError as exc:
            self._warn(f"cannot write NFD features to {self.directory}: {exc}")

    def _apply(self, labels: dict[str, str], uid: str | None) -> bool:
        assert self.store is not None
        obj = node_feature(self.node_name, self.namespace, labels, uid)
        where = f"{NODE_FEATURE_KIND} {self.namespace}/{obj['metadata']['name']}"
        try:
            self.store.apply(obj)
        except StoreError as exc:
            self._retry_at = self._clock() + RETRY_S
            if _not_served(exc):
                self._warn(
                    f"the API server does not serve {NODE_FEATURE_API} {NODE_FEATURE_KIND} "
                    f"(node-feature-discovery v0.14+ installs it): labels go to "
                    f"{self.directory / FEATURES_FILE}"
                )
            else:
                self._warn(f"cannot publish {where}: {exc}; labels go to the features file")
            return False
        if self.target != where:
            log.info("publishing %d labels as %s", len(labels), where)
        self._published, self._published_uid = labels, uid
        self.target = where
        self._failing = ""
        stale = self.directory / FEATURES_FILE
        try:
            stale.unlink()
            log.info("removed %s: the labels are in %s now", stale, where)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove %s: %s", stale, exc)
        return True

    def _warn(self, message: str) -> None:
        if message != self._failing:  # once per distinct failure, not per view
            log.warning("%s", message)
            self._failing = message
