"""Node labels for node-feature-discovery's local feature source.

NFD's ``local`` source reads every file in ``features.d`` as ``key=value`` lines and publishes
them as node labels. Writing the file atomically (temp file + rename) means NFD never reads a
half-written label set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from kgpu.kubelet.cdi import write_atomic
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)

DEFAULT_FEATURES_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")
FEATURES_FILE = "kgpu-features"


def render(labels: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))


def write_features(directory: Path, labels: Mapping[str, str]) -> bool:
    """Write the features file; False (nothing written) when it already says this."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FEATURES_FILE
    text = render(labels)
    try:
        if target.read_text() == text:
            return False
    except OSError:
        pass
    write_atomic(target, text, mode=0o644)
    return True


class FeaturesComponent:
    """Writes every view's labels for NFD (an agent component): the file changes only when
    the labels do, and a write that fails is logged and tried again with the next view."""

    name = "nfd"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._failing = ""

    def on_view(self, view: NodeView) -> None:
        try:
            if write_features(self.directory, view.labels):
                log.info("wrote %d labels to %s", len(view.labels), self.directory)
            self._failing = ""
        except OSError as exc:
            if str(exc) != self._failing:  # once per distinct failure, not per view
                log.warning("cannot write NFD features to %s: %s", self.directory, exc)
                self._failing = str(exc)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
