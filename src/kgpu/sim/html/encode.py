"""The picture's frames, packed for the page script: a 1,000-node run with eight steps must stay
a file one opens, not tens of megabytes.

Three things repeat and are stored once: what a node's GPUs look like (a *layout*: products,
modes, MIG placements, replica counts; every node of a group usually shares one), what a node
is (a *shape*: its name, group and GPU UUIDs, plus its layout), and a node's whole state in a
step when it did not change since an earlier step. Strings are numbered in one table, pod names
are split into a shared prefix (``default/web-7d4b9c-``) and their own suffix, and a GPU or
device with nothing on it is written as ``0``. ``report.js`` (``expand``) rebuilds each node as
:mod:`kgpu.sim.html.capture` documents it; MIG device UUIDs and device-plugin device UUIDs stay
out of the page (the GPU's UUID is in each cell's tooltip).

Packed form (``-1`` is "none" wherever an index is expected)::

    {"strings": [str], "prefixes": [str], "pods": [[prefix, suffix, workload]],
     "workloads": [[name, fill]],
     "layouts": [[[index, product, memoryMiB, mode, slices,
                   [[start, size, profile, resource, sharing, replicas], ...], note], ...]],
     "shapes": [[name, group, clique, machine, layout, [gpu uuid, ...]]],
     "states": [[shape, flags (1 Ready, 2 cordoned), pods, config, migConfig,
                 [[domain, device, pod, claim], ...],      # ComputeDomain channels
                 [0 | [unhealthy, xid, [0 | [unhealthy, claim, pod, ...], ...]], ...]]],
     "frames": [{..., "nodes": [state, ...]}]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kgpu.sim.html.colors import assign

Obj = dict[str, Any]

#: Frame keys the page reads besides ``nodes``.
FRAME_KEYS = ("title", "time", "phases", "events", "eventCount", "groups", "pending", "warnings")


class _Interned:
    """Values numbered in first-seen order (``None`` is -1)."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[str, int] = {}

    def __call__(self, value: Any) -> int:
        if value is None:
            return -1
        key = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.items)
            self.items.append(value)
        return found


def _split_pod(key: str) -> tuple[str, str]:
    """``default/web-7d4b9c-x2x9q`` -> (``default/web-7d4b9c-``, ``x2x9q``)."""
    head, sep, tail = key.rpartition("-")
    return (head + sep, tail) if sep else ("", key)


def pack(picture: Mapping[str, Any], colors: Mapping[str, str] | None = None) -> Obj:
    """The packed form of a picture (see the module docstring). ``colors`` gives workloads
    their fills (default: :func:`~kgpu.sim.html.colors.assign` over them)."""
    workload_of: dict[str, str] = {}
    for frame in picture.get("frames", ()):
        workload_of.update(frame.get("workloads") or {})
    names = sorted(set(workload_of.values()))
    wl_index = {name: i for i, name in enumerate(names)}
    strings, prefixes, layouts, shapes, states = (_Interned() for _ in range(5))
    pods: list[list[Any]] = []
    pod_index: dict[str, int] = {}

    def pod(key: str | None) -> int:
        if key is None:
            return -1
        found = pod_index.get(key)
        if found is None:
            found = pod_index[key] = len(pods)
            name = workload_of.get(key) or f"Pod {key}"
            if name not in wl_index:
                wl_index[name] = len(names)
                names.append(name)
            head, tail = _split_pod(key)
            pods.append([prefixes(head), tail, wl_index[name]])
        return found

    def device_state(d: Mapping[str, Any]) -> Any:
        slots = [pod(s) for s in d["slots"]]
        if not d.get("unhealthy") and not d.get("claim") and all(s < 0 for s in slots):
            return 0
        return [int(bool(d.get("unhealthy"))), strings(d.get("claim")), *slots]

    def gpu_state(c: Mapping[str, Any]) -> Any:
        devices = [device_state(d) for d in c["devices"]]
        if not c.get("unhealthy") and not c.get("xid") and not any(devices):
            return 0
        return [int(bool(c.get("unhealthy"))), int(c.get("xid") or 0), devices]

    def node_state(node: Mapping[str, Any]) -> int:
        layout = [
            [
                c["index"],
                strings(c["product"]),
                c["memoryMiB"],
                strings(c["mode"]),
                c["slices"],
                [
                    [
                        d["start"],
                        d["size"],
                        strings(d.get("profile")),
                        strings(d.get("resource")),
                        strings(d.get("sharing")),
                        len(d["slots"]),
                    ]
                    for d in c["devices"]
                ],
                strings(c.get("note")),
            ]
            for c in node["gpus"]
        ]
        shape = [
            strings(node["name"]),
            strings(node["group"]),
            strings(node.get("clique") or None),
            strings(node.get("machine")),
            layouts(layout),
            [c["uuid"] for c in node["gpus"]],
        ]
        flags = (1 if node.get("ready") else 0) | (2 if node.get("unschedulable") else 0)
        state = [
            shapes(shape),
            flags,
            node.get("pods", 0),
            strings(node.get("config")),
            strings(node.get("migConfig")),
            [
                [
                    strings(ch.get("domain")),
                    strings(ch["device"]),
                    pod(ch.get("pod")),
                    strings(ch.get("claim")),
                ]
                for ch in node.get("channels", ())
            ],
            [gpu_state(c) for c in node["gpus"]],
        ]
        return states(state)

    frames = []
    for frame in picture.get("frames", ()):
        refs = [node_state(n) for n in frame.get("nodes", ())]
        frames.append({k: frame.get(k) for k in FRAME_KEYS} | {"nodes": refs})
    palette = {**assign(names), **(colors or {})}
    return {
        "kind": picture.get("kind", "sim"),
        "strings": strings.items,
        "prefixes": prefixes.items,
        "pods": pods,
        "workloads": [[name, palette[name]] for name in names],
        "layouts": layouts.items,
        "shapes": shapes.items,
        "states": states.items,
        "frames": frames,
    }
