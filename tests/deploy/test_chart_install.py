"""``helm install`` against a cluster, as a new user runs it: the real ``helm`` (``install
--dry-run=server``) talks to the API-server stand-in, so ``.Capabilities`` come from discovery
the way they do on a real cluster, and helm maps every rendered object to a resource the
cluster serves (the step that fails with "no matches for kind" when the chart renders an API
the cluster lacks).

What a user would notice: with the chart's defaults the install succeeds on every supported
release whether the cluster serves DRA or not; DeviceClasses come in the newest
``resource.k8s.io`` version the cluster serves; without DRA the agent runs the device-plugin
side only and NOTES.txt says so; a GPU Operator values file installs and NOTES.txt lists the
Operator keys kgpu ignores; the IMEX daemon image is the controller's flag.

The stand-in is told the chart's kinds (read from ``helm template``), so a kind added to the
chart later needs nothing here; only ``resource.k8s.io`` is served or not per case.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig
from kgpu.testing.apiserver.kinds import DRA_GROUP, RELEASES, Kind

from .conftest import CHART, KUBE_VERSIONS, NAMESPACE, RELEASE, Obj, helm_template

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DeviceClass",
    "Namespace",
    "PriorityClass",
}
DRA_KINDS = (
    Kind(DRA_GROUP, ("v1",), "DeviceClass", "deviceclasses", False, False),
    Kind(DRA_GROUP, ("v1",), "ResourceClaimTemplate", "resourceclaimtemplates", True, False),
)
#: the releases both the chart and the stand-in know
RELEASES_HERE = tuple(v for v in KUBE_VERSIONS if v in RELEASES)
OPERATOR_VALUES = """\
operator: {defaultRuntime: containerd}
driver: {enabled: false}
toolkit: {enabled: true, version: v1.17.0}
daemonsets: {tolerations: []}
nfd: {enabled: true}
migManager:
  enabled: true
  env: [{name: WITH_REBOOT, value: "false"}]
  config: {name: custom-mig-config, default: all-disabled}
devicePlugin:
  version: v0.17.0
  config: {name: time-slicing-config, default: any}
mig: {strategy: mixed}
dcgmExporter: {enabled: true, version: 4.1.1-4.0.4-ubuntu22.04}
validator: {plugin: {env: []}}
"""


@cache
def _chart_kinds(helm: str, version: str) -> tuple[Kind, ...]:
    """Every kind the chart renders (with its ServiceMonitor and dashboard on) outside
    resource.k8s.io, as the stand-in declares kinds."""
    done = helm_template(
        helm,
        version,
        "--set",
        "dcgmExporter.serviceMonitor.enabled=true,dcgmExporter.dashboard.enabled=true",
    )
    assert done.returncode == 0, done.stderr
    kinds: dict[tuple[str, str], Kind] = {}
    for obj in (o for o in yaml.safe_load_all(done.stdout) if o):
        group, _, ver = str(obj["apiVersion"]).rpartition("/")
        if group == DRA_GROUP:
            continue
        kind = str(obj["kind"])
        kinds[(group, kind)] = Kind(
            group, (ver,), kind, kind.lower() + "s", kind not in CLUSTER_SCOPED, False
        )
    return tuple(kinds.values())


def install(
    helm: str, tmp: Path, version: str, *, dra: bool, args: tuple[str, ...] = ()
) -> tuple[int, list[Obj], str, str]:
    """``helm install --dry-run=server`` on a stand-in of ``version`` serving DRA or not:
    (exit code, the objects it would create, NOTES, stderr)."""
    kinds = _chart_kinds(helm, version) + (DRA_KINDS if dra else ())
    server = FakeApiServer(release=version, kinds=kinds, validate=False).start()
    try:
        kubeconfig = write_kubeconfig(tmp / f"kubeconfig-{version}-{dra}", server.url)
        done = subprocess.run(
            [
                helm,
                "install",
                RELEASE,
                str(CHART),
                "--namespace",
                NAMESPACE,
                "--dry-run=server",
                # the stand-in serves no OpenAPI document; test_chart.py validates every
                # object against the official schemas instead
                "--disable-openapi-validation",
                "--kubeconfig",
                str(kubeconfig),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    manifest, _, notes = done.stdout.partition("\nNOTES:\n")
    _, _, manifest = manifest.partition("\nMANIFEST:\n")
    objects = [o for o in yaml.safe_load_all(manifest) if o]
    return done.returncode, objects, notes, done.stderr


def _one(objects: list[Obj], kind: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _args(objects: list[Obj], kind: str) -> list[str]:
    spec: dict[str, Any] = _one(objects, kind)["spec"]["template"]["spec"]
    return list(spec["containers"][0]["args"])


@pytest.mark.parametrize("version", RELEASES_HERE)
def test_defaults_install_with_dra_in_the_newest_version_served(
    helm: str, tmp_path: Path, version: str
) -> None:
    code, objects, notes, err = install(helm, tmp_path, version, dra=True)
    assert code == 0, err
    classes = [o for o in objects if o["kind"] == "DeviceClass"]
    assert len(classes) == 4
    assert {c["apiVersion"] for c in classes} == {f"{DRA_GROUP}/{RELEASES[version][0]}"}
    assert "--dra" in _args(objects, "DaemonSet")
    assert "--device-classes=gpus,compute-domains" in _args(objects, "Deployment")
    assert "DRA is off" not in notes
    assert "kubectl get resourceslices" in notes


@pytest.mark.parametrize("version", [v for v in RELEASES_HERE if v in ("1.32", "1.33")])
def test_defaults_install_without_dra_as_a_device_plugin(
    helm: str, tmp_path: Path, version: str
) -> None:
    """1.32 and 1.33 serve no resource.k8s.io unless an admin turns DRA on: the chart must
    still install, without DRA objects, and say so."""
    code, objects, notes, err = install(helm, tmp_path, version, dra=False)
    assert code == 0, err
    assert not [o for o in objects if str(o["apiVersion"]).startswith(DRA_GROUP)]
    assert "--no-dra" in _args(objects, "DaemonSet")
    assert "--device-classes=" in _args(objects, "Deployment")
    assert "DRA is off" in notes and "device-plugin side only" in notes
    assert "kubectl get resourceslices" not in notes


def test_a_gpu_operator_values_file_installs_and_notes_list_what_is_ignored(
    helm: str, tmp_path: Path
) -> None:
    values = tmp_path / "gpu-operator-values.yaml"
    values.write_text(OPERATOR_VALUES)
    code, objects, notes, err = install(
        helm, tmp_path, RELEASES_HERE[-1], dra=True, args=("-f", str(values))
    )
    assert code == 0, err
    (line,) = [n for n in notes.splitlines() if n.startswith("GPU Operator values kgpu")]
    listed = line.partition(": ")[2].split(", ")
    assert sorted(listed) == sorted(
        [
            "operator",
            "driver",
            "toolkit",
            "daemonsets",
            "validator",
            "nfd.enabled",
            "migManager.env",
            "devicePlugin.version",
            "dcgmExporter.version",
        ]
    )
    # what kgpu does use from the same file still reaches the agent
    args = _args(objects, "DaemonSet")
    assert "--mig-manager" in args and "--config=/etc/kgpu/mig-parted" in args


def test_every_ignored_key_in_the_schema_is_listed_in_notes(helm: str, tmp_path: Path) -> None:
    """values.schema.json lets the Operator's keys through; NOTES.txt must name each one a user
    sets, so the schema and the chart's list cannot drift apart."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    ignored: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for key, sub in node.get("properties", {}).items():
            dotted = f"{path}.{key}" if path else key
            if sub.get("description", "").startswith("GPU Operator value, ignored by kgpu"):
                ignored.append(dotted)
            elif isinstance(sub, dict):
                walk(sub, dotted)

    walk(schema, "")
    assert {"driver", "toolkit", "daemonsets", "nfd.enabled", "migManager.env"} <= set(ignored)
    values: dict[str, Any] = {}
    for dotted in ignored:
        *parents, leaf = dotted.split(".")
        node = values
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = "x"
    path = tmp_path / "everything-ignored.yaml"
    path.write_text(yaml.safe_dump(values))
    code, _, notes, err = install(
        helm, tmp_path, RELEASES_HERE[-1], dra=True, args=("-f", str(path))
    )
    assert code == 0, err
    (line,) = [n for n in notes.splitlines() if n.startswith("GPU Operator values kgpu")]
    assert sorted(line.partition(": ")[2].split(", ")) == sorted(ignored)


def test_the_imex_daemon_image_is_a_value_and_the_controllers_flag(helm: str) -> None:
    image = "registry.example.com/nvidia/k8s-dra-driver-gpu@sha256:" + "a" * 64
    done = helm_template(helm, RELEASES_HERE[-1], "--set", f"controller.imexDaemonImage={image}")
    assert done.returncode == 0, done.stderr
    deployment = next(o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "Deployment")
    assert (
        f"--imex-daemon-image={image}"
        in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    refused = helm_template(helm, RELEASES_HERE[-1], "--set", "controller.imexDaemonImage=")
    assert refused.returncode != 0 and "imexDaemonImage" in refused.stderr


def test_the_image_is_referenced_by_digest_once_published(helm: str) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    done = helm_template(
        helm,
        RELEASES_HERE[-1],
        "--set",
        f"image.repository=registry.example.com/kgpu,image.digest={digest}",
    )
    assert done.returncode == 0, done.stderr
    images = {
        c["image"]
        for o in yaml.safe_load_all(done.stdout)
        if o and o["kind"] in ("DaemonSet", "Deployment")
        for c in o["spec"]["template"]["spec"].get("initContainers", [])
        + o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"registry.example.com/kgpu@{digest}"}
    refused = helm_template(helm, RELEASES_HERE[-1], "--set", "image.digest=latest")
    assert refused.returncode != 0 and "digest" in refused.stderr
