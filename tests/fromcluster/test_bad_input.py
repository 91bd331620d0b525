"""What ``--from-cluster`` says when it cannot do its job: an API server that cannot be reached,
credentials it refuses (401) or a list RBAC does not allow (403), a cluster above kgpu sim's
bounds, flags that need --from-cluster, a bad --machine-map: each one line naming what to do,
exit 1, never a traceback. Objects it cannot model are listed under ``unsupported``."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.cluster.kube import KubeApiError
from kgpu.cluster.snapshot import ReadError, read_cluster
from kgpu.sim import fromcluster
from kgpu.testing.apiserver import write_kubeconfig

from .cluster import recorded, serve

runner = CliRunner()


def _fails(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result.stderr


def test_unreachable_api_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    err = _fails("sim", "--from-cluster", "--kubeconfig", str(kubeconfig))
    assert f"cannot reach the API server at http://127.0.0.1:{port}" in err
    assert "check --kubeconfig" in err


def test_refused_credentials(tmp_path: Path) -> None:
    with serve(tmp_path, objects=[]) as (server, _):
        bad = write_kubeconfig(tmp_path / "bad", server.url, token="expired")
        err = _fails("sim", "--from-cluster", "--kubeconfig", str(bad))
    assert "did not accept the credentials (401 Unauthorized)" in err


def test_forbidden_list_names_the_kind_and_the_role() -> None:
    class Store:
        host = "https://cluster"

        def server_version(self) -> str:
            return "v1.34.2"

        def list(self, api_version: str, kind: str, **_: Any) -> list[Any]:
            if kind == "Pod":
                raise KubeApiError('pods is forbidden: User "ann" cannot list', "Forbidden", 403)
            return []

    with pytest.raises(ReadError) as caught:
        read_cluster(Store())  # type: ignore[arg-type]
    text = str(caught.value)
    assert "refused to list Pods (v1) (403 Forbidden)" in text
    assert "fromCluster.rbac.create" in text


def test_kinds_the_server_does_not_serve_read_as_none(tmp_path: Path) -> None:
    """No KEDA, PriorityClass or HPA in this stand-in's kinds: the import goes on."""
    from kgpu.cluster.kube import KubeStore
    from kgpu.testing.apiserver import TOKEN, FakeApiServer

    server = FakeApiServer(token=TOKEN).start()
    try:
        store = KubeStore.from_config(
            str(write_kubeconfig(tmp_path / "kc", server.url)), user_agent="test-client/1.0"
        )
        snap = read_cluster(store)
        store.close()
    finally:
        server.stop()
    assert set(snap.missing) == {"PriorityClass", "ScaledObject", "HorizontalPodAutoscaler"}
    assert snap.lists["nodes"] == []


def test_cluster_above_the_bounds_suggests_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fromcluster, "MAX_PODS", 3)
    with serve(tmp_path) as (_, kubeconfig):
        err = _fails("sim", "--from-cluster", "--kubeconfig", str(kubeconfig))
        assert "the cluster has 8 pods to import; kgpu sim runs at most 3" in err
        assert "--namespace NS" in err
        err = _fails(
            "explain", "pod", "ml/train-2", "--from-cluster", "--kubeconfig", str(kubeconfig)
        )
        assert "kgpu sim runs at most 3" in err
        ok = runner.invoke(
            app,
            ["sim", "--from-cluster", "--kubeconfig", str(kubeconfig), "-n", "web", "-o", "json"],
        )
    assert ok.exit_code == 0, ok.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sim", "--kubeconfig", "kc"], "--kubeconfig: only with --from-cluster"),
        (["sim", "--save", "x.yaml"], "--save: only with --from-cluster"),
        (["sim", "--from-cluster", "--anonymize"], "--anonymize: only with --save FILE"),
        (["explain", "pod", "a/b", "-n", "ml"], "--namespace: only with --from-cluster"),
        (["explain", "pod", "a/b"], "give a scenario file, or --from-cluster"),
        (
            ["sim", "--from-cluster", "--machine-map", "Tesla-T4"],
            "must be PRODUCT=PROFILE",
        ),
        (
            ["sim", "--from-cluster", "--machine-map", "Tesla-T4=nope"],
            "unknown machine profile 'nope'",
        ),
    ],
)
def test_flags(args: list[str], message: str) -> None:
    assert message in _fails(*args)


def _objects(**lists: list[Any]) -> fromcluster.ClusterObjects:
    return fromcluster.ClusterObjects(**lists)  # type: ignore[arg-type]


def _node(name: str, product: str = "", count: str = "1") -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if product:
        labels |= {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": count}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def test_unmodellable_objects_are_listed_and_skipped() -> None:
    scaled = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {"scaleTargetRef": {"name": "web"}},
    }
    out = fromcluster.import_cluster(
        _objects(
            nodes=[_node("odd", "NVIDIA-B300"), _node("t4", "Tesla-T4")], scaled_objects=[scaled]
        )
    )
    assert out.unsupported[0] == (
        "Node odd: GPU product 'NVIDIA-B300' has no built-in machine profile; map it with "
        "--machine-map NVIDIA-B300=PROFILE (see kgpu machines); imported without GPUs"
    )
    assert out.unsupported[1].startswith("ScaledObject ml/web: its target workload is not imported")
    groups = {g["name"]: g for g in out.scenario["nodes"]}
    assert "machine" not in groups["odd"] and groups["t4"]["machine"] == "t4"
    # GFD's own labels are left to the simulated GFD, the node's others kept
    assert groups["t4"]["labels"] == {"kubernetes.io/hostname": "t4"}
    mapped = fromcluster.import_cluster(
        _objects(nodes=[_node("odd", "NVIDIA-B300")]), {"NVIDIA-B300": "gb200"}
    )
    assert mapped.scenario["nodes"][0]["machine"] == "gb200" and mapped.unsupported == []


def test_gpu_count_picks_the_machine_and_a_mismatch_is_said() -> None:
    out = fromcluster.import_cluster(
        _objects(
            nodes=[
                _node("one", "NVIDIA-A100-SXM4-80GB", "1"),
                _node("eight", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "8"),
                _node("six", "NVIDIA-H100-80GB-HBM3", "6"),
            ]
        )
    )
    machines = {g["name"]: g["machine"] for g in out.scenario["nodes"]}
    # H100 80GB has profiles of 1 (h100-80gb) and 8 GPUs (dgx-h100): 6 is nearest 8
    assert machines == {"one": "a100-80gb", "eight": "p4de.24xlarge", "six": "dgx-h100"}
    assert out.warnings == [
        "Node six: 6 x NVIDIA-H100-80GB-HBM3: the nearest built-in machine is dgx-h100 with 8 "
        "GPUs; name another with --machine-map NVIDIA-H100-80GB-HBM3=PROFILE"
    ]


def test_version_outside_the_modelled_releases_is_said() -> None:
    out = fromcluster.import_cluster(_objects(server_version="v1.31.4-eks-abc"))
    assert out.scenario["kubernetesVersion"] == "1.32"
    assert "Kubernetes 1.31; kgpu models 1.32 to 1.37: simulating 1.32" in out.warnings[0]


def test_json_lists_the_unsupported(tmp_path: Path) -> None:
    objects, _ = recorded()
    objects = [*objects, _node("odd", "NVIDIA-B300")]
    with serve(tmp_path, objects=objects) as (_, kubeconfig):
        result = runner.invoke(
            app, ["sim", "--from-cluster", "--kubeconfig", str(kubeconfig), "-o", "json"]
        )
    assert result.exit_code == 0, result.stderr
    unsupported = json.loads(result.stdout)["unsupported"]
    assert unsupported[0].startswith("Node odd: GPU product 'NVIDIA-B300'")


def test_a_node_advertising_other_amounts_than_the_api_server_is_warned(tmp_path: Path) -> None:
    """The import's own check: gpu-b says 2 GPUs (a config the import cannot see), the
    simulated gpu-b advertises 1."""
    objects, _ = recorded()
    for obj in objects:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "gpu-b":
            obj["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    with serve(tmp_path, objects=objects) as (_, kubeconfig):
        result = runner.invoke(app, ["sim", "--from-cluster", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.stderr
    assert (
        "warning Node gpu-b: the API server reports nvidia.com/gpu 2, the simulated node "
        "advertises 1" in " ".join(result.stderr.split())
    )
