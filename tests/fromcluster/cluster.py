"""A cluster recorded from the API-server stand-in, served again for ``--from-cluster`` tests.

``tests/data/fromcluster/cluster.yaml`` holds the objects and, per Pending pod, the
FailedScheduling message kube-scheduler wrote for it; :func:`serve` starts a stand-in of one
release with the kinds the import reads that the stand-in does not serve by default
(PriorityClass, HorizontalPodAutoscaler, KEDA's ScaledObject) and writes the objects through
the real client, as the cluster's own components would have.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from kgpu.cluster.kube import KubeStore
from kgpu.testing.apiserver import KINDS, TOKEN, FakeApiServer, Kind, write_kubeconfig

DATA = Path(__file__).resolve().parents[1] / "data" / "fromcluster" / "cluster.yaml"
TEST_CLIENT = "test-client/1.0"
EXTRA_KINDS = (
    Kind("scheduling.k8s.io", ("v1",), "PriorityClass", "priorityclasses", False, False),
    Kind("autoscaling", ("v2",), "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, True),
    Kind("keda.sh", ("v1alpha1",), "ScaledObject", "scaledobjects", True, True, True),
)
Obj = dict[str, Any]


def recorded() -> tuple[list[Obj], dict[str, dict[str, str]]]:
    """The fixture's objects and its Events (pod -> release -> message)."""
    data = yaml.safe_load(DATA.read_text())
    return list(data["objects"]), dict(data["events"])


def event_for(events: Mapping[str, Mapping[str, str]], pod: str, release: str) -> str:
    by_release = events[pod]
    return by_release.get(release) or by_release["*"]


def seed(url: str, tmp: Path, objects: Iterable[Obj]) -> None:
    """Create ``objects`` through the real client (status included) as test code."""
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp / "seed-kubeconfig", url)), user_agent=TEST_CLIENT, qps=None
    )
    try:
        for obj in objects:
            store.create(obj)
    finally:
        store.close()


@contextmanager
def serve(
    tmp: Path, release: str = "1.34", objects: Iterable[Obj] | None = None
) -> Iterator[tuple[FakeApiServer, Path]]:
    """A stand-in of ``release`` holding ``objects`` (the fixture's by default), and a
    kubeconfig that reaches it."""
    server = FakeApiServer(token=TOKEN, release=release, kinds=KINDS + EXTRA_KINDS).start()
    try:
        seed(server.url, tmp, recorded()[0] if objects is None else objects)
        yield server, write_kubeconfig(tmp / "kubeconfig", server.url)
    finally:
        server.stop()
