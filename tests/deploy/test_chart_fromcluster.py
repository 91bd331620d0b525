"""The chart's optional read-only ClusterRole for ``kgpu sim --from-cluster`` and
``kgpu explain pod`` (``fromCluster.rbac``): off by default; on, it grants ``list`` and nothing
else, on exactly what the import reads (docs/simulator.md), and binds the subjects given. That
the import's requests need no more is proven by the session's RBAC check (tests/rbac)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kgpu.cluster.snapshot import READS

from .conftest import helm_template

SUBJECT = {"kind": "Group", "name": "gpu-admins", "apiGroup": "rbac.authorization.k8s.io"}


def _render(helm: str, tmp_path: Path, values: dict[str, object]) -> list[dict[str, object]]:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values))
    done = helm_template(helm, "1.34", "-f", str(file))
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _mine(objects: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "from-cluster"  # type: ignore[index]
    ]


def test_off_by_default(helm: str, tmp_path: Path) -> None:
    objects = _render(helm, tmp_path, {})
    assert _mine(objects, "ClusterRole") == [] and _mine(objects, "ClusterRoleBinding") == []


def test_list_only_on_what_the_import_reads_bound_to_the_subjects(
    helm: str, tmp_path: Path
) -> None:
    on = {"fromCluster": {"rbac": {"create": True, "subjects": [SUBJECT]}}}
    objects = _render(helm, tmp_path, on)
    (role,) = _mine(objects, "ClusterRole")
    granted = {
        (group, resource)
        for rule in role["rules"]  # type: ignore[attr-defined]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"list"}  # type: ignore[attr-defined]
    plurals = {
        "Node": "nodes",
        "Pod": "pods",
        "ConfigMap": "configmaps",
        "PriorityClass": "priorityclasses",
        "DeviceClass": "deviceclasses",
        "ResourceSlice": "resourceslices",
        "ResourceClaim": "resourceclaims",
        "ResourceClaimTemplate": "resourceclaimtemplates",
        "ComputeDomain": "computedomains",
        "ScaledObject": "scaledobjects",
        "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    }
    read = {
        (api.rsplit("/", 1)[0] if "/" in api else "", plurals[kind]) for _, api, kind, _, _ in READS
    }
    assert granted == read
    (binding,) = _mine(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [SUBJECT]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]  # type: ignore[index]
    # no subjects: the role alone, for the cluster's admins to bind
    alone = _render(helm, tmp_path, {"fromCluster": {"rbac": {"create": True}}})
    assert len(_mine(alone, "ClusterRole")) == 1 and _mine(alone, "ClusterRoleBinding") == []
