"""What lands on a node for a ComputeDomain: IMEX channel numbers, the IMEX daemon's config
files and the CDI edits that hand a channel to a container. Pure functions of their inputs.

Facts carried over from NVIDIA's driver and the IMEX guide: channels are character devices
``/dev/nvidia-caps-imex-channels/channel<N>``; the daemon reads ``/etc/nvidia-imex/config.cfg``
whose ``IMEX_NODE_CONFIG_FILE`` names ``nodes_config.cfg``, one peer IP per line, only peers of
the daemon's own clique; the command service listens on port 50005 and the daemon on 50000.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
#: IMEX allows this many channels per node (upstream's maximum for allocationMode: All).
MAX_CHANNELS = 2048
IMEX_CONFIG_DIR = "/etc/nvidia-imex"
NODES_CONFIG = "nodes_config.cfg"
IMEX_CONFIG = "config.cfg"
SERVER_PORT = 50000
CMD_PORT = 50005

CDI_VENDOR = "k8s.compute-domain.nvidia.com"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"


def channel_path(channel: int) -> str:
    return f"{CHANNEL_DIR}/channel{channel}"


class ChannelsExhausted(Exception):
    """Every IMEX channel of the node is taken by other domains."""


def assign_channel(
    in_use: Mapping[str, int],
    domain_uid: str,
    limit: int = MAX_CHANNELS,
    preferred: int | None = None,
) -> int:
    """The IMEX channel a domain uses on one node.

    ``in_use`` maps the domain uids already holding a channel on this node to their channel.
    A domain keeps its channel for as long as any of its claims is prepared there (so every pod
    of the domain on the node shares one channel, which IMEX needs to let them share memory);
    a new domain takes ``preferred`` (the channel it already uses on its other nodes: IMEX
    wants one channel index per domain across its clique) when no other domain holds it here,
    else the lowest channel no other domain holds, so two domains on one node never share one.
    """
    if domain_uid in in_use:
        return in_use[domain_uid]
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

    The address goes into the IMEX daemons' config files one per line, so only what
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


def render_nodes_config(ips: Iterable[str]) -> str:
    """``nodes_config.cfg``: the IPs of the domain's nodes in the daemon's clique, one a line,
    sorted numerically so that every daemon of a domain writes the identical file."""
    valid = {parsed for parsed in map(parse_ip, ips) if parsed}  # never a line of anything else
    return "".join(f"{ip}\n" for ip in sorted(valid, key=_ip_key))


def _ip_key(ip: str) -> tuple[int, int, str]:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return (9, 0, ip)
    return (addr.version, int(addr), ip)


def render_imex_config(bind_ip: str) -> str:
    """The IMEX daemon's ``config.cfg`` for one node (only the keys the daemon must have)."""
    lines = [
        "# Written by kgpu for one ComputeDomain's IMEX daemon.",
        "LOG_FILE_NAME=/var/log/nvidia-imex.log",
        "LOG_LEVEL=4",
        f"SERVER_PORT={SERVER_PORT}",
        f"IMEX_NODE_CONFIG_FILE={IMEX_CONFIG_DIR}/{NODES_CONFIG}",
        "IMEX_WAIT_FOR_QUORUM=NONE",
        "IMEX_CMD_ENABLED=1",
        f"IMEX_CMD_BIND_INTERFACE_IP={bind_ip}",
        f"IMEX_CMD_PORT={CMD_PORT}",
        "DAEMONIZE=0",
    ]
    return "\n".join(lines) + "\n"


def cdi_device_name(claim_uid: str, device: str) -> str:
    """CDI device name for one claim's device, as upstream: ``<claimUID>-<device>``."""
    return f"{claim_uid}-{device}"
