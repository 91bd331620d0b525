"""The agent keeps IMEX daemon configs current: when a ComputeDomain's daemons in the node's
clique change in the API server (its ComputeDomainClique, which the controller writes), the
daemon's ``hosts`` mapping is rewritten without any kubelet call, from a watch on exactly that
one object (no timer, no list of all nodes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_kubelet_helpers import NODE

from kgpu.computedomain.api import API_VERSION, CLIQUE_ID_LABEL, DOMAIN_LABEL
from kgpu.config.loader import ConfigSet
from kgpu.drivers.computedomain import compute_domain_driver
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.node.view import build_node_view
from kgpu.store import MemoryStore, Scope
from kgpu.testing.manifests import compute_domain

CLIQUE = "5a3c1a2e-0000-4000-8000-000000000001.3"
CD_DRIVER = "compute-domain.nvidia.com"
PEER = "tray-2"


def _node(store: MemoryStore, name: str, ip: str) -> None:
    store.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": CLIQUE}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": ip}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def _daemon_claim(domain_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "train-daemon",
            "namespace": "nvidia-dra-driver-gpu",  # the controller's, made from its template
            "uid": "claim-d",
            "labels": {DOMAIN_LABEL: domain_uid},
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "daemon",
                            "driver": CD_DRIVER,
                            "pool": NODE,
                            "device": "daemon-0",
                        }
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["daemon"],
                            "opaque": {
                                "driver": CD_DRIVER,
                                "parameters": {
                                    "apiVersion": API_VERSION,
                                    "kind": "ComputeDomainDaemonConfig",
                                    "domainID": domain_uid,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


@pytest.fixture
def gb200() -> Machine:
    return load_machine("gb200", hostname=NODE, clique=CLIQUE)


@pytest.fixture
def started(
    short_tmp: Path, store: MemoryStore, gb200: Machine
) -> Iterator[Callable[[], tuple[DraComponent, Path]]]:
    """A running DRA component serving an IMEX daemon of one domain on NODE."""
    components: list[DraComponent] = []

    def start() -> tuple[DraComponent, Path]:
        _node(store, NODE, "10.1.0.1")
        _node(store, PEER, "10.1.0.2")
        domain = store.create(compute_domain("train", 2, channel="t-ch"))
        uid = domain["metadata"]["uid"]
        component = DraComponent(
            short_tmp / "kubelet",
            short_tmp / "cdi",
            NODE,
            SimulatedBackend(gb200),
            store,
            driver_factories=(compute_domain_driver,),
        )
        component.start()
        components.append(component)
        claim = _daemon_claim(uid)
        ref = ClaimRef("nvidia-dra-driver-gpu", "claim-d", "train-daemon")
        result = component.plugins[CD_DRIVER].prepare([ref], {ref.uid: claim})[ref.uid]
        assert not result.error
        (config,) = (short_tmp / "kubelet").rglob(f"domains/{uid}/hosts")
        assert config.read_text() == ""  # the controller has listed no daemon yet
        _set_clique(store, uid, [(NODE, "10.1.0.1")])
        assert _wait_for(config, ME) == ME
        return component, config

    yield start
    for component in components:
        component.stop()


ME = "10.1.0.1\tcompute-domain-daemon-0000\n"
BOTH = ME + "10.1.0.2\tcompute-domain-daemon-0001\n"


def _set_clique(store: MemoryStore, uid: str, daemons: list[tuple[str, str]]) -> None:
    """The domain's ComputeDomainClique as the controller writes it."""
    store.apply(
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": f"{uid}.{CLIQUE}",
                "namespace": "kgpu-system",
                "labels": {DOMAIN_LABEL: uid, CLIQUE_ID_LABEL: CLIQUE},
            },
            "daemons": [
                {"nodeName": n, "ipAddress": ip, "cliqueID": CLIQUE, "index": i}
                for i, (n, ip) in enumerate(daemons)
            ],
        }
    )


def _peer(store: MemoryStore, config: Path, present: bool) -> None:
    daemons = [(NODE, "10.1.0.1"), (PEER, "10.1.0.2")] if present else [(NODE, "10.1.0.1")]
    _set_clique(store, config.parent.name, daemons)


def _wait_for(config: Path, text: str, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if config.read_text() == text:
            break
        time.sleep(0.02)
    return config.read_text()


def test_daemon_config_follows_the_domain_nodes_in_the_background(
    started: Any, store: MemoryStore
) -> None:
    component, config = started()
    uid = config.parent.name
    scopes = {i.scope for i in component.store.informers.informers()}
    assert scopes == {
        Scope.of(
            API_VERSION, "ComputeDomainClique", labels={DOMAIN_LABEL: uid, CLIQUE_ID_LABEL: CLIQUE}
        ),
        Scope.of(API_VERSION, "ComputeDomain"),
        Scope.of("resource.k8s.io/v1", "ResourceSlice", fields={"spec.nodeName": NODE}),
    }
    _peer(store, config, present=True)
    assert _wait_for(config, BOTH) == BOTH

    _peer(store, config, present=False)  # the peer's daemon left the clique
    assert _wait_for(config, ME) == ME

    component.stop()  # the watches end with the component
    _peer(store, config, present=True)
    time.sleep(0.3)
    assert config.read_text() == ME


def test_a_clique_change_needs_no_view_and_a_view_rewrites_nothing_more(
    started: Any, store: MemoryStore, gb200: Machine
) -> None:
    component, config = started()
    _peer(store, config, present=True)
    assert _wait_for(config, BOTH) == BOTH
    component.on_view(build_node_view(gb200, ConfigSet(), {}))
    assert config.read_text() == BOTH
    assert component.sync_daemons() == []  # nothing changed since: nothing rewritten
