"""The chart's controller parts: its roles grant what docs/cluster.md says each process uses
(that table is itself checked against recorded requests in tests/cluster/test_rbac.py), and
the admission webhook is reachable the way the API server calls it (Service -> the controller's
webhook port, a certificate for the Service's DNS name signed by the caBundle it is given)."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from rbac.documented import documented

from .conftest import NAMESPACE, VALUES_SETS, Rendered

Render = Callable[[str, str], Rendered]


def test_roles_grant_what_the_controller_is_documented_to_use(render: Render) -> None:
    # the agent's roles, whose rules depend on the values, are test_chart_agent_rbac.py's
    missing = documented("controller") - render("1.34", "default").rules("controller")
    assert not missing, f"the chart does not grant the controller {sorted(missing)}"


def test_the_controller_is_granted_nothing_it_does_not_use(render: Render) -> None:
    extra = render("1.34", "default").rules("controller") - documented("controller")
    assert not extra, f"the controller's roles grant unused {sorted(extra)}"


@pytest.mark.parametrize("values", VALUES_SETS)
def test_the_webhook_reaches_the_controller_over_tls_it_can_verify(
    render: Render, values: str, tmp_path: Path
) -> None:
    rendered = render("1.34", values)
    (config,) = rendered.of_kind("MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    service_ref = hook["clientConfig"]["service"]
    assert service_ref["path"] == "/mutate-pods" and service_ref["namespace"] == NAMESPACE
    assert hook["rules"][0]["resources"] == ["pods"] and hook["rules"][0]["operations"] == [
        "CREATE"
    ]
    services = {s["metadata"]["name"]: s for s in rendered.of_kind("Service")}
    svc = services[service_ref["name"]]
    dep = rendered.one("Deployment", "controller")
    pod = dep["spec"]["template"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (ctl,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in ctl["ports"]}
    (port,) = [p for p in svc["spec"]["ports"] if p["port"] == service_ref["port"]]
    assert f"--webhook-address=:{ports[port['targetPort']]}" in ctl["args"]
    assert ctl["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # the certificate the controller mounts is for the Service's name, under the caBundle
    (mount,) = [m for m in ctl["volumeMounts"] if m["mountPath"] == "/etc/kgpu/webhook"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    secrets = {s["metadata"]["name"]: s for s in rendered.of_kind("Secret")}
    data = secrets[volume["secret"]["secretName"]]["data"]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == base64.b64decode(data["ca.crt"])
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: the certificate chain is not verified")
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(data["ca.crt"]))
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(data["tls.crt"]))
    host = f"{svc['metadata']['name']}.{NAMESPACE}.svc"
    done = subprocess.run(
        [
            "openssl",
            "verify",
            "-CAfile",
            str(tmp_path / "ca.crt"),
            "-verify_hostname",
            host,
            str(tmp_path / "tls.crt"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_device_classes_the_chart_does_not_install_are_not_kept_by_the_controller(
    render: Render,
) -> None:
    args = render("1.34", "everything-else").one("Deployment", "controller")["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert "--device-classes=compute-domains" in args  # resources.gpus.enabled: false
    default = render("1.34", "default").one("Deployment", "controller")["spec"]["template"]
    assert "--device-classes=gpus,compute-domains" in default["spec"]["containers"][0]["args"]
