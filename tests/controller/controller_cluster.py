"""The controller tests' cluster: the API-server stand-in, stores with their own user
agents, a cluster of GB200 nodes in two NVLink cliques, and ``kgpu controller`` replicas
with short lease timings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kgpu.cluster.kube import KubeStore
from kgpu.computedomain.api import CLIQUE_LABEL
from kgpu.controller import Controller, ControllerOptions
from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig
from kgpu.testing.manifests import compute_domain
from kgpu.testing.poll import eventually

NAMESPACE = "kgpu-system"
RACK_A = "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0"
RACK_B = "1f0c0a3e-2c4b-4d8e-9a51-6b8e2f3d4c5a.0"
#: short timings so takeover tests run in seconds (the defaults are 15/10/2 s)
FAST = {"lease_duration_s": 1.5, "renew_deadline_s": 1.0, "retry_period_s": 0.2}

Obj = dict[str, Any]


def node(name: str, clique: str, ip: str, gpus: int = 4) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {CLIQUE_LABEL: clique}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "72", "memory": "800Gi"},
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def domain(name: str, ns: str = "ml", num_nodes: int = 2, mode: str | None = None) -> Obj:
    return compute_domain(name, num_nodes, namespace=ns, channel=f"{name}-channel", mode=mode)


def wait_for(check: Callable[[], Any], seconds: float = 10.0, step: float = 0.02) -> Any:
    """Poll ``check`` (test side only) until it returns something truthy."""
    return eventually(check, seconds, step)


class Cluster:
    """The stand-in with an admin store and a factory of controller replicas."""

    def __init__(self, server: FakeApiServer, root: Path) -> None:
        self.server = server
        self.root = root
        self.admin = self.store("test-admin")
        self.controllers: list[Controller] = []
        self.stores: list[KubeStore] = []

    def store(self, user_agent: str) -> KubeStore:
        path = write_kubeconfig(
            self.root / f"kc-{len(list(self.root.glob('kc-*')))}", self.server.url
        )
        return KubeStore.from_config(str(path), qps=None, user_agent=user_agent)

    def controller(self, identity: str, **options: Any) -> Controller:
        store = self.store(f"kgpu-controller/{identity}")
        self.stores.append(store)
        factory = options.pop("elector_factory", None)
        settings: Obj = {"namespace": NAMESPACE, "identity": identity, **FAST}
        settings.update(options)
        extra = {"elector_factory": factory} if factory is not None else {}
        ctl = Controller(store, ControllerOptions(**settings), **extra)
        self.controllers.append(ctl)
        return ctl.start()

    def close(self) -> None:
        for ctl in self.controllers:
            ctl.stop()
        for store in [*self.stores, self.admin]:
            store.close()
