"""The Helm chart ``deploy/helm/kgpu``: linted by the real ``helm``, rendered for every supported
Kubernetes version with default and non-default values, every object checked against that
version's official schema (``kubernetes-validate --strict``), and what a user would notice
asserted on the rendered objects: the agent reaches every host path it needs at the path it
writes into containers, probes hit the port the agent serves, the Service and ServiceMonitor
select the agent, each process runs under its own ServiceAccount, the GPU Operator-named values
reach the agent as the GPU Operator's would, and bad values are refused with the field's path.

ServiceMonitor is a prometheus-operator CRD kind, not in the official schemas: it is skipped by
kubernetes-validate (reason below) and checked here for what makes it work (it selects the
metrics Service's port by name).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu import releases
from kgpu.computedomain.crd import crds
from kgpu.config import load_config_strings
from kgpu.dra.classes import device_classes

from .conftest import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    OUTSIDE_VERSIONS,
    REPO,
    VALUES_DIR,
    VALUES_SETS,
    Obj,
    Rendered,
    helm_template,
    values_args,
)

Render = Callable[[str, str], Rendered]

#: Kinds no official schema describes, and why they are not validated by kubernetes-validate.
CRD_KINDS = {
    "ServiceMonitor": "monitoring.coreos.com/v1 is prometheus-operator's CRD; no registry "
    "package ships its schema in a form kubernetes-validate reads (test_service_monitor checks "
    "its selector and port instead)",
}

#: resource.k8s.io version each supported Kubernetes version serves by default.
RESOURCE_API = {
    f"1.{m}": f"resource.k8s.io/{releases.release(m).resource_default[0]}"
    for m in releases.SUPPORTED
}

#: Host paths the agent must see (issue 13), mounted at the same path inside the container
#: because the agent writes them into sockets, CDI specs and containers' mounts.
AGENT_HOST_PATHS = {
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/plugins_registry",
    "/var/lib/kubelet/plugins",
    "/var/lib/kubelet/pod-resources",
    "/var/run/cdi",
}

MATRIX = [(v, s) for v in KUBE_VERSIONS for s in VALUES_SETS]


def load_values(values: str) -> dict[str, Any]:
    data = yaml.safe_load((CHART / "values.yaml").read_text())
    if values != "default":
        _merge(data, yaml.safe_load((VALUES_DIR / f"{values}.yaml").read_text()))
    return dict(data)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def container(pod_owner: Obj, name: str) -> Obj:
    (found,) = [c for c in pod_owner["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return dict(found)


def flag(args: list[str], name: str) -> str | None:
    for arg in args:
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


# -- helm itself ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUES_SETS)
def test_helm_lint_strict(helm: str, version: str, values: str) -> None:
    done = subprocess.run(
        [
            helm,
            "lint",
            "--strict",
            str(CHART),
            "--kube-version",
            f"{version}.0",
            *values_args(values),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(("version", "values"), MATRIX)
def test_every_rendered_object_validates_for_its_kubernetes_version(
    render: Render, version: str, values: str
) -> None:
    rendered = render(version, values)
    kinds = {o["kind"] for o in rendered.objects}
    assert {"DaemonSet", "ServiceAccount", "ClusterRole", "ConfigMap", "DeviceClass"} <= kinds
    assert "CustomResourceDefinition" in kinds  # crds/ rendered with --include-crds
    problems = []
    for obj in rendered.objects:
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, f"{version}.0", strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{obj['kind']} {obj['apiVersion']}: not served by {version}")
    assert not problems, "\n".join(problems)


def test_kubernetes_validate_has_every_supported_version() -> None:
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}},
            f"{version}.0",
            strict=True,
        )


def test_a_v1_device_class_is_refused_by_the_1_32_schema() -> None:
    """Why 1.32 needs another version: the same DeviceClass under v1 is not served there."""
    (cls, *_) = device_classes()
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(cls, "1.32.0", strict=True)


@pytest.mark.parametrize("version", OUTSIDE_VERSIONS)
def test_releases_outside_the_window_are_refused_with_helms_reason(
    helm: str, version: str
) -> None:
    """1.32 and 1.33 are past upstream support: the chart's kubeVersion refuses them (kgpu
    still models them in ``kgpu sim``; the agent meeting one logs it and acts as 1.34)."""
    done = helm_template(helm, version)
    assert done.returncode != 0
    assert ">=1.34.0-0" in done.stderr and f"v{version}.0" in done.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("devicePlugin.confg.name=x", "at '/devicePlugin': additional properties 'confg'"),
        ("mig.strategy=bogus", "at '/mig/strategy': value must be one of"),
        ("controller.replicas=two", "at '/controller/replicas'"),
        ("nvidiaDriverRoot=run/nvidia/driver", "at '/nvidiaDriverRoot'"),
        ("dcgmExporter.hostnameLabel=node", "at '/dcgmExporter/hostnameLabel'"),
    ],
)
def test_bad_values_are_refused_naming_the_field(helm: str, setting: str, message: str) -> None:
    done = helm_template(helm, "1.34", "--set", setting)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


# -- DeviceClasses and the CRD: one source ------------------------------------------------------


@pytest.mark.parametrize(("version", "values"), MATRIX)
def test_device_classes_follow_the_cluster_version_and_kgpu_dra_classes(
    render: Render, version: str, values: str
) -> None:
    settings = load_values(values)
    rendered = render(version, values)
    expected_api = settings["deviceClasses"]["apiVersion"] or RESOURCE_API[version]
    got = rendered.of_kind("DeviceClass")
    assert {c["apiVersion"] for c in got} == {expected_api}
    wanted = device_classes(
        gpus=settings["resources"]["gpus"]["enabled"],
        compute_domains=settings["resources"]["computeDomains"]["enabled"],
        api_version=expected_api,  # extendedResourceName on resource.k8s.io/v1 only
    )
    normalised = sorted(
        ({**c, "metadata": {"name": c["metadata"]["name"]}} for c in got),
        key=lambda c: c["metadata"]["name"],
    )
    assert normalised == sorted(wanted, key=lambda c: c["metadata"]["name"])


def test_device_class_version_can_be_forced(helm: str) -> None:
    """deviceClasses.apiVersion: for a cluster that serves another version than its default."""
    done = helm_template(helm, "1.34", "--set", "deviceClasses.apiVersion=resource.k8s.io/v1beta2")
    assert done.returncode == 0, done.stderr
    apis = {
        d["apiVersion"] for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "DeviceClass"
    }
    assert apis == {"resource.k8s.io/v1beta2"}


def test_chart_data_is_generated_from_kgpu() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-chart-data.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_rendered_crds_are_kgpus(render: Render) -> None:
    rendered = render("1.34", "default").of_kind("CustomResourceDefinition")
    by_name = {c["metadata"]["name"]: c for c in rendered}
    assert by_name == {c["metadata"]["name"]: c for c in crds()}


# -- the agent DaemonSet -------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_SETS)
def test_agent_reaches_every_host_path_at_the_path_it_writes(render: Render, values: str) -> None:
    settings = load_values(values)
    ds = render("1.34", values).one("DaemonSet", "agent")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    agent = container(ds, "agent")
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    for m in agent["volumeMounts"]:
        assert m["name"] in volumes, f"mount {m['mountPath']}: no volume {m['name']}"
    host_mounts = {
        volumes[m["name"]]["hostPath"]["path"]: path
        for path, m in mounts.items()
        if "hostPath" in volumes[m["name"]]
    }
    wanted = AGENT_HOST_PATHS | {settings["mps"]["root"]}
    if settings["gfd"]["enabled"]:
        wanted.add(settings["nfd"]["featuresDir"])
    for path in wanted:
        assert host_mounts.get(path) == path, f"host {path} not mounted at the same path"
    # the driver root, wherever it is on the host, is /driver-root inside (read-only)
    assert host_mounts[settings["nvidiaDriverRoot"]] == "/driver-root"
    assert mounts["/driver-root"]["readOnly"] is True
    env = {e["name"]: e for e in agent["env"]}
    assert env["NVIDIA_DRIVER_ROOT"]["value"] == settings["nvidiaDriverRoot"]
    assert env["MPS_ROOT"]["value"] == settings["mps"]["root"]


@pytest.mark.parametrize("values", VALUES_SETS)
def test_agent_pod_runs_where_gpus_are(render: Render, values: str) -> None:
    settings = load_values(values)
    ds = render("1.35", values).one("DaemonSet", "agent")
    pod = ds["spec"]["template"]["spec"]
    agent = container(ds, "agent")
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod.get("priorityClassName", "") == settings["agent"]["priorityClassName"]
    if settings["agent"]["affinity"]:
        assert pod["affinity"] == settings["agent"]["affinity"]
    else:
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        keys = {e["key"] for t in terms for e in t["matchExpressions"]}
        assert keys == {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}
        assert len(terms) == 2  # separate terms: either label is enough
    # root and privileged: device nodes, kubelet sockets, MPS daemons; NVML sees host PIDs
    assert agent["securityContext"]["runAsUser"] == 0
    assert agent["securityContext"]["privileged"] is True
    assert pod["hostPID"] is True


def test_default_agent_is_system_node_critical(render: Render) -> None:
    pod = render("1.34", "default").one("DaemonSet", "agent")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"


@pytest.mark.parametrize("values", VALUES_SETS)
def test_probes_hit_the_port_the_agent_serves_health_on(render: Render, values: str) -> None:
    ds = render("1.34", values).one("DaemonSet", "agent")
    agent = container(ds, "agent")
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    health = flag(agent["args"], "--health-address")
    assert health is not None and health.startswith(":")
    for probe in ("startupProbe", "livenessProbe"):
        http = agent[probe]["httpGet"]
        assert http["path"] == "/healthz"
        assert ports[http["port"]] == int(health[1:])
    assert agent["startupProbe"]["failureThreshold"] * agent["startupProbe"]["periodSeconds"] >= 60


@pytest.mark.parametrize("values", VALUES_SETS)
def test_gpu_operator_named_values_reach_the_agent(render: Render, values: str) -> None:
    """The settings ConfigMap is GPU Operator Helm values; kgpu's own loader reads it."""
    settings = load_values(values)
    rendered = render("1.34", values)
    agent = container(rendered.one("DaemonSet", "agent"), "agent")
    (cm,) = [
        c for c in rendered.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-settings")
    ]
    assert "--config=/etc/kgpu/settings/values.yaml" in agent["args"]
    configs = load_config_strings({"values.yaml": cm["data"]["values.yaml"]})
    assert configs.mig_strategy == settings["mig"]["strategy"]
    assert configs.default_plugin_config == (settings["devicePlugin"]["config"]["default"] or None)
    assert configs.default_mig_config == (settings["migManager"]["config"]["default"] or None)
    dp, mig = settings["devicePlugin"]["config"], settings["migManager"]["config"]
    if dp["create"]:
        assert set(configs.plugin_configs) == set(dp["data"])
    if mig["create"]:
        assert configs.default_mig_config in configs.mig_configs
    # an existing ConfigMap is mounted and handed to the agent as a directory of configs
    for key, path in (
        ("devicePlugin", "/etc/kgpu/device-plugin"),
        ("migManager", "/etc/kgpu/mig-parted"),
    ):
        conf = settings[key]["config"]
        mounted = bool(conf["name"]) and not conf["create"]
        assert (f"--config={path}" in agent["args"]) == mounted
        assert any(m["mountPath"] == path for m in agent["volumeMounts"]) == mounted


@pytest.mark.parametrize("values", VALUES_SETS)
def test_agent_flags_follow_the_switches(render: Render, values: str) -> None:
    settings = load_values(values)
    agent = container(render("1.34", values).one("DaemonSet", "agent"), "agent")
    args = agent["args"]
    assert args[:2] == ["agent", "--in-cluster"]
    assert ("--dra" in args, "--no-dra" in args) == (
        settings["dra"]["enabled"],
        not settings["dra"]["enabled"],
    )
    assert ("--no-device-plugin" in args) == (not settings["devicePlugin"]["enabled"])
    nfd = flag(args, "--nfd-features-dir")
    assert nfd == (settings["nfd"]["featuresDir"] if settings["gfd"]["enabled"] else None)
    exporter = settings["dcgmExporter"]
    assert flag(args, "--metrics-address") == f":{exporter['service']['port']}"
    assert flag(args, "--hostname-label") == exporter["hostnameLabel"]
    assert flag(args, "--log-level") == settings["agent"]["logLevel"]
    assert args[-len(settings["agent"]["extraArgs"]) or len(args) :] == (
        settings["agent"]["extraArgs"] or []
    )
    env = {e["name"]: e.get("value") for e in agent["env"]}
    if exporter["config"]["name"]:
        mount = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/etc/dcgm-exporter")
        assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
        assert mount["readOnly"] is True
    else:
        assert "DCGM_EXPORTER_COLLECTORS" not in env


def test_init_container_links_the_driver_before_the_agent_starts(render: Render) -> None:
    pod = render("1.34", "default").one("DaemonSet", "agent")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][0] == "kgpu-link-driver"
    shared = {m["name"] for m in init["volumeMounts"]} & {
        m["name"] for m in container({"spec": {"template": {"spec": pod}}}, "agent")["volumeMounts"]
    }
    assert shared == {"driver-root", "driver-links"}


# -- metrics: Service, ServiceMonitor, dashboard ------------------------------------------------


@pytest.mark.parametrize("values", VALUES_SETS)
def test_metrics_service_selects_the_agents_metrics_port(render: Render, values: str) -> None:
    rendered = render("1.34", values)
    ds = rendered.one("DaemonSet", "agent")
    svc = rendered.one("Service", "agent")
    (port,) = svc["spec"]["ports"]
    assert port["name"] == "metrics"
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    agent_ports = {p["name"]: p["containerPort"] for p in container(ds, "agent")["ports"]}
    assert agent_ports[port["targetPort"]] == port["port"]
    assert port["port"] == load_values(values)["dcgmExporter"]["service"]["port"]


@pytest.mark.parametrize("values", VALUES_SETS)
def test_service_monitor(render: Render, values: str) -> None:
    settings = load_values(values)["dcgmExporter"]["serviceMonitor"]
    rendered = render("1.34", values)
    monitors = rendered.of_kind("ServiceMonitor")
    assert len(monitors) == int(settings["enabled"])
    if not monitors:
        return
    (sm,) = monitors
    svc = rendered.one("Service", "agent")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["interval"] == settings["interval"]
    assert endpoint.get("relabelings", []) == settings["relabelings"]
    assert settings["additionalLabels"].items() <= sm["metadata"]["labels"].items()


@pytest.mark.parametrize("values", VALUES_SETS)
def test_dashboard_config_map_uses_the_agents_node_label(render: Render, values: str) -> None:
    settings = load_values(values)["dcgmExporter"]
    maps = [
        c for c in render("1.34", values).of_kind("ConfigMap") if "kgpu-dashboard.json" in c["data"]
    ]
    assert len(maps) == int(settings["dashboard"]["enabled"])
    if not maps:
        return
    (cm,) = maps
    assert settings["dashboard"]["labels"].items() <= cm["metadata"]["labels"].items()
    text = cm["data"]["kgpu-dashboard.json"]
    dashboard = json.loads(text)
    assert dashboard["uid"] == "kgpu-gpus"
    other = "hostname" if settings["hostnameLabel"] == "Hostname" else "Hostname"
    assert f"{settings['hostnameLabel']}=~" in text and f"{other}=~" not in text


# -- the controller and RBAC ---------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_SETS)
def test_controller_deployment(render: Render, values: str) -> None:
    settings = load_values(values)["controller"]
    dep = render("1.34", values).one("Deployment", "controller")
    assert dep["spec"]["replicas"] == settings["replicas"]
    pod = dep["spec"]["template"]["spec"]
    ctl = container(dep, "controller")
    assert ctl["args"][:2] == ["controller", "--in-cluster"]
    assert flag(ctl["args"], "--namespace") == NAMESPACE
    ports = {p["name"]: p["containerPort"] for p in ctl["ports"]}
    assert ctl["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert f":{ports[ctl['livenessProbe']['httpGet']['port']]}" == flag(
        ctl["args"], "--health-address"
    )
    # non-root, read-only, no capabilities: nothing of the node is needed
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert ctl["securityContext"]["readOnlyRootFilesystem"] is True
    assert ctl["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    spread = (pod.get("affinity") or {}).get("podAntiAffinity")
    assert (spread is not None) == (settings["replicas"] > 1)


def _bound_service_accounts(
    rendered: Rendered, role_kind: str, binding_kind: str
) -> dict[str, set[str]]:
    """role name -> service accounts its bindings grant it to."""
    roles = {r["metadata"]["name"] for r in rendered.of_kind(role_kind)}
    out: dict[str, set[str]] = {}
    for b in rendered.of_kind(binding_kind):
        assert b["roleRef"]["kind"] == role_kind
        assert b["roleRef"]["name"] in roles, f"{binding_kind} {b['metadata']['name']}: no role"
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["namespace"] == NAMESPACE
            out.setdefault(b["roleRef"]["name"], set()).add(s["name"])
    return out


@pytest.mark.parametrize("values", VALUES_SETS)
def test_each_process_has_its_own_service_account_and_roles(render: Render, values: str) -> None:
    """One ServiceAccount, ClusterRole and (namespaced) Role per process, labelled with its
    component; the pod runs as that account and no other process is bound to its roles."""
    rendered = render("1.34", values)
    accounts = {
        "agent": rendered.one("DaemonSet", "agent")["spec"]["template"]["spec"],
        "controller": rendered.one("Deployment", "controller")["spec"]["template"]["spec"],
    }
    service_account = {k: v["serviceAccountName"] for k, v in accounts.items()}
    assert len(set(service_account.values())) == 2
    created = {sa["metadata"]["name"] for sa in rendered.of_kind("ServiceAccount")}
    settings = load_values(values)
    for component, name in service_account.items():
        assert (name in created) == settings[component]["serviceAccount"]["create"]
    grants = _bound_service_accounts(rendered, "ClusterRole", "ClusterRoleBinding")
    grants |= _bound_service_accounts(rendered, "Role", "RoleBinding")
    for role in rendered.of_kind("ClusterRole") + rendered.of_kind("Role"):
        component = role["metadata"]["labels"]["app.kubernetes.io/component"]
        assert grants[role["metadata"]["name"]] == {service_account[component]}


@pytest.mark.parametrize("values", VALUES_SETS)
def test_rbac_is_least_privilege(render: Render, values: str) -> None:
    rendered = render("1.34", values)
    for role in rendered.of_kind("ClusterRole") + rendered.of_kind("Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard {field}"
            # nothing kgpu does reads secrets or config maps, or escalates
            assert not {"secrets", "configmaps", "roles", "clusterroles"} & set(rule["resources"])
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    # leases only in the release namespace: the controller cannot take another's lock
    for role in rendered.of_kind("ClusterRole"):
        assert all("leases" not in r["resources"] for r in role["rules"])
    # the agent writes only ResourceSlices, Nodes (the labels kgpu owns) and the MIG manager's
    # Events cluster-wide (its NodeFeature: in its namespace)
    agent_role = rendered.one("ClusterRole", "agent")
    writes = {
        res
        for r in agent_role["rules"]
        if set(r["verbs"]) & {"create", "update", "patch", "delete"}
        for res in r["resources"]
    }
    assert writes <= {"resourceslices", "nodes", "events"}
