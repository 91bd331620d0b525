"""What ``kgpu sim`` prints: the cluster as JSON (the keys other tools read) and as tables.

JSON keys are fixed by the design: top level ``nodes``, ``pods``, ``events``,
``resourceClaims``, ``resourceSlices``, ``computeDomains`` (always present, ``[]`` when the
store holds none, so tools need not test for them); a node
has ``name``, ``labels``, ``capacity``, ``allocatable``, ``allocated`` (and ``mps`` daemons); a
pod ``namespace``, ``name``, ``phase``, ``nodeName``, ``devices`` and ``env`` per container; an
event ``type``, ``reason``, ``object``, ``message``. Quantities are strings, as in the
Kubernetes API.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kgpu.dra.api import RESOURCE_API
from kgpu.node.ids import replica_id, split_replica
from kgpu.sim import nodeside
from kgpu.sim.context import SimContext
from kgpu.sim.quantity import format_units
from kgpu.sim.state import PodRecord, SimNode

if TYPE_CHECKING:
    from rich.console import Console

HOST_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


def _q(values: dict[str, int]) -> dict[str, str]:
    return {k: format_units(k, v) for k, v in sorted(values.items())}


def node_json(node: SimNode) -> dict[str, Any]:
    allocated = {k: v for k, v in node.requested.items() if v}
    out: dict[str, Any] = {
        "name": node.name,
        "machine": node.machine.profile if node.machine else None,
        "ready": node.ready,
        "unschedulable": node.unschedulable,
        "labels": dict(sorted(node.labels.items())),
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints],
        "capacity": _q(node.capacity),
        "allocatable": _q(node.allocatable),
        "allocated": _q(allocated),
        "pods": sorted(node.pods),
    }
    if node.view is not None:
        out["deviceConfig"] = node.view.config_name
        out["migConfig"] = node.view.mig_config_name
    if node.unhealthy:
        out["unhealthy"] = sorted(node.unhealthy)
    out["mps"] = [
        {
            "resource": d.resource,
            "gpu": next(iter(_gpu_indices(node, d.gpus)), None),
            "gpus": d.gpus,
            "replicas": d.replicas,
            "activeThreadPercentage": d.active_thread_percentage,
            "pinnedMemoryLimitMiB": d.pinned_memory_limit_mib,
            "pipeDirectory": d.pipe_directory,
            "clients": nodeside.mps_clients(node, d),
        }
        for d in node.mps
    ]
    return out


def _gpu_indices(node: SimNode, uuids: list[str]) -> list[int]:
    """The indices (as nvidia-smi shows them) of the GPUs with these UUIDs."""
    if node.machine is None:
        return []
    return [g.index for g in node.machine.gpus if g.uuid in uuids]


def _gpu_name(node: SimNode, uuids: list[str]) -> str:
    indices = _gpu_indices(node, uuids)
    return "GPU " + ",".join(map(str, indices)) if indices else ",".join(uuids)


def pod_json(rec: PodRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": rec.namespace,
        "name": rec.name,
        "phase": rec.phase,
        "nodeName": rec.node or None,
        "devices": rec.devices,
        "env": {c: e for c, e in rec.env.items() if e},
    }
    owner = next(
        (o for o in rec.obj["metadata"].get("ownerReferences") or () if o.get("controller")), None
    )
    if owner:
        out["owner"] = f"{owner['kind']}/{owner['name']}"
    if rec.phase == "Pending" and rec.last_message:
        out["message"] = rec.last_message
    return out


def build_report(sim: SimContext) -> dict[str, Any]:
    pods = sorted(sim.pods.values(), key=lambda r: r.seq)
    out: dict[str, Any] = {
        "scenario": sim.scenario.name,
        "time": sim.now,
        "nodes": [node_json(n) for n in sim.nodes],
        "pods": [pod_json(p) for p in pods],
        "events": [
            {"type": e.type, "reason": e.reason, "object": e.object, "message": e.message}
            for e in sim.events
        ],
    }
    for key, api, kind in (
        ("resourceClaims", RESOURCE_API, "ResourceClaim"),
        ("resourceSlices", RESOURCE_API, "ResourceSlice"),
        ("computeDomains", "resource.nvidia.com/v1beta1", "ComputeDomain"),
    ):
        # always present (possibly empty): tools read these keys without checking for them
        out[key] = sim.store.list(api, kind)
    out["unsupported"] = list(sim.unsupported)
    out["warnings"] = list(sim.warnings)
    return out


# -- tables -----------------------------------------------------------------------------------


def _extended(node: SimNode) -> list[str]:
    names = set(node.capacity) | {k for k, v in node.requested.items() if v}
    return sorted(n for n in names if n not in HOST_RESOURCES)


def gpu_summary(node: SimNode) -> str:
    """``nvidia.com/gpu 4/6`` per extended resource: allocated / allocatable (capacity)."""
    parts = []
    for r in _extended(node):
        alloc, cap = node.allocatable.get(r, 0), node.capacity.get(r, 0)
        used = node.requested.get(r, 0)
        cap_note = f" (cap {cap})" if cap != alloc else ""
        parts.append(f"{r} {used}/{alloc}{cap_note}")
    return "\n".join(parts) or "-"


def step_snapshot(
    sim: SimContext, title: str, earlier: list[dict[str, Any]]
) -> dict[str, Any]:
    """A compact picture of the cluster after one step, for ``--watch`` (``earlier``: the
    snapshots of the steps before, whose events it does not repeat)."""
    phases = Counter(r.phase for r in sim.pods.values())
    seen = sum(len(s["newEvents"]) for s in earlier) + sum(s["quietEvents"] for s in earlier)
    fresh = sim.events[seen:]
    shown = [e for e in fresh if e.reason not in ("Scheduled", "NodeReady")]
    return {
        "newEvents": [
            {"type": e.type, "reason": e.reason, "object": e.object, "message": e.message}
            for e in shown
        ],
        "quietEvents": len(fresh) - len(shown),
        "title": title,
        "time": sim.now,
        "nodes": [
            {
                "name": n.name,
                "gpus": gpu_summary(n),
                "pods": len(n.pods),
                "ready": n.ready,
                "labels": {
                    k: v
                    for k, v in n.labels.items()
                    if k
                    in (
                        "nvidia.com/gpu.product",
                        "nvidia.com/device-plugin.config",
                        "nvidia.com/mig.config",
                        "nvidia.com/mig.config.state",
                        "nvidia.com/gpu.sharing-strategy",
                    )
                },
            }
            for n in sim.nodes
        ],
        "phases": dict(phases),
        "pods": [
            {
                "name": r.key,
                "phase": r.phase,
                "node": r.node or "-",
                "devices": sum(len(v) for v in r.devices.values()),
            }
            for r in sorted(sim.pods.values(), key=lambda r: r.seq)
        ][:50],
        "events": len(sim.events),
    }


#: Table cells narrower than this are more fold than text: the column is dropped instead.
MIN_FOLDED_WIDTH = 14


def _fixed_width(widths: list[int]) -> int:
    """Characters a rich table with these content widths takes: one space of padding on each
    side of a cell, a border between cells and at both ends."""
    return sum(w + 3 for w in widths) + 1


def _longest(values: list[str], floor: int = 0) -> int:
    return max([floor, *(len(v) for v in values)])


def _pods_table(records: list[PodRecord], width: int) -> Any:
    """Pods with their whole names, in the widest layout that fits ``width``: PHASE, NODE and
    DEVICES columns; devices under the name; or, when even PHASE and NODE leave too little room
    for the name, one column with phase, node and devices under it."""
    from rich.markup import escape
    from rich.table import Table

    where_width = _longest([r.node or "-" for r in records], 4)
    pod_width = _longest([r.key for r in records], 3)
    room = width - _fixed_width([pod_width, len("Succeeded"), where_width])
    columns = (
        ("POD", "PHASE", "NODE", "DEVICES")
        if room - 3 >= MIN_FOLDED_WIDTH
        else ("POD, devices", "PHASE", "NODE")
        if room >= 0
        else ("POD: phase, node, devices",)
    )
    table = Table(title="Pods")
    # beyond the terminal's width a name folds onto a second line: still whole, never cut
    table.add_column(columns[0], min_width=min(pod_width, width - 4), overflow="fold")
    for header in columns[1:]:
        table.add_column(
            header,
            min_width=where_width if header == "NODE" else None,
            no_wrap=header != "DEVICES",
            overflow="fold",
        )
    for r in records:
        color = {"Running": "green", "Pending": "yellow", "Failed": "red"}.get(r.phase, "white")
        phase = f"[{color}]{escape(r.phase)}[/{color}]"
        devices = [
            f"{c}: {', '.join(_short(i) for i in ids)}" for c, ids in r.devices.items() if ids
        ]
        if len(columns) == 4:
            table.add_row(
                escape(r.key), phase, escape(r.node or "-"), escape("\n".join(devices) or "-")
            )
            continue
        under = [escape(d) for d in devices]
        if len(columns) == 1:
            under.insert(0, f"{phase} on {escape(r.node or '-')}")
        cell = escape(r.key) + "".join(f"\n  [dim]{line}[/dim]" for line in under)
        if len(columns) == 1:
            table.add_row(cell)
        else:
            table.add_row(cell, phase, escape(r.node or "-"))
    return table


def render(
    sim: SimContext, console: Console, *, max_pods: int = 40, max_events: int = 25
) -> None:
    """The human summary: nodes like ``kubectl describe node``, pods, then events.

    Names (nodes, pods) are never cut: at 80 columns ``default/time-slicing-ver…`` left every
    pod of a Deployment looking the same. Their columns keep their width; the others fold, and
    when too little room is left for the pods' DEVICES column, devices go under the pod name.
    Text from the scenario is printed literally, not as rich markup."""
    from rich.markup import escape
    from rich.table import Table

    title = sim.scenario.name + (
        f" — {sim.scenario.description}" if sim.scenario.description else ""
    )
    console.print(f"[bold]{escape(title)}[/bold]  (t={sim.now:g}s)")
    shown_nodes = sim.nodes[:100]
    node_width = _longest([n.name for n in shown_nodes], 4)
    nodes = Table(title="Nodes")
    nodes.add_column("NODE", min_width=node_width, overflow="fold")
    nodes.add_column("CONFIG", overflow="fold")
    nodes.add_column("GPU RESOURCES used/allocatable", overflow="fold")
    nodes.add_column("PODS", no_wrap=True)
    for n in shown_nodes:
        head = escape(n.name) + ("" if n.ready else " [red](NotReady)[/red]")
        if n.machine is not None:
            head += f"\n[dim]{escape(n.machine.profile)}[/dim]"
        product = n.labels.get("nvidia.com/gpu.product")
        if product:
            head += f"\n[dim]{escape(product)}[/dim]"
        config = "-"
        if n.view is not None:
            config = n.view.config_name or "-"
            if n.view.mig_config_name:
                state = n.labels.get("nvidia.com/mig.config.state")
                config += f"\nmig: {n.view.mig_config_name}" + (f" ({state})" if state else "")
        mps = "".join(
            f"\n[cyan]MPS daemon[/cyan] {escape(_gpu_name(n, d.gpus))}: "
            f"{len(nodeside.mps_clients(n, d))}/{d.replicas} clients, "
            f"{d.active_thread_percentage}% SMs each"
            for d in n.mps
        )
        nodes.add_row(
            head,
            escape(config),
            escape(gpu_summary(n)) + mps,
            f"{len(n.pods)}/{n.allocatable.get('pods', 0)}",
        )
    console.print(nodes)
    if len(sim.nodes) > 100:
        console.print(f"... and {len(sim.nodes) - 100} more nodes")
    records = sorted(sim.pods.values(), key=lambda r: r.seq)
    console.print(_pods_table(records[:max_pods], console.width))
    if len(records) > max_pods:
        phases = Counter(r.phase for r in records)
        console.print(
            f"... {len(records) - max_pods} more pods; totals: "
            + ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
        )
    events = Table(title="Events")
    events.add_column("TYPE", no_wrap=True)
    events.add_column("REASON", overflow="fold")
    events.add_column("OBJECT", overflow="fold")
    events.add_column("MESSAGE", overflow="fold")
    groups: dict[tuple[str, str, str], list[str]] = {}
    for e in sim.events:
        if e.reason in ("Scheduled", "NodeReady"):
            continue
        groups.setdefault((e.type, e.reason, e.message), []).append(e.object)
    rows = list(groups.items())
    for (type_, reason, message), objects in rows[-max_events:]:
        color = "red" if type_ == "Warning" else "white"
        who = objects[0] + (f" (+{len(objects) - 1} more)" if len(objects) > 1 else "")
        events.add_row(
            f"[{color}]{escape(type_)}[/{color}]", escape(reason), escape(who), escape(message)
        )
    console.print(events)
    console.print(f"({len(sim.events)} events in all; -o json lists every one)")
    for w in sim.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")


def _used(node: SimNode, resource: str) -> str:
    used = format_units(resource, node.requested.get(resource, 0))
    return f"{used}/{format_units(resource, node.allocatable.get(resource, 0))}"


def _short(device_id: str) -> str:
    """``GPU-1b2c...::3`` -> ``GPU-1b2c3d4e::3``: enough to tell devices apart in a table."""
    head, replica = split_replica(device_id)
    if head.startswith(("GPU-", "MIG-")) and len(head) > 12:
        head = head[:12]
    return head if replica is None else replica_id(head, replica)


def render_steps(snapshots: list[dict[str, Any]], console: Console) -> None:
    """One table per step: what each node has allocated and how the pods stand."""
    from rich.markup import escape
    from rich.table import Table

    for i, snap in enumerate(snapshots):
        table = Table(title=escape(f"[{i}] t={snap['time']:g}s  {snap['title']}"))
        shown = snap["nodes"][:50]
        table.add_column("NODE", min_width=_longest([n["name"] for n in shown]), overflow="fold")
        table.add_column("GPU RESOURCES used/allocatable", overflow="fold")
        table.add_column("PODS", no_wrap=True)
        table.add_column("LABELS", overflow="fold")
        for n in shown:
            table.add_row(
                escape(n["name"] + ("" if n["ready"] else " (NotReady)")),
                escape(n["gpus"]),
                str(n["pods"]),
                escape("\n".join(f"{k}={v}" for k, v in n["labels"].items())),
            )
        console.print(table)
        console.print(
            "pods: " + (", ".join(f"{k} {v}" for k, v in sorted(snap["phases"].items())) or "none")
        )
        groups: dict[tuple[str, str, str], int] = {}
        for e in snap["newEvents"]:
            key = (e["type"], e["reason"], e["message"])
            groups[key] = groups.get(key, 0) + 1
        for (type_, reason, message), count in list(groups.items())[:6]:
            color = "red" if type_ == "Warning" else "dim"
            times = f" (x{count})" if count > 1 else ""
            console.print(
                f"  [{color}]{escape(type_)} {escape(reason)}[/{color}]{times}: {escape(message)}",
                soft_wrap=True,
            )
