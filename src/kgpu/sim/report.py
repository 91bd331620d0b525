"""What ``kgpu sim`` prints: the cluster as JSON (the keys other tools read) and as tables.

JSON keys are fixed by the design: top level ``nodes``, ``pods``, ``events``,
``resourceClaims``, ``resourceSlices``, ``computeDomains`` (always present, ``[]`` when the
store holds none, so tools need not test for them); a node
has ``name``, ``labels``, ``capacity``, ``allocatable``, ``allocated`` (and ``mps`` daemons, and
``shares``: the GPUs published for sharing and the claims holding shares of them); a
pod ``namespace``, ``name``, ``phase``, ``nodeName``, ``devices`` and ``env`` per container; an
event ``type``, ``reason``, ``object``, ``message``. Quantities are strings, as in the
Kubernetes API.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kgpu.dra.api import RESOURCE_API
from kgpu.node.ids import replica_id, split_replica
from kgpu.sim import nodeside
from kgpu.sim.context import SimContext, time_string
from kgpu.sim.plugins import Event
from kgpu.sim.quantity import format_units
from kgpu.sim.state import PodRecord, SimNode
from kgpu.store import list_read_only

if TYPE_CHECKING:
    from rich.console import Console

HOST_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
CD_API, CD_KIND = "resource.nvidia.com/v1beta1", "ComputeDomain"
#: Events every node or pod gets once: they fill tables without telling anything.
QUIET_REASONS = frozenset({"Scheduled", "NodeReady"})
#: From this terminal width on, tables show ids (device UUIDs) whole: folded, never shortened.
FULL_IDS_WIDTH = 120


def _q(values: dict[str, int]) -> dict[str, str]:
    return {k: format_units(k, v) for k, v in sorted(values.items())}


def node_json(node: SimNode, shares: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One node; ``shares`` (from :func:`gpu_shares`) when its GPUs are published shared."""
    allocated = {k: v for k, v in node.requested.items() if v}
    out: dict[str, Any] = {
        "name": node.name,
        "machine": node.machine.profile if node.machine else None,
        "group": node.group,
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
    if shares:
        out["shares"] = shares
    return out


def gpu_shares(sim: SimContext) -> dict[str, list[dict[str, Any]]]:
    """Per node: each GPU the DRA driver publishes for sharing, its capacity, what its
    shares consume together and each share (claim, pods, share id, consumed capacity), as
    the allocator wrote them in the claims, with the ``ceiling`` of a prepared share whose
    GPU's MPS server is limited to more than it (the largest share prepared there: what a
    client that drops kgpu's environment may use). Empty unless the scenario turns shares
    on."""
    if not sim.scenario.dra_shares.enabled:
        return {}
    from kgpu.dra.allocated_shares import claim_shares, shared_devices
    from kgpu.quantity import format_binary, parse_quantity

    devices = shared_devices(list_read_only(sim.store, RESOURCE_API, "ResourceSlice"))
    held: dict[tuple[str, str, str], list[Any]] = {}
    for share in claim_shares(list_read_only(sim.store, RESOURCE_API, "ResourceClaim")):
        held.setdefault(share.key, []).append(share)
    index = {g.uuid: g.index for n in sim.nodes if n.machine is not None for g in n.machine.gpus}
    ceilings = _share_ceilings(sim)
    out: dict[str, list[dict[str, Any]]] = {}
    for key, device in sorted(devices.items()):
        shares = held.get(key, [])
        used: dict[str, Any] = {}
        for share in shares:
            for name, value in share.consumed.items():
                used[name] = used.get(name, 0) + parse_quantity(value)
        out.setdefault(device.node, []).append(
            {
                "gpu": index.get(device.uuid),
                "uuid": device.uuid,
                "device": device.device,
                "capacity": dict(device.capacity),
                "used": {
                    k: format_binary(int(v)) if k == "memory" else str(int(v))
                    for k, v in sorted(used.items())
                },
                "claims": [
                    {
                        "claim": f"{s.namespace}/{s.claim}",
                        "pods": list(s.pods),
                        "shareID": s.share_id,
                        "consumed": dict(s.consumed),
                        **_ceiling(ceilings, device.node, device.uuid, s),
                    }
                    for s in shares
                ],
            }
        )
    return out


def _share_ceilings(sim: SimContext) -> dict[tuple[str, str], tuple[int, dict[str, int]]]:
    """(node, GPU UUID) -> the GPU's MPS server memory limit (MiB) and each prepared share's
    own (claim ``namespace/name`` -> MiB), from the simulated agents' share daemons."""
    from kgpu.sim.dra_node import DraKubeletPlugin

    out: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}
    for plugin in sim.kubelet_plugins:
        if not isinstance(plugin, DraKubeletPlugin):
            continue
        for node, handler in plugin.handlers.items():
            for daemon in handler.share_daemons.daemons.values():
                if daemon.ceiling_mib is not None:
                    own = {s.claim: s.memory_mib for s in daemon.served.values()}
                    out[(node, daemon.gpu.uuid)] = (daemon.ceiling_mib, own)
    return out


def _ceiling(
    ceilings: dict[tuple[str, str], tuple[int, dict[str, int]]], node: str, uuid: str, share: Any
) -> dict[str, str]:
    """``{"ceiling": "40Gi"}`` for a prepared share below its GPU server's limit, else {}."""
    from kgpu.quantity import format_binary

    ceiling, own = ceilings.get((node, uuid), (0, {}))
    mine = own.get(f"{share.namespace}/{share.claim}")
    if mine is None or ceiling <= mine:
        return {}
    return {"ceiling": format_binary(ceiling * 2**20)}


def _with_shares(summary: str, shares: list[dict[str, Any]] | None) -> str:
    """A node's GPU summary with its share lines under it (instead of "-" when it has only
    those)."""
    lines = share_lines(shares)
    if not lines:
        return summary
    return "\n".join(lines if summary == "-" else [summary, *lines])


def share_lines(shares: list[dict[str, Any]] | None) -> list[str]:
    """A node's GPU shares for tables: one line per GPU (what its shares use of its capacity:
    ``shares`` in a share-count mode, else ``memory``), one per share under it."""
    lines: list[str] = []
    for gpu in shares or []:
        name = f"GPU {gpu['gpu']}" if gpu.get("gpu") is not None else gpu["device"]
        counted = "shares" if "shares" in gpu["capacity"] else "memory"
        total = gpu["capacity"].get(counted)
        used = gpu["used"].get(counted, "0")
        claims = f"{len(gpu['claims'])} claim(s)"
        lines.append(
            f"{name} shares: {used}/{total} {counted}, {claims}"
            if total
            else f"{name} shares: {claims}"
        )
        for claim in gpu["claims"]:
            consumed = claim["consumed"]
            parts = []
            if consumed.get("memory") not in (None, "0"):
                parts.append(f"{consumed['memory']} memory")
            if consumed.get("shares") not in (None, "0"):
                parts.append(f"{consumed['shares']} share(s)")
            if consumed.get("computeShares") not in (None, "0"):
                parts.append(f"{consumed['computeShares']}% compute")
            if claim.get("ceiling"):  # what a client that drops kgpu's env may use
                parts.append(f"ceiling {claim['ceiling']}")
            lines.append(f"  {claim['claim']}" + (f": {', '.join(parts)}" if parts else ""))
    return lines


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


def event_json(e: Event) -> dict[str, Any]:
    """An event as the API shows it: repeats counted (``count``), first and last time."""
    out: dict[str, Any] = {
        "type": e.type,
        "reason": e.reason,
        "object": e.object,
        "message": e.message,
        "count": e.count,
    }
    if e.first_seen is not None:
        out["firstTimestamp"] = time_string(e.first_seen)
        out["lastTimestamp"] = time_string(e.last_seen if e.last_seen is not None else e.first_seen)
    return out


def report_parts(sim: SimContext, *, copies: bool = True) -> Iterator[tuple[str, Any]]:
    """The report's top-level keys in order, each with its value; a list comes as an iterator
    of its items, built one at a time, so ``kgpu sim -o json`` can write 100,000 pods without
    holding their JSON in memory (:func:`build_report` collects the same into one dict).
    ``copies=False``: claims, slices and domains are the store's own objects, for a writer
    that only serializes them (12,500 ResourceSlices read, not copied)."""
    yield "scenario", sim.scenario.name
    # the release the cluster runs and its DRA allocator gates (kgpu.releases)
    yield (
        "kubernetes",
        {
            "version": str(sim.scenario.kubernetes_version),
            "featureGates": sim.scenario.features.gates(),
        },
    )
    yield "time", sim.now
    shares = gpu_shares(sim)
    yield "nodes", (node_json(n, shares.get(n.name)) for n in sim.nodes)
    yield "pods", (pod_json(p) for p in sorted(sim.pods.values(), key=lambda r: r.seq))
    yield "events", (event_json(e) for e in sim.events)
    for key, api, kind in (
        ("resourceClaims", RESOURCE_API, "ResourceClaim"),
        ("resourceSlices", RESOURCE_API, "ResourceSlice"),
        ("computeDomains", "resource.nvidia.com/v1beta1", "ComputeDomain"),
    ):
        # always present (possibly empty): tools read these keys without checking for them
        found = sim.store.list(api, kind) if copies else list_read_only(sim.store, api, kind)
        yield key, iter(found)
    yield "unsupported", iter(list(sim.unsupported))
    yield "warnings", iter(list(sim.warnings))


def build_report(sim: SimContext) -> dict[str, Any]:
    """The whole report as one dict (the keys and shapes of :func:`report_parts`)."""
    return {
        key: list(value) if isinstance(value, Iterator) else value
        for key, value in report_parts(sim)
    }


# -- events -----------------------------------------------------------------------------------


@dataclass
class EventGroup:
    """Identical events (type, reason, message) shown as one row: the objects they were about,
    in order, and how many there were."""

    type: str
    reason: str
    message: str
    objects: list[str] = field(default_factory=list)
    count: int = 0
    # ``objects`` as a set: 100,000 Pending pods in one row made ``in objects`` quadratic
    seen: set[str] = field(default_factory=set, repr=False, compare=False)

    def who(self) -> str:
        more = len(self.objects) - 1
        return self.objects[0] + (f" (+{more} more)" if more else "")


def fold_events(
    events: Iterable[Event], quiet: Collection[str] = QUIET_REASONS
) -> list[EventGroup]:
    """Events as table rows, in the order things happened: an event joins the latest row of
    identical events (same type, reason and message) unless its object had a different event
    since, so a later outcome never hides in an earlier row. A domain that went Ready, NotReady,
    then Ready again with the same message shows three rows, the last one Ready; twelve pods
    failing to schedule with the same message show one row with twelve objects. Events whose
    reason is in ``quiet`` are left out."""
    groups: list[EventGroup] = []
    latest: dict[tuple[str, str, str], EventGroup] = {}  # per key: its newest row
    last_key: dict[str, tuple[str, str, str]] = {}  # per object: the key of its last event
    for e in events:
        if e.reason in quiet:
            continue
        key = (e.type, e.reason, e.message)
        group = latest.get(key)
        if group is None or last_key.get(e.object, key) != key:
            group = EventGroup(e.type, e.reason, e.message)
            groups.append(group)
            latest[key] = group
        if e.object not in group.seen:
            group.seen.add(e.object)
            group.objects.append(e.object)
        group.count += 1
        last_key[e.object] = key
    return groups


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


def step_snapshot(sim: SimContext, title: str, seen: int) -> dict[str, Any]:
    """The cluster after one step, for ``--watch``: nodes, pods and events in the same shapes
    as the final report's (:func:`node_json`, :func:`pod_json`, :func:`event_json`), so one
    script reads both. ``seen``: how many event occurrences the earlier steps showed (this one's
    ``events`` are the occurrences since, quiet ones counted in ``quietEvents``)."""
    phases = Counter(r.phase for r in sim.pods.values())
    fresh = sim.event_log[seen:]  # occurrences: a repeat the recorder counted shows here
    shown = [e for e in fresh if e.reason not in QUIET_REASONS]
    shares = gpu_shares(sim)
    return {
        "title": title,
        "time": sim.now,
        "timestamp": time_string(sim.now),
        "phases": dict(sorted(phases.items())),
        "nodes": [node_json(n, shares.get(n.name)) for n in sim.nodes],
        "pods": [pod_json(r) for r in sorted(sim.pods.values(), key=lambda r: r.seq)],
        "events": [event_json(e) for e in shown],
        "quietEvents": len(fresh) - len(shown),
        "eventsSeen": len(sim.event_log),
    }


#: Table cells narrower than this are more fold than text: the column is dropped instead.
MIN_FOLDED_WIDTH = 14


def _fixed_width(widths: list[int]) -> int:
    """Characters a rich table with these content widths takes: one space of padding on each
    side of a cell, a border between cells and at both ends."""
    return sum(w + 3 for w in widths) + 1


def _longest_word(values: list[str]) -> int:
    """The longest run of characters without a space in ``values``: what a column must hold
    for wrapping at word boundaries to never cut an id."""
    return max((len(w) for v in values for w in v.split()), default=0)


def _longest(values: list[str], floor: int = 0) -> int:
    return max([floor, *(len(v) for v in values)])


def _device_lines(rec: PodRecord, full: bool) -> list[str]:
    """Per container, its device ids: whole ones one per line (``full``), or shortened ones
    on one line, for narrow terminals."""
    lines: list[str] = []
    for container, ids in rec.devices.items():
        if not ids:
            continue
        if not full:
            lines.append(f"{container}: {', '.join(_short(i) for i in ids)}")
            continue
        indent = " " * (len(container) + 2)
        lines += [f"{container}: {ids[0]}", *(indent + i for i in ids[1:])]
    return lines


def _pods_table(records: list[PodRecord], width: int, limit: int = 0) -> Any:
    """Pods with their whole names, in the widest layout that fits ``width``: PHASE, NODE and
    DEVICES columns; devices under the name; or, when even PHASE and NODE leave too little room
    for the name, one column with phase, node and devices under it. From
    :data:`FULL_IDS_WIDTH` columns on, device ids are whole (folded where they must be).

    Every column gets its width here: rich, left to honour minimum widths itself, drew tables
    wider than the terminal, which cut their right edge off."""
    from rich.markup import escape
    from rich.table import Table

    full = width >= FULL_IDS_WIDTH
    devices = {r.key: [clip(d, limit) for d in _device_lines(r, full)] for r in records}
    lines = [line for ls in devices.values() for line in ls]
    names = {r.key: clip(r.key, limit) for r in records}
    nodes = {r.key: clip(r.node or "-", limit) for r in records}
    where_width = _longest(list(nodes.values()), 4)
    phase_width = len("Succeeded")
    pod_width = _longest(list(names.values()), 3)
    room = width - _fixed_width([pod_width, phase_width, where_width])
    longest = _longest(lines, 0)
    # whole ids that would fold in a DEVICES column read better under the pod's name
    under_fits = longest > room - 3 and longest + 2 <= pod_width + room
    table = Table(title="Pods")
    if room - 3 >= MIN_FOLDED_WIDTH and not (full and under_fits):
        layout = 4
        table.add_column("POD", width=pod_width, overflow="fold")
        table.add_column("PHASE", width=phase_width, no_wrap=True)
        table.add_column("NODE", width=where_width, overflow="fold")
        table.add_column("DEVICES", width=min(room - 3, max(longest, 7)), overflow="fold")
    elif room >= 0:
        layout = 2
        under = longest + 2
        table.add_column(
            "POD, DEVICES", width=min(max(pod_width, under), pod_width + room), overflow="fold"
        )
        table.add_column("PHASE", width=phase_width, no_wrap=True)
        table.add_column("NODE", width=where_width, overflow="fold")
    else:
        layout = 1
        table.add_column("POD: PHASE, NODE, DEVICES", width=max(width - 4, 3), overflow="fold")
    for r in records:
        color = {"Running": "green", "Pending": "yellow", "Failed": "red"}.get(r.phase, "white")
        phase = f"[{color}]{escape(r.phase)}[/{color}]"
        if layout == 4:
            table.add_row(
                escape(names[r.key]),
                phase,
                escape(nodes[r.key]),
                escape("\n".join(devices[r.key]) or "-"),
            )
            continue
        under_lines = [escape(d) for d in devices[r.key]]
        if layout == 1:
            under_lines.insert(0, f"{phase} on {escape(nodes[r.key])}")
        cell = escape(names[r.key]) + "".join(f"\n  [dim]{line}[/dim]" for line in under_lines)
        if layout == 1:
            table.add_row(cell)
        else:
            table.add_row(cell, phase, escape(nodes[r.key]))
    return table


def domain_rows(sim: SimContext) -> list[dict[str, str]]:
    """One row per ComputeDomain: its status, its nodes (Ready of listed, of wanted), the
    cliques they are in and the Ready condition's message."""
    rows = []
    for domain in sim.store.list(CD_API, CD_KIND):
        meta = domain.get("metadata") or {}
        status = domain.get("status") or {}
        nodes = [n for n in status.get("nodes") or () if isinstance(n, dict)]
        ready = sum(1 for n in nodes if n.get("status") == "Ready")
        want = (domain.get("spec") or {}).get("numNodes")
        conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
        condition: dict[str, Any] = conditions[0] if conditions else {}
        rows.append(
            {
                "name": f"{meta.get('namespace', 'default')}/{meta.get('name')}",
                "status": str(status.get("status") or "-"),
                "nodes": f"{ready}/{len(nodes)}" + (f" of {want}" if want else ""),
                "cliques": ", ".join(sorted({str(n.get("cliqueID")) for n in nodes})) or "-",
                "message": str(condition.get("message") or "-"),
            }
        )
    return rows


def _domains_table(rows: list[dict[str, str]]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="ComputeDomains")
    table.add_column(
        "COMPUTEDOMAIN", min_width=_longest([r["name"] for r in rows]), overflow="fold"
    )
    table.add_column("STATUS", no_wrap=True)
    table.add_column("NODES READY/LISTED", overflow="fold")
    table.add_column("CLIQUE", overflow="fold")
    table.add_column("MESSAGE", overflow="fold")
    for r in rows:
        color = "green" if r["status"] == "Ready" else "yellow"
        table.add_row(
            escape(r["name"]),
            f"[{color}]{escape(r['status'])}[/{color}]",
            escape(r["nodes"]),
            escape(r["cliques"]),
            escape(r["message"]),
        )
    return table


def _events_table(groups: list[EventGroup], width: int, limit: int = 0) -> Any:
    """Events in the widest layout that keeps every id whole: TYPE, REASON, OBJECT and
    MESSAGE columns, MESSAGE given at least half the room and its longest word (a UUID stays
    on one line); where OBJECT would then cut an object's name, the object goes above its
    message in one column. Text wraps at spaces; only a word wider than the whole table
    folds."""
    from rich.markup import escape
    from rich.table import Table

    rows = [
        (
            g.type,
            clip(g.reason, limit) + (f" (x{g.count})" if g.count > len(g.objects) else ""),
            clip(g.who(), limit),
            clip(g.message, limit),
        )
        for g in groups
    ]
    reasons = _longest([r[1] for r in rows], 6)
    who = _longest([r[2] for r in rows], 6)
    texts = [r[3] for r in rows]
    messages = _longest(texts, 7)
    table = Table(title="Events")
    # explicit widths: rich, given a minimum width for OBJECT, drew tables wider than the
    # terminal
    room = width - _fixed_width([len("Warning"), reasons, 0, 0])
    wanted = max(min(messages, max(24, room // 2)), min(_longest_word(texts), room - 10))
    obj = min(who, room - wanted)
    table.add_column("TYPE", no_wrap=True, width=len("Warning"))
    table.add_column("REASON", overflow="fold", width=reasons)
    if obj >= _longest_word([r[2] for r in rows]):
        table.add_column("OBJECT", overflow="fold", width=obj)
        table.add_column("MESSAGE", overflow="fold", width=max(min(messages, room - obj), 1))
    else:
        table.add_column("OBJECT: MESSAGE", overflow="fold", width=max(room + 3, 1))
    for type_, reason, who_cell, message in rows:
        color = "red" if type_ == "Warning" else "white"
        cells = [f"[{color}]{escape(type_)}[/{color}]", escape(reason)]
        if len(table.columns) == 4:
            cells += [escape(who_cell), escape(message)]
        else:
            cells.append(f"[bold]{escape(who_cell)}[/bold]\n{escape(message)}")
        table.add_row(*cells)
    return table


def render(
    sim: SimContext,
    console: Console,
    *,
    max_pods: int = 40,
    max_events: int = 25,
    cell_limit: int | None = None,
) -> None:
    """The human summary: nodes like ``kubectl describe node``, pods, ComputeDomains, events.

    Names (nodes, pods) are never cut: at 80 columns ``default/time-slicing-ver…`` left every
    pod of a Deployment looking the same. Their columns keep their width; the others fold, and
    when too little room is left for the pods' DEVICES column, devices go under the pod name.
    Text from the scenario is printed literally, not as rich markup. Cells longer than
    ``cell_limit`` (default :data:`CELL_LIMIT`, 0: no limit, as ``-o wide``) are cut with a
    marker."""
    from rich.markup import escape
    from rich.table import Table

    limit = CELL_LIMIT if cell_limit is None else cell_limit
    title = sim.scenario.name + (
        f" — {sim.scenario.description}" if sim.scenario.description else ""
    )
    console.print(
        f"[bold]{escape(clip(title, limit))}[/bold]{clock_note(sim.now, ' (t={})')}",
        highlight=False,
    )
    shown_nodes = sim.nodes[:100]
    shares = gpu_shares(sim)
    node_width = _longest([clip(n.name, limit) for n in shown_nodes], 4)
    nodes = Table(title="Nodes")
    nodes.add_column("NODE", min_width=node_width, overflow="fold")
    nodes.add_column("CONFIG", overflow="fold")
    nodes.add_column("GPU RESOURCES USED/ALLOCATABLE", overflow="fold")
    nodes.add_column("PODS", no_wrap=True)
    for n in shown_nodes:
        head = escape(clip(n.name, limit)) + ("" if n.ready else " [red](NotReady)[/red]")
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
        lines = share_lines(shares.get(n.name))
        mps += "".join(f"\n[cyan]{escape(clip(line, limit))}[/cyan]" for line in lines)
        summary = gpu_summary(n)
        nodes.add_row(
            head,
            escape(clip(config, limit)),
            ("" if lines and summary == "-" and not n.mps else escape(clip(summary, limit)))
            + (mps[1:] if lines and summary == "-" and not n.mps else mps),
            f"{len(n.pods)}/{n.allocatable.get('pods', 0)}",
        )
    console.print(nodes)
    if len(sim.nodes) > 100:
        console.print(
            f"... and {len(sim.nodes) - 100:,} more nodes (-o summary counts them by group)"
        )
    records = sorted(sim.pods.values(), key=lambda r: r.seq)
    console.print(_pods_table(records[:max_pods], console.width, limit))
    if len(records) > max_pods:
        phases = Counter(r.phase for r in records)
        console.print(
            f"... {len(records) - max_pods} more pods; totals: "
            + ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
        )
    domains = domain_rows(sim)
    if domains:
        console.print(_domains_table(domains))
    groups = fold_events(sim.events)
    console.print(_events_table(groups[-max_events:], console.width, limit))
    earlier = len(groups) - max_events
    console.print(
        f"({len(sim.events)} events in all"
        + (f"; {earlier} earlier rows not shown" if earlier > 0 else "")
        + "; -o json lists every one)"
    )
    for w in sim.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(clip(w, limit))}", highlight=False)


def _used(node: SimNode, resource: str) -> str:
    used = format_units(resource, node.requested.get(resource, 0))
    return f"{used}/{format_units(resource, node.allocatable.get(resource, 0))}"


def _short(device_id: str) -> str:
    """``GPU-1b2c...::3`` -> ``GPU-1b2c3d4e::3``: enough to tell devices apart in a narrow
    table (from :data:`FULL_IDS_WIDTH` columns on, ids are whole)."""
    head, replica = split_replica(device_id)
    if head.startswith(("GPU-", "MIG-")) and len(head) > 12:
        head = head[:12]
    return head if replica is None else replica_id(head, replica)


#: Rows of events one ``--watch`` step shows at most: the first few (what the step did) and
#: the last ones (how it ended).
STEP_EVENT_ROWS = (3, 7)


def render_steps(snapshots: list[dict[str, Any]], console: Console) -> None:
    """One table per step: what each node has allocated and how the pods stand, then the
    step's events, folded as :func:`fold_events` folds them."""
    for i, snap in enumerate(snapshots):
        render_step(snap, i, console)


def render_step(
    snap: dict[str, Any], i: int, console: Console, *, cell_limit: int | None = None
) -> None:
    """Snapshot ``i`` (0: the initial state, then ``steps[i - 1]``) as :func:`render_steps`
    shows it; ``kgpu sim --watch`` prints each as soon as its step has run.

    Cells longer than ``cell_limit`` (default :data:`CELL_LIMIT`; ``-o wide`` passes none)
    are cut with a marker saying how much is left out, so what a step prints grows with the
    cluster, not with the length of a name in the scenario."""
    from rich.markup import escape
    from rich.table import Table

    limit = CELL_LIMIT if cell_limit is None else cell_limit

    def fit(text: str) -> str:
        return escape(clip(text, limit))

    where = snap["title"] if i == 0 else f"steps[{i - 1}]  {snap['title']}"
    table = Table(title=fit(where + clock_note(snap["time"], "  t={}")))
    shown = snap["nodes"][:STEP_NODE_ROWS]
    table.add_column(
        "NODE", min_width=min(limit, _longest([n["name"] for n in shown])), overflow="fold"
    )
    gpus = {
        n["name"]: clip(_with_shares(_json_gpu_summary(n), n.get("shares")), limit) for n in shown
    }
    names = _longest([clip(n["name"], limit) for n in shown], 4)
    gpu_width = _longest([x for g in gpus.values() for x in g.split("\n")], 16)
    # long share lines fold rather than squeeze the node names out
    gpu_width = min(gpu_width, max(16, console.width - _fixed_width([names, 0, 4, 8])))
    # what is left for LABELS; a label longer than that breaks after its "=", not mid-word
    room = console.width - _fixed_width([names, gpu_width, 4, 0])
    table.add_column("GPU RESOURCES USED/ALLOCATABLE", overflow="fold", width=gpu_width)
    table.add_column("PODS", no_wrap=True)
    table.add_column("LABELS", overflow="fold", width=max(room, 8))
    for n in shown:
        labels = [clip(f"{k}={v}", limit) for k, v in n["labels"].items() if k in STEP_LABELS]
        table.add_row(
            fit(n["name"]) + ("" if n["ready"] else " (NotReady)"),
            escape(gpus[n["name"]]),
            str(len(n["pods"])),
            "\n".join(escape(x if len(x) <= room else x.replace("=", "=\n", 1)) for x in labels),
        )
    console.print(table)
    if len(snap["nodes"]) > len(shown):
        console.print(f"... and {len(snap['nodes']) - len(shown)} more nodes")
    console.print(
        "pods: " + (", ".join(f"{k} {v}" for k, v in sorted(snap["phases"].items())) or "none")
    )
    groups = fold_events(
        Event(e["type"], e["reason"], e["object"], e["message"]) for e in snap["events"]
    )
    head, tail = STEP_EVENT_ROWS
    hidden = len(groups) - head - tail
    rows: list[EventGroup | None] = (
        [*groups[:head], None, *groups[-tail:]] if hidden > 0 else list(groups)
    )
    for g in rows:
        if g is None:
            console.print(f"  ... {hidden} more (-o json lists every one)")
            continue
        color = "red" if g.type == "Warning" else "dim"
        times = f" (x{g.count})" if g.count > 1 else ""
        console.print(
            f"  [{color}]{escape(g.type)} {escape(g.reason)}[/{color}]{times} "
            f"{fit(g.who())}: {fit(g.message)}",
            soft_wrap=True,
            highlight=False,
        )


#: Rows of nodes one ``--watch`` step shows at most (the count of the rest follows).
STEP_NODE_ROWS = 50
#: The node labels a ``--watch`` step shows: what the GPU stack set.
STEP_LABELS = (
    "nvidia.com/gpu.product",
    "nvidia.com/device-plugin.config",
    "nvidia.com/mig.config",
    "nvidia.com/mig.config.state",
    "nvidia.com/gpu.sharing-strategy",
)
#: Table cells (names, messages) longer than this are cut with a marker in ``table`` output;
#: ``-o wide`` and ``-o json`` keep them whole.
CELL_LIMIT = 200


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, the cut marked with how many were left out
    (``...[+1234 chars]``); ``limit`` 0 or less keeps it whole."""
    if limit <= 0 or len(text) <= limit:
        return text
    marker = f"...[+{len(text) - limit} chars]"
    return text[:limit] + marker


def clock_note(seconds: float, template: str) -> str:
    """``template`` with the simulated time filled in, or "" while the clock has not moved: a
    scenario without ``advance`` (the quickstart) happens in one instant, and a ``t=0s`` on
    every step would read as if time were missing rather than not passing."""
    return template.format(time_label(seconds)) if seconds else ""


def time_label(seconds: float) -> str:
    """A moment of the simulated clock for people: ``0s``, ``45s``, ``15m15s``, ``1h2m3s``."""
    whole = int(seconds)
    h, rem = divmod(whole, 3600)
    m, s = divmod(rem, 60)
    frac = seconds - whole
    sec = f"{s + frac:g}s" if frac else f"{s}s"
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + sec


def _json_gpu_summary(node: dict[str, Any]) -> str:
    """:func:`gpu_summary` read back from a node as :func:`node_json` wrote it."""
    cap, alloc, used = node["capacity"], node["allocatable"], node["allocated"]
    parts = []
    for r in sorted((set(cap) | set(used)) - set(HOST_RESOURCES)):
        note = f" (cap {cap.get(r, '0')})" if cap.get(r, "0") != alloc.get(r, "0") else ""
        parts.append(f"{r} {used.get(r, '0')}/{alloc.get(r, '0')}{note}")
    return "\n".join(parts) or "-"


# -- summary ----------------------------------------------------------------------------------

#: Rows of the summary's tables at most (the rest counted): workloads, event reasons.
SUMMARY_ROWS = 20


def _workload(rec: PodRecord) -> str:
    """``ReplicaSet/name`` of a pod's controller, or ``Pod`` for a bare pod."""
    owner = next(
        (o for o in rec.obj["metadata"].get("ownerReferences") or () if o.get("controller")), None
    )
    return f"{owner['kind']}/{owner['name']}" if owner else "(bare pods)"


def render_summary(sim: SimContext, console: Console, *, cell_limit: int | None = None) -> None:
    """``kgpu sim -o summary``: a cluster too large to print, in three short tables: node
    groups (nodes Ready of all, GPU resources used of allocatable, pods), pods per workload and
    phase, and events per type and reason. Its size depends on the number of groups,
    workloads and reasons, not on the number of nodes or pods."""
    from rich.markup import escape
    from rich.table import Table

    limit = CELL_LIMIT if cell_limit is None else cell_limit

    def fit(text: str) -> str:
        return escape(clip(text, limit))

    title = sim.scenario.name + (
        f" — {sim.scenario.description}" if sim.scenario.description else ""
    )
    console.print(f"[bold]{fit(title)}[/bold]{clock_note(sim.now, ' (t={})')}", highlight=False)
    groups: dict[str, list[SimNode]] = {}
    for n in sim.nodes:
        groups.setdefault(n.group or n.name, []).append(n)
    table = Table(title=f"Node groups ({len(sim.nodes):,} nodes)")
    # the names' columns as wide as their longest word, where the terminal leaves room
    room = max(console.width - 50, 10)
    table.add_column("GROUP", overflow="fold", min_width=min(room, _longest_word(list(groups))))
    for name in ("MACHINE", "READY/NODES", "GPU RESOURCES USED/ALLOCATABLE", "PODS"):
        table.add_column(name, overflow="fold")
    for name, members in sorted(groups.items()):
        used: Counter[str] = Counter()
        alloc: Counter[str] = Counter()
        for n in members:
            for r in _extended(n):
                used[r] += n.requested.get(r, 0)
                alloc[r] += n.allocatable.get(r, 0)
        machines = sorted({n.machine.profile for n in members if n.machine is not None})
        table.add_row(
            fit(name),
            fit(", ".join(machines) or "-"),
            f"{sum(1 for n in members if n.ready):,}/{len(members):,}",
            "\n".join(fit(f"{r} {used[r]:,}/{alloc[r]:,}") for r in sorted(alloc)) or "-",
            f"{sum(len(n.pods) for n in members):,}",
        )
    console.print(table)
    by_workload: dict[str, Counter[str]] = {}
    for rec in sim.pods.values():
        by_workload.setdefault(_workload(rec), Counter())[rec.phase] += 1
    # a phase column only where some pod is in it: more room for whole names
    seen = {p for counts in by_workload.values() for p in counts}
    phases = [p for p in ("Running", "Pending", "Succeeded", "Failed") if p in seen] or ["Running"]
    pods = Table(title=f"Pods ({len(sim.pods):,})")
    names = [clip(name, limit) for name in by_workload]
    fixed = _fixed_width([len(p) for p in phases]) + 3
    pods.add_column(
        "WORKLOAD (CONTROLLER)",
        overflow="fold",
        min_width=max(min(console.width - fixed, _longest_word(names)), 10),
    )
    for phase in phases:
        pods.add_column(phase.upper(), justify="right", no_wrap=True)
    ranked = sorted(by_workload.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    for name, counts in ranked[:SUMMARY_ROWS]:
        pods.add_row(fit(name), *(f"{counts[p]:,}" for p in phases))
    console.print(pods)
    if len(ranked) > SUMMARY_ROWS:
        console.print(f"... and {len(ranked) - SUMMARY_ROWS:,} more workloads")
    reasons: Counter[tuple[str, str]] = Counter()
    for e in sim.events:
        reasons[(e.type, e.reason)] += e.count
    events = Table(title=f"Events ({len(sim.events):,} recorded)")
    for name in ("TYPE", "REASON", "COUNT"):
        events.add_column(name, overflow="fold")
    for (type_, reason), count in reasons.most_common(SUMMARY_ROWS):
        events.add_row(escape(type_), fit(reason), f"{count:,}")
    console.print(events)
    if len(reasons) > SUMMARY_ROWS:
        console.print(f"... and {len(reasons) - SUMMARY_ROWS:,} more reasons")
    for w in sim.warnings[:SUMMARY_ROWS]:
        console.print(f"[yellow]warning:[/yellow] {fit(w)}", highlight=False)
