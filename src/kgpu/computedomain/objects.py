"""The Kubernetes objects a ComputeDomain owns, built from the domain alone.

As upstream: the workload channel ResourceClaimTemplate (in the domain's namespace, under the
name the user chose, class ``compute-domain-default-channel.nvidia.com``, an opaque
``ComputeDomainChannelConfig`` naming the domain), the daemon ResourceClaimTemplate (class
``compute-domain-daemon.nvidia.com``, ``ComputeDomainDaemonConfig``) and a DaemonSet that runs
one IMEX daemon on every node labelled for the domain, and per NVLink clique a
ComputeDomainClique listing the domain's daemons there. Every object carries the
``resource.nvidia.com/computeDomain=<uid>`` label, which is how cleanup finds them.

The daemon container runs :data:`DAEMON_SCRIPT`, a few lines of POSIX shell doing the part of
upstream's ``compute-domain-daemon`` that kgpu does not do on the node side: render
``imexd.cfg`` from the template with the pod's IP, keep ``/etc/hosts`` mapping the clique's
daemon DNS names to their IPs (from the ``hosts`` file the node side rewrites when the
domain's ComputeDomainClique changes), start ``nvidia-imex`` and send it SIGUSR1 (re-resolve
its peers) when the mapping changes. ``/imexd`` is mounted read-only (the privileged agent
writes it, and nothing a container puts there may reach the agent), so what the script writes
(the rendered config, the next ``/etc/hosts``) goes to its own ``$IMEX_RUN_DIR``.

The daemon claim template stamps its claims with the domain label
(``spec.metadata.labels``, which Kubernetes copies onto every claim made from it): the node
side prepares a daemon claim only in the controller's namespace and only for the domain its
label names.
"""

from __future__ import annotations

from typing import Any

from kgpu.computedomain.api import (
    API_VERSION,
    CHANNEL_CLASS,
    CHANNEL_CONFIG_KIND,
    CLIQUE_ID_LABEL,
    CLIQUE_KIND,
    DAEMON_CLASS,
    DAEMON_CONFIG_KIND,
    DOMAIN_LABEL,
    DRIVER,
    TARGET_DAEMON,
    TARGET_LABEL,
    TARGET_WORKLOAD,
    ComputeDomain,
    DomainNode,
    clique_object_name,
    node_label,
)
from kgpu.computedomain.imex import (
    BIND_IP_PLACEHOLDER,
    DNS_NAME_PREFIX,
    HOSTS,
    IMEX_CONFIG,
    IMEX_CONFIG_DIR,
    IMEX_CONFIG_TEMPLATE,
    NODES_CONFIG,
    NODES_PATH_PLACEHOLDER,
)
from kgpu.dra.api import RESOURCE_API

#: Where the driver's own objects (daemon claim templates, DaemonSets) live, as upstream's chart.
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
#: The IMEX daemon's image by default: upstream's driver image, which holds ``nvidia-imex``;
#: ``kgpu controller --imex-daemon-image`` (the chart's ``controller.imexDaemonImage``) replaces
#: it, for a mirror or a pinned digest.
DAEMON_IMAGE = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"
APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "kgpu-compute-domain"
DAEMON_CONTAINER = "compute-domain-daemon"
DAEMON_CLAIM = "compute-domain-daemon"
#: Where the daemon container writes (its rendered config, the next /etc/hosts): its own
#: filesystem, since ``/imexd`` is read-only to it.
IMEX_RUN_DIR = "/run/kgpu-imex"

#: The daemon container's program (``sh -c``). Paths and the poll interval of the local hosts
#: file come from the environment so a test can run it outside a pod.
DAEMON_SCRIPT = f"""set -eu
dir="${{IMEXD_DIR:-{IMEX_CONFIG_DIR}}}"
run="${{IMEX_RUN_DIR:-{IMEX_RUN_DIR}}}"
etc_hosts="${{HOSTS_FILE:-/etc/hosts}}"
imex="${{IMEX_BINARY:-nvidia-imex}}"
mkdir -p "$run"
sed -e "s|{BIND_IP_PLACEHOLDER}|${{POD_IP}}|" \\
  -e "s|{NODES_PATH_PLACEHOLDER}|$dir/{NODES_CONFIG}|" \\
  "$dir/{IMEX_CONFIG_TEMPLATE}" > "$run/{IMEX_CONFIG}"
sync_hosts() {{
  {{ grep -v '{DNS_NAME_PREFIX}' "$etc_hosts" || true; cat "$dir/{HOSTS}" 2>/dev/null || true; }} \\
    > "$run/.hosts.new"
  cat "$run/.hosts.new" > "$etc_hosts"
  rm -f "$run/.hosts.new"
}}
sync_hosts
last="$(cat "$dir/{HOSTS}" 2>/dev/null || true)"
"$imex" -c "$run/{IMEX_CONFIG}" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM INT
while kill -0 "$pid" 2>/dev/null; do
  sleep "${{POLL_S:-1}}"
  now="$(cat "$dir/{HOSTS}" 2>/dev/null || true)"
  if [ "$now" != "$last" ]; then
    sync_hosts
    kill -USR1 "$pid" 2>/dev/null || true
    last="$now"
  fi
done
wait "$pid"
"""


def _short(uid: str) -> str:
    return uid.replace("-", "")[-8:] or "0"


def daemon_object_name(domain: ComputeDomain) -> str:
    """Name of the domain's DaemonSet and daemon claim template in the driver namespace.

    Name and uid suffix: two domains of one name in different namespaces never collide.
    """
    return f"{domain.name[:200]}-imex-{_short(domain.uid)}"


def _labels(domain: ComputeDomain, target: str | None = None) -> dict[str, str]:
    labels = {DOMAIN_LABEL: domain.uid, APP_LABEL: APP_NAME}
    if target:
        labels[TARGET_LABEL] = target
    return labels


def _template(
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    request: str,
    device_class: str,
    parameters: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": DRIVER, "parameters": parameters},
                        }
                    ],
                }
            }
        },
    }


def channel_claim_template(domain: ComputeDomain) -> dict[str, Any]:
    """The template workload pods reference (``spec.channel.resourceClaimTemplate.name``)."""
    params: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": CHANNEL_CONFIG_KIND,
        "domainID": domain.uid,
    }
    if domain.spec.allocation_mode != "Single":
        params["allocationMode"] = domain.spec.allocation_mode
    return _template(
        name=domain.spec.channel_template,
        namespace=domain.namespace,
        labels=_labels(domain, TARGET_WORKLOAD),
        request="channel",
        device_class=CHANNEL_CLASS,
        parameters=params,
    )


def daemon_claim_template(
    domain: ComputeDomain, namespace: str = DRIVER_NAMESPACE
) -> dict[str, Any]:
    """The daemon pods' claim template, in the controller's namespace. Its claims carry the
    domain label (``spec.metadata``, copied onto each claim by Kubernetes): the node side
    checks it against the claim's ``domainID`` before mounting the domain's directory."""
    template = _template(
        name=daemon_object_name(domain),
        namespace=namespace,
        labels=_labels(domain, TARGET_DAEMON),
        request="daemon",
        device_class=DAEMON_CLASS,
        parameters={"apiVersion": API_VERSION, "kind": DAEMON_CONFIG_KIND, "domainID": domain.uid},
    )
    template["spec"]["metadata"] = {"labels": {DOMAIN_LABEL: domain.uid}}
    return template


def daemon_set(
    domain: ComputeDomain, namespace: str = DRIVER_NAMESPACE, image: str = DAEMON_IMAGE
) -> dict[str, Any]:
    """One IMEX daemon per node carrying the domain's node label; it tolerates every taint
    (as upstream) because the workload already chose the node."""
    selector = {DOMAIN_LABEL: domain.uid}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": daemon_object_name(domain),
            "namespace": namespace,
            "labels": _labels(domain),
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**selector, APP_LABEL: APP_NAME}},
                "spec": {
                    "nodeSelector": {node_label(domain.uid): "true"},
                    "containers": [
                        {
                            "name": DAEMON_CONTAINER,
                            "image": image,
                            "command": ["sh", "-c", DAEMON_SCRIPT],
                            "env": [
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                }
                            ],
                            "resources": {"claims": [{"name": DAEMON_CLAIM}]},
                        }
                    ],
                    "resourceClaims": [
                        {
                            "name": DAEMON_CLAIM,
                            "resourceClaimTemplateName": daemon_object_name(domain),
                        }
                    ],
                    "tolerations": [
                        {"operator": "Exists", "effect": "NoSchedule"},
                        {"operator": "Exists", "effect": "NoExecute"},
                        {"operator": "Exists", "effect": "PreferNoSchedule"},
                    ],
                },
            },
        },
    }


def clique_object(
    domain: ComputeDomain, clique_id: str, daemons: list[DomainNode], namespace: str
) -> dict[str, Any]:
    """The domain's ComputeDomainClique for one clique: its daemons there, by index."""
    return {
        "apiVersion": API_VERSION,
        "kind": CLIQUE_KIND,
        "metadata": {
            "name": clique_object_name(domain.uid, clique_id),
            "namespace": namespace,
            "labels": {**_labels(domain), CLIQUE_ID_LABEL: clique_id},
        },
        "daemons": [d.to_daemon_obj() for d in sorted(daemons, key=lambda d: (d.index, d.name))],
    }


def covers(current: Any, desired: Any) -> bool:
    """Whether ``current`` already says everything ``desired`` says. Maps may hold more keys
    (the API server defaults fields: a DaemonSet's ``updateStrategy``, a container's
    ``imagePullPolicy``), lists must have the same length and cover item by item. Comparing
    for equality instead would see a difference on every pass and rewrite the object forever."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(
            covers(current.get(k), v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(covers(c, d) for c, d in zip(current, desired, strict=True))
        )
    return bool(current == desired)
