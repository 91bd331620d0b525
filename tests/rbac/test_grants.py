"""RBAC evaluated as kube-apiserver does, and the session check built on it: a Role grants
only in its namespace, a RoleBinding to a ClusterRole only in the binding's, wildcards and
``*/status``, resourceNames, the default discovery URLs; a request no rule allows fails the
run naming it; grants nothing used are reported; a kgpu client naming no process fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.testing.apiserver.ledger import Tally, Use

from .grants import account_grants, covered, discovery_allows, workload_account
from .plugin import check

NS = "kgpu-system"
ME = {"kind": "ServiceAccount", "name": "kgpu-agent", "namespace": NS}
Obj = dict[str, Any]


def _role(kind: str, name: str, rules: list[Obj], namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name, "labels": {"app.kubernetes.io/component": "agent"}}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "rules": rules}


def _binding(kind: str, name: str, role_kind: str, role: str, subject: Obj, ns: str = "") -> Obj:
    meta: Obj = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def _rule(groups: list[str], resources: list[str], verbs: list[str], **extra: Any) -> Obj:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **extra}


OBJECTS: list[Obj] = [
    _role(
        "ClusterRole",
        "agent",
        [
            _rule([""], ["nodes"], ["list", "watch"]),
            _rule(["resource.nvidia.com"], ["*/status"], ["patch"]),
        ],
    ),
    _binding("ClusterRoleBinding", "agent", "ClusterRole", "agent", ME),
    _role(
        "Role",
        "agent",
        [
            _rule(["coordination.k8s.io"], ["leases"], ["get"], resourceNames=["kgpu-lock"]),
            _rule(["apps"], ["daemonsets"], ["*"]),
        ],
        NS,
    ),
    _binding("RoleBinding", "agent", "Role", "agent", ME, NS),
    _role("ClusterRole", "pod-reader", [_rule(["*"], ["pods"], ["get"])]),
    _binding("RoleBinding", "pods-in-ml", "ClusterRole", "pod-reader", ME, "ml"),
    _role("ClusterRole", "admin", [_rule(["*"], ["*"], ["*"])]),
    _binding(
        "ClusterRoleBinding",
        "someone-else",
        "ClusterRole",
        "admin",
        {"kind": "ServiceAccount", "name": "admin", "namespace": NS},
    ),
    _binding(
        "ClusterRoleBinding",
        "same-name-other-namespace",
        "ClusterRole",
        "admin",
        {"kind": "ServiceAccount", "name": "kgpu-agent", "namespace": "default"},
    ),
    {
        "kind": "DaemonSet",
        "metadata": {
            "name": "kgpu-agent",
            "namespace": NS,
            "labels": {"app.kubernetes.io/component": "agent"},
        },
        "spec": {"template": {"spec": {"serviceAccountName": "kgpu-agent"}}},
    },
]

A = "kgpu-agent"
CASES: list[tuple[Use, frozenset[str] | None, bool]] = [
    (Use(A, "list", "", "nodes"), frozenset({""}), True),
    (Use(A, "watch", "", "nodes"), frozenset({"tray-0"}), True),
    (Use(A, "patch", "", "nodes"), frozenset({"tray-0"}), False),
    (Use(A, "list", "", "nodes", "status"), frozenset({""}), False),
    (Use(A, "patch", "resource.nvidia.com", "computedomains", "status", "ml"), None, True),
    (Use(A, "patch", "resource.nvidia.com", "computedomains", "", "ml"), None, False),
    (Use(A, "patch", "apps", "daemonsets", "status", NS), None, False),
    (Use(A, "get", "coordination.k8s.io", "leases", "", NS), frozenset({"kgpu-lock"}), True),
    (Use(A, "get", "coordination.k8s.io", "leases", "", NS), frozenset({"other"}), False),
    (Use(A, "get", "coordination.k8s.io", "leases", "", NS), None, False),
    (Use(A, "get", "coordination.k8s.io", "leases", "", "ml"), frozenset({"kgpu-lock"}), False),
    (Use(A, "delete", "apps", "daemonsets", "", NS), None, True),
    (Use(A, "deletecollection", "apps", "daemonsets", "", NS), None, True),
    (Use(A, "delete", "apps", "daemonsets", "", "ml"), None, False),
    (Use(A, "list", "apps", "daemonsets"), None, False),  # all namespaces: a Role cannot
    (Use(A, "get", "", "pods", "", "ml"), None, True),
    (Use(A, "get", "metrics.k8s.io", "pods", "", "ml"), None, True),
    (Use(A, "get", "", "pods", "", NS), None, False),
    (Use(A, "get", "", "pods"), None, False),
    (Use(A, "delete", "", "secrets", "", NS), None, False),
]


@pytest.mark.parametrize(("use", "names", "allowed"), CASES, ids=lambda c: str(c))
def test_a_request_is_allowed_only_where_its_rules_are_bound(
    use: Use, names: frozenset[str] | None, allowed: bool
) -> None:
    account = workload_account(OBJECTS, "DaemonSet", "agent")
    assert account == (NS, "kgpu-agent")
    grants = account_grants(OBJECTS, *account)
    assert any(covered(g, use, names) for g in grants) is allowed


@pytest.mark.parametrize(
    ("verb", "url", "allowed"),
    [
        ("get", "/apis/resource.k8s.io", True),
        ("get", "/api/v1", True),
        ("get", "/version", True),
        ("get", "/openapi/v3", True),
        ("get", "/metrics", False),
        ("post", "/apis", False),
    ],
)
def test_discovery_urls_are_what_system_discovery_allows(
    verb: str, url: str, allowed: bool
) -> None:
    assert discovery_allows(Use(A, verb, url=url)) is allowed


def _tally(count: int = 1, test: str = "tests/x.py::test_y", path: str = "/p") -> Tally:
    return Tally(count, "kgpu-agent/0.1.0", path, test, frozenset({""}))


def _render(objects: list[Obj]) -> Any:
    seen: list[tuple[Path, ...]] = []

    def render(files: tuple[Path, ...]) -> list[Obj]:
        seen.append(files)
        return objects

    render.seen = seen  # type: ignore[attr-defined]
    return render


def test_everything_used_is_granted_and_the_rest_is_reported_unused() -> None:
    uses = {
        Use(A, "list", "", "nodes"): _tally(3),
        Use(A, "delete", "apps", "daemonsets", "", NS): _tally(),
        Use(A, "get", url="/apis/apps"): _tally(),
        Use("test-admin", "create", "", "secrets", "", NS): _tally(7),
    }
    out = check(uses, _render(OBJECTS))
    assert out.failures == []
    assert out.notes == [
        "checked 5 requests (3 distinct) by kgpu's processes (5 by the agent, 0 by the "
        "controller, 0 by the simulator import) against the chart's roles for 2 values sets "
        "(every-part, every-part-renamed); 7 requests by test code not checked; no request by "
        "the controller or the simulator import in this run"
    ]
    assert "agent: watch nodes (core) cluster-wide (every values set)" in out.unused
    assert "agent: list nodes (core) cluster-wide (every values set)" not in out.unused
    assert "agent: get pods (*) in namespace ml (every values set)" in out.unused


def test_a_request_no_rule_allows_fails_naming_the_rule_the_test_and_the_path() -> None:
    uses = {
        Use(A, "get", "coordination.k8s.io", "leases", "", "kube-system"): Tally(
            2, "kgpu-agent/0.1.0", "/apis/coordination.k8s.io/v1/...", "tests/a.py::test_b", None
        ),
        Use(A, "delete", "apps", "daemonsets", "", "default"): _tally(path="/apis/apps/v1/x"),
    }
    out = check(uses, _render(OBJECTS))
    assert len(out.failures) == 2
    first = out.failures[0]
    assert first.startswith(
        "NOT GRANTED  agent: delete daemonsets (apps) in namespace default is not allowed by "
        "the chart's roles to ServiceAccount kgpu-system/kgpu-agent ('every-part'), "
        "kgpu-system/kgpu-agent ('every-part-renamed'); granted only in namespace kgpu-system: "
        "1 request, first in tests/x.py::test_y"
    )
    assert "(kgpu-agent/0.1.0: delete /apis/apps/v1/x)" in first
    assert "get leases (coordination.k8s.io) in namespace kube-system" in out.failures[1]
    assert "2 requests, first in tests/a.py::test_b" in out.failures[1]


def test_a_kgpu_client_that_names_no_process_fails_the_run() -> None:
    uses = {
        Use("kgpu", "list", "", "nodes"): Tally(4, "kgpu/0.1.0", "/api/v1/nodes", "t::a"),
        Use("kgpu-tool", "get", url="/version"): Tally(1, "kgpu-tool/0.1.0", "/version", "t::b"),
    }
    render = _render(OBJECTS)
    out = check(uses, render)
    assert [f.split(",")[0] for f in out.failures] == [
        "UNATTRIBUTED  1 request by user agent 'kgpu-tool/0.1.0'",
        "UNATTRIBUTED  4 requests by user agent 'kgpu/0.1.0'",
    ]
    assert "list nodes (core) cluster-wide" in out.failures[1] and "in t::a" in out.failures[1]
    assert render.seen == []  # nothing a process asked: no helm render


def test_nothing_from_a_process_renders_nothing() -> None:
    render = _render(OBJECTS)
    out = check({Use("test-admin", "create", "", "nodes"): _tally(3)}, render)
    assert (out.failures, out.skipped) == ([], "")
    assert out.notes == [
        "no request by a kgpu process was recorded (3 by test code): nothing to check"
    ]
    assert render.seen == []


def test_without_helm_the_check_is_skipped_saying_why_and_fails_under_ci() -> None:
    uses = {Use(A, "list", "", "nodes"): _tally(2)}
    out = check(uses, None, "npm is not installed")
    assert out.failures == []
    assert out.skipped == (
        "helm is not available (npm is not installed): 2 requests (2 by the agent, 0 by the "
        "controller, 0 by the simulator import) not checked"
    )
    out = check(uses, None, "npm is not installed", ci=True)
    assert out.failures == [
        "helm is not available (npm is not installed) and CI=true: the chart's RBAC must be "
        "checked in CI"
    ]


def test_a_process_the_chart_does_not_deploy_fails() -> None:
    objects = [o for o in OBJECTS if o["kind"] != "DaemonSet"]
    out = check({Use(A, "list", "", "nodes"): _tally()}, _render(objects))
    assert out.failures[0] == (
        "NO WORKLOAD  the chart renders no DaemonSet for the agent with values 'every-part', "
        "yet it made 1 request"
    )


def test_the_simulator_import_is_held_to_the_read_only_cluster_role() -> None:
    """``kgpu sim --from-cluster`` runs as a person, not a workload: its requests are held to
    the ClusterRole labelled ``from-cluster`` itself, granted cluster-wide."""
    role = _role("ClusterRole", "from-cluster", [_rule([""], ["nodes", "pods"], ["list"])])
    role["metadata"]["labels"]["app.kubernetes.io/component"] = "from-cluster"
    sim = "kgpu-sim"

    def tally() -> Tally:
        return Tally(1, "kgpu-sim/0.1.0", "/api/v1/pods", "tests/x.py::test_y", frozenset({""}))

    uses = {
        Use(sim, "list", "", "nodes"): tally(),
        Use(sim, "list", "", "pods", "", "ml"): tally(),
        Use(sim, "get", "", "pods", "", "ml"): tally(),
    }
    out = check(uses, _render([*OBJECTS, role]))
    assert len(out.failures) == 1
    assert out.failures[0].startswith(
        "NOT GRANTED  simulator import: get pods (core) in namespace ml is not allowed"
    )
    missing = check({Use(sim, "list", "", "nodes"): tally()}, _render(OBJECTS))
    assert missing.failures[0].startswith("NO WORKLOAD  the chart renders no ClusterRole")
