"""What lands on a node for a ComputeDomain: IMEX channel numbers, the IMEX daemon's config
files and the CDI edits that hand a channel to a container. Pure functions of their inputs.

Facts carried over from NVIDIA's driver (its IMEX daemon config template and the
``IMEXDaemonsWithDNSNames`` mode, on by default upstream) and the IMEX guide: channels are
character devices ``/dev/nvidia-caps-imex-channels/channel<N>``; the daemon's directory is
mounted at ``/imexd`` and holds ``imexd.cfg.tmpl`` (upstream's template, which the daemon
renders into ``imexd.cfg`` with its pod IP), ``nodes.cfg``, the daemon's peers as DNS names
``compute-domain-daemon-0000`` ... one per possible index (18 by default), so the file never
changes; which IP each name has is an ``/etc/hosts`` mapping of the daemons in the clique,
by their index; the daemon re-resolves on SIGUSR1. The command service listens on port
50005 and the daemon on 50000.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from kgpu.computedomain.api import MAX_NODES_PER_IMEX_DOMAIN, DomainNode

CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
#: IMEX allows this many channels per node (upstream's maximum for allocationMode: All).
MAX_CHANNELS = 2048
#: Where the daemon container sees its domain directory (upstream: /imexd).
IMEX_CONFIG_DIR = "/imexd"
NODES_CONFIG = "nodes.cfg"
IMEX_CONFIG = "imexd.cfg"
IMEX_CONFIG_TEMPLATE = "imexd.cfg.tmpl"
#: The IP -> daemon DNS name mapping of the clique, merged into the daemon's /etc/hosts.
HOSTS = "hosts"
DNS_NAME_PREFIX = "compute-domain-daemon-"
#: Placeholders of upstream's template (Go template syntax), filled in by the daemon.
BIND_IP_PLACEHOLDER = "{{ .IMEXCmdBindInterfaceIP }}"
NODES_PATH_PLACEHOLDER = "{{ .IMEXDaemonNodesConfigPath }}"
SERVER_PORT = 50000
CMD_PORT = 50005

CDI_VENDOR = "k8s.compute-domain.nvidia.com"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"


def channel_path(channel: int) -> str:
    return f"{CHANNEL_DIR}/channel{channel}"


class ChannelsExhausted(Exception):
    """No IMEX channel of the node can go to this domain: every one is taken, or another
    domain holds them all (``allocationMode: All``), or this domain asks for all of them while
    another holds one."""


def assign_channel(
    in_use: Mapping[str, int],
    domain_uid: str,
    limit: int = MAX_CHANNELS,
    preferred: int | None = None,
    *,
    all_mode: Iterable[str] = (),
    want_all: bool = False,
) -> int:
    """The IMEX channel a domain uses on one node.

    ``in_use`` maps the domain uids already holding a channel on this node to their channel;
    ``all_mode`` names those among them whose containers got every channel of the node
    (``allocationMode: All``). A domain keeps its channel for as long as any of its claims is
    prepared there (so every pod of the domain on the node shares one channel, which IMEX
    needs to let them share memory); a new domain takes ``preferred`` (the channel it already
    uses on its other nodes: IMEX wants one channel index per domain across its clique) when no
    other domain holds it here, else the lowest channel no other domain holds, so two domains
    on one node never share one.

    ``All`` counts against every other domain: a domain whose pods see all channels of the
    node shares the node with no other domain (each other domain's channel would be visible to
    it), so ``want_all`` is refused while another domain holds a channel here and any request
    is refused while another domain holds the node in ``All`` mode. Upstream has one domain
    per node, so there this reduces to its "channel 0 is taken" refusal. An ``All`` domain is
    recorded under channel 0 (or its ``preferred`` one), as upstream treats it.
    """
    if domain_uid in in_use:
        return in_use[domain_uid]
    others = sorted(uid for uid in in_use if uid != domain_uid)
    exclusive = sorted(set(all_mode) & set(others))
    if exclusive:
        raise ChannelsExhausted(
            f"every IMEX channel of this node is given to ComputeDomain {exclusive[0]} "
            "(allocationMode: All); no other domain can run here while its pods do"
        )
    if want_all and others:
        raise ChannelsExhausted(
            "allocationMode: All gives the pod every IMEX channel of the node, but "
            f"ComputeDomain(s) {', '.join(others)} hold channels here"
        )
    taken = set(in_use.values())
    if preferred is not None and 0 <= preferred < limit and preferred not in taken:
        return preferred
    for channel in range(limit):
        if channel not in taken:
            return channel
    raise ChannelsExhausted(f"all {limit} IMEX channels on this node are in use")


def derived_ip(node_name: str) -> str:
    """A stable 10.x.y.z address for a node that reports no InternalIP (simulated nodes)."""
    digest = hashlib.sha256(node_name.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(1, min(254, digest[2]))}"


def node_ip(node: Mapping[str, Any] | None, node_name: str) -> str:
    """A node's InternalIP from ``status.addresses``; a derived address when it has none.

    The address goes into the IMEX daemons' hosts mapping one per line, so only what
    :mod:`ipaddress` parses counts (normalised: ``010.0.0.1`` is refused, ``::FFFF`` lowercase);
    anything else in the field (a newline, a second key=value) is ignored."""
    status = (node or {}).get("status")
    addresses = status.get("addresses") if isinstance(status, Mapping) else None
    for address in addresses if isinstance(addresses, list) else []:
        if isinstance(address, Mapping) and address.get("type") == "InternalIP":
            parsed = parse_ip(address.get("address"))
            if parsed:
                return parsed
    return derived_ip(node_name)


def parse_ip(value: object) -> str:
    """``value`` as a normalised IPv4/IPv6 address, or "" when it is not one."""
    if not isinstance(value, str):
        return ""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return ""


def dns_name(index: int) -> str:
    """The DNS name of the daemon with this index in its clique (upstream's format)."""
    return f"{DNS_NAME_PREFIX}{index:04d}"


def render_nodes_config(max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> str:
    """``nodes.cfg``: every daemon name the clique can have, one a line. It is the same on
    every node and never changes; peers come and go through the hosts mapping."""
    return "".join(f"{dns_name(i)}\n" for i in range(max_nodes))


def render_hosts(
    daemons: Iterable[DomainNode], clique_id: str, max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN
) -> str:
    """The ``/etc/hosts`` lines that give the clique's daemons their names: ``<ip>\t<name>``
    for every daemon of ``clique_id`` with an address and an index below ``max_nodes``,
    ordered by index, so every daemon of the clique writes the identical file. Only what
    :mod:`ipaddress` parses is an address (normalised): the field comes from the API, and
    anything else (a newline, a second name) would become a line of the daemon's hosts file."""
    chosen = sorted(
        (d for d in daemons if d.clique_id == clique_id and parse_ip(d.ip_address)),
        key=lambda d: (d.index, d.name),
    )
    lines, seen = [], set()
    for d in chosen:
        if not 0 <= d.index < max_nodes or d.index in seen:
            continue
        seen.add(d.index)
        lines.append(f"{parse_ip(d.ip_address)}\t{dns_name(d.index)}\n")
    return "".join(lines)


def hosts_addresses(text: str) -> list[str]:
    """The addresses a hosts mapping lists, in its order."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


#: Upstream's IMEX daemon config template (templates/compute-domain-daemon-config.tmpl.cfg):
#: the same keys and values, the two placeholders filled in by the daemon at start.
IMEX_CONFIG_KEYS: tuple[tuple[str, str], ...] = (
    ("LOG_LEVEL", "4"),
    ("LOG_FILE_NAME", ""),
    ("STATS_FILE_NAME", "/var/log/nvidia-imex-stats.log"),
    ("LOG_APPEND_TO_LOG", "0"),
    ("LOG_FILE_MAX_SIZE", "1024"),
    ("LOG_MAX_ROTATE_COUNT", "10"),
    ("LOG_USE_SYSLOG", "0"),
    ("DAEMONIZE", "0"),
    ("BIND_INTERFACE_IP", ""),
    ("SERVER_PORT", str(SERVER_PORT)),
    ("IMEX_NODE_CONFIG_FILE", NODES_PATH_PLACEHOLDER),
    ("NETWORK_INTERFACE", ""),
    ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
    ("IMEX_ENABLE_AUTH_ENCRYPTION", "0"),
    ("IMEX_AUTH_ENCRYPTION_MODE", "SSL_TLS"),
    ("IMEX_AUTH_SOURCE", ""),
    ("IMEX_SERVER_KEY", ""),
    ("IMEX_SERVER_CERT", ""),
    ("IMEX_SERVER_CERT_AUTH", ""),
    ("IMEX_CLIENT_KEY", ""),
    ("IMEX_CLIENT_CERT", ""),
    ("IMEX_CLIENT_CERT_AUTH", ""),
    ("IMEX_SECURITY_TARGET_OVERRIDE", ""),
    ("IMEX_GSS_SERVICE_NAME", "host"),
    ("IMEX_GSS_TIMEOUT_SEC", "30"),
    ("IMEX_GSS_RETRY_INTERVAL_SEC", "5"),
    ("IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC", "-1"),
    ("IMEX_GSS_SHUTDOWN_ON_FAILURE", "0"),
    ("IMEX_CMD_ENABLED", "1"),
    ("IMEX_CMD_BIND_INTERFACE_IP", BIND_IP_PLACEHOLDER),
    ("IMEX_CMD_PORT", str(CMD_PORT)),
    ("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
    ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1"),
)


def render_imex_config_template() -> str:
    """``imexd.cfg.tmpl``, what the node side writes for a daemon (as upstream's plugin)."""
    return "".join(f"{key}={value}\n" for key, value in IMEX_CONFIG_KEYS)


def render_imex_config(pod_ip: str, config_dir: str = IMEX_CONFIG_DIR) -> str:
    """``imexd.cfg`` as the daemon renders the template at start with its pod IP."""
    return (
        render_imex_config_template()
        .replace(BIND_IP_PLACEHOLDER, pod_ip)
        .replace(NODES_PATH_PLACEHOLDER, f"{config_dir}/{NODES_CONFIG}")
    )


def cdi_device_name(claim_uid: str, device: str) -> str:
    """CDI device name for one claim's device, as upstream: ``<claimUID>-<device>``."""
    return f"{claim_uid}-{device}"
