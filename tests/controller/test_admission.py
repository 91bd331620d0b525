"""Clique placement through the admission webhook: the pure mutation (which pods it touches,
the affinity it adds, the first pod's clique choice, pods with affinity of their own), and the
HTTPS server answering AdmissionReviews as the API server sends them."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from controller_cluster import RACK_A, RACK_B, node  # type: ignore[import-not-found]

from kgpu.computedomain.admission import (
    apply_patch,
    channel_claim_domain,
    mutate_pod,
    placement_patch,
)
from kgpu.computedomain.api import (
    API_VERSION,
    CLIQUE_LABEL,
    WORKLOAD_LABEL,
    ComputeDomain,
    parse_compute_domain,
)
from kgpu.controller.webhook import PATH, AdmissionServer, review

Obj = dict[str, Any]
AFF = "requiredDuringSchedulingIgnoredDuringExecution"


def _domain(name: str = "train", num_nodes: int = 2, uid: str = "uid-1") -> ComputeDomain:
    return parse_compute_domain(
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {
                "numNodes": num_nodes,
                "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}},
            },
        }
    )


def _pod(name: str = "w-0", template: str = "train-ch", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            "resourceClaims": [{"name": "ch", "resourceClaimTemplateName": template}],
            **spec,
        },
    }


def test_a_pod_of_a_domain_gets_the_label_and_the_clique_affinity() -> None:
    domain = _domain(num_nodes=0)
    mutation = mutate_pod(_pod(), "ml", [domain])
    assert mutation.domain == domain and mutation.cliques == ()
    pod = apply_patch(_pod(), mutation.patch)
    assert pod["metadata"]["labels"] == {WORKLOAD_LABEL: "uid-1"}
    assert pod["spec"]["affinity"] == {
        "podAffinity": {
            AFF: [
                {
                    "labelSelector": {"matchLabels": {WORKLOAD_LABEL: "uid-1"}},
                    "topologyKey": CLIQUE_LABEL,
                }
            ]
        }
    }
    # admitted again (a reinvocation): nothing more to add
    assert placement_patch(pod, "uid-1") == []


def test_pods_of_no_domain_and_other_namespaces_are_left_alone() -> None:
    domain = _domain()
    assert mutate_pod(_pod(template="other"), "ml", [domain]).patch == []
    assert mutate_pod(_pod(), "elsewhere", [domain]).patch == []
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert mutate_pod(plain, "ml", [domain]).domain is None


def test_a_named_channel_claim_finds_its_domain_by_its_config() -> None:
    domain = _domain(num_nodes=0)
    claim = {
        "spec": {
            "devices": {
                "config": [
                    {
                        "opaque": {
                            "driver": "compute-domain.nvidia.com",
                            "parameters": {
                                "apiVersion": API_VERSION,
                                "kind": "ComputeDomainChannelConfig",
                                "domainID": "uid-1",
                            },
                        }
                    }
                ]
            }
        }
    }
    assert channel_claim_domain(claim) == "uid-1"
    pod = _pod()
    pod["spec"]["resourceClaims"] = [{"name": "ch", "resourceClaimName": "mine"}]
    mutation = mutate_pod(pod, "ml", [domain], claim=lambda name: claim if name == "mine" else None)
    assert mutation.domain == domain
    assert mutate_pod(pod, "ml", [domain], claim=lambda _: {"spec": {}}).domain is None


def test_the_first_pod_starts_in_a_clique_with_room_for_num_nodes() -> None:
    """Row 10's shape: rack A (listed first) has one free node, rack B two. A scheduler that
    places the first worker anywhere with room could pick rack A, where the second has none."""
    nodes = [node(f"a{i}", RACK_A, f"10.0.0.{i}") for i in range(3)]
    nodes += [node(f"b{i}", RACK_B, f"10.0.1.{i}") for i in range(2)]
    busy = {
        f"a{i}": [{"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}]
        for i in range(2)
    }
    domain = _domain(num_nodes=2)
    mutation = mutate_pod(_pod(), "ml", [domain], nodes=lambda: nodes, pods_by_node=lambda: busy)
    assert mutation.cliques == (RACK_B,)
    pod = apply_patch(_pod(), mutation.patch)
    terms = pod["spec"]["affinity"]["nodeAffinity"][AFF]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": CLIQUE_LABEL, "operator": "In", "values": [RACK_B]}]}
    ]

    # once a pod of the domain runs, its clique decides: no node affinity any more
    placed = apply_patch(_pod("w-1"), mutation.patch)
    placed["spec"]["nodeName"] = "b0"
    later = mutate_pod(
        _pod("w-2"),
        "ml",
        [domain],
        siblings=lambda _: [placed],
        nodes=lambda: nodes,
        pods_by_node=lambda: busy,
    )
    assert later.cliques == () and "nodeAffinity" not in json.dumps(later.patch)

    # every clique qualifies, or none does: no restriction (the scheduler decides)
    assert mutate_pod(_pod(), "ml", [domain], nodes=lambda: nodes, pods_by_node=dict).cliques == ()
    full = {name: busy["a0"] for name in ("a0", "a1", "a2", "b0")}
    assert (
        mutate_pod(_pod(), "ml", [domain], nodes=lambda: nodes, pods_by_node=lambda: full).cliques
        == ()
    )


def test_the_pods_own_affinity_stays_and_is_and_ed_with_the_clique_rule() -> None:
    own_term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    pod = _pod(
        affinity={
            "podAffinity": {AFF: [own_term]},
            "nodeAffinity": {
                AFF: {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        },
                    ]
                }
            },
        }
    )
    pod["metadata"]["labels"] = {"team": "ml"}
    patched = apply_patch(pod, placement_patch(pod, "uid-1", (RACK_B,)))
    assert patched["metadata"]["labels"] == {"team": "ml", WORKLOAD_LABEL: "uid-1"}
    assert patched["spec"]["affinity"]["podAffinity"][AFF][0] == own_term
    assert len(patched["spec"]["affinity"]["podAffinity"][AFF]) == 2
    terms = patched["spec"]["affinity"]["nodeAffinity"][AFF]["nodeSelectorTerms"]
    clique = {"key": CLIQUE_LABEL, "operator": "In", "values": [RACK_B]}
    assert terms[0]["matchExpressions"][-1] == clique  # every OR-ed term gets the rule
    assert terms[1]["matchExpressions"] == [clique]
    assert terms[1]["matchFields"]  # untouched


def _review(pod: Obj, uid: str = "req-1") -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "object": pod,
        },
    }


def test_an_admission_review_gets_a_json_patch_answer() -> None:
    domain = _domain(num_nodes=0)
    answer = review(_review(_pod()), lambda pod, ns: mutate_pod(pod, ns, [domain]))
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview" and response["uid"] == "req-1"
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert apply_patch(_pod(), ops)["metadata"]["labels"] == {WORKLOAD_LABEL: "uid-1"}
    # a failing decision admits the pod unchanged, with a warning
    broken = review(_review(_pod()), lambda pod, ns: 1 / 0)  # type: ignore[arg-type,return-value]
    assert broken["response"]["allowed"] is True and "patch" not in broken["response"]
    assert "division by zero" in broken["response"]["warnings"][0]


@pytest.fixture
def certificate(tmp_path: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for the HTTPS test")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "tls.key"),
            "-out",
            str(tmp_path / "tls.crt"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return tmp_path


def _post(port: int, cafile: Path, body: bytes, path: str = PATH) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(cafile))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_the_webhook_serves_admission_reviews_over_https(certificate: Path) -> None:
    domain = _domain(num_nodes=0)
    server = AdmissionServer(
        ("127.0.0.1", 0),
        certificate / "tls.crt",
        certificate / "tls.key",
        lambda pod, ns: mutate_pod(pod, ns, [domain]),
    ).start()
    try:
        status, data = _post(
            server.port, certificate / "tls.crt", json.dumps(_review(_pod())).encode()
        )
        assert status == 200
        answer = json.loads(data)
        ops = json.loads(base64.b64decode(answer["response"]["patch"]))
        pod = apply_patch(_pod(), ops)
        assert pod["spec"]["affinity"]["podAffinity"][AFF][0]["topologyKey"] == CLIQUE_LABEL
        status, data = _post(server.port, certificate / "tls.crt", b"not json")
        assert status == 400
        status, _ = _post(server.port, certificate / "tls.crt", b"{}", path="/other")
        assert status == 404
        assert server.reviews == 1 and server.patched == 1
    finally:
        server.stop()


def test_the_webhook_reads_and_the_lease_use_clients_of_their_own() -> None:
    """A flood of reviews must not throttle the Lease renewal (issue 28: renewal latency
    reached 28.6 s through one shared rate limiter): each has its own client."""
    from kgpu.controller.process import Controller, ControllerOptions
    from kgpu.store import MemoryStore

    main, lease, hooks = MemoryStore(), MemoryStore(), MemoryStore()
    electors: list[object] = []

    def elector(store: object, *args: object, **kwargs: object) -> object:
        electors.append(store)

        class Elector:
            is_leader = False

        return Elector()

    ctl = Controller(
        main,
        ControllerOptions(namespace="kgpu-system", identity="a"),
        elector_factory=elector,  # type: ignore[arg-type]
        lease_store=lease,
        webhook_store=hooks,
    )
    assert electors == [lease]
    seen: list[str] = []
    original = hooks.get

    def get(*args: object, **kwargs: object) -> object:
        seen.append(str(args[2]))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    hooks.get = get  # type: ignore[method-assign]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "x", "resourceClaimName": "c1"}],
        },
    }
    ctl.admit(pod, "ml")  # type: ignore[arg-type]
    assert seen == ["c1"]  # the claim is read through the webhook's client
    main_get = main.get
    main.get = lambda *a, **k: (_ for _ in ()).throw(AssertionError("read on the main client"))  # type: ignore[method-assign]
    ctl.admit(pod, "ml")  # type: ignore[arg-type]
    main.get = main_get  # type: ignore[method-assign]
