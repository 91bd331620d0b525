"""API requests kgpu costs the Kubernetes API server, counted by the API-server stand-in.

    python bench/api.py [--nodes 4] [--idle 30] [--claims 20] [--cluster-nodes 200] [--json]

1. **Agent** (the DRA component's store usage, the part of ``kgpu agent`` that talks to the API
   server): ``--nodes`` GB200 trays, each a real :class:`~kgpu.drivers.dra.DraComponent` with
   its own :class:`~kgpu.cluster.kube.KubeStore` (default rate limit, user agent
   ``kgpu-agent/<node>``) against the stand-in (``kgpu.testing.apiserver``, Kubernetes 1.34).
   Phases, each counted per node from the stand-in's request record:

   * *start*: the drivers register and publish their ResourceSlices;
   * *join*: every node prepares a channel and an IMEX daemon claim of one ComputeDomain that
     spans all of them (what a multi-node job does);
   * *idle*: ``--idle`` seconds with nothing happening;
   * *claim storm*: every node prepares and unprepares ``--claims`` GPU claims in a row, as the
     kubelet's NodePrepareResources/NodeUnprepareResources would.

   Open watches are listed per node: at idle they are the only cost (a watch is one request
   when opened and again when the server ends it: kgpu asks for 5-10 minutes, client-go's
   reflector timeout, i.e. 1 request per 7.5 minutes per watch on average; bookmarks travel on
   the open stream and are not requests).

2. **ComputeDomain reconcile, full pass** (:func:`kgpu.computedomain.reconcile.reconcile`, what
   the simulator's controller loop runs): ``--cluster-nodes`` nodes, two domains; requests per
   pass in steady state with a plain ``KubeStore`` (every pass lists every kind).

3. **``kgpu controller``** (:class:`kgpu.controller.Controller`, informers, work queue, Lease with
   client-go's default timings): ``--cluster-nodes`` nodes in two cliques and ``--domains``
   ComputeDomains already there; requests at start, at idle (``--controller-idle`` seconds), and
   per domain event: a domain created, a node joining it (its agent labels the Node, its daemon
   pod runs), a second node joining (the domain is Ready), a node failing, the domain deleted.
   Counted from the stand-in's record for user agent ``kgpu-controller/...`` until the
   controller is quiet again.

4. **Before**: the ComputeDomain driver's background sync before this change, from its code
   (commit 49c105e, ``drivers/dra.py`` + ``drivers/computedomain.py``): every 2 s, per IMEX
   domain hosted, ``GET`` its own Node and ``LIST`` all Nodes.

Figures are scaled to 5,000 nodes and compared with what one kube-apiserver serves (see
BENCHMARKS.md for the assumption and its sources).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kgpu.cluster.kube import KubeStore
from kgpu.computedomain.api import API_VERSION as CD_API
from kgpu.computedomain.api import CLIQUE_LABEL, DOMAIN_LABEL
from kgpu.computedomain.reconcile import reconcile
from kgpu.controller import Controller, ControllerOptions
from kgpu.dra.classes import device_classes
from kgpu.drivers.computedomain import compute_domain_driver
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.store import Obj
from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig
from kgpu.testing.manifests import compute_domain

REPO = Path(__file__).resolve().parents[1]
DRA = "resource.k8s.io/v1"
CLIQUE = "c0ffee00-0000-4000-8000-000000000001.0"
CD_DRIVER = "compute-domain.nvidia.com"
NODES_AT_SCALE = 5000
WATCH_RENEWALS_PER_MIN = 1 / 7.5  # one re-opened watch per 5-10 minutes, 7.5 on average


def node(name: str, ip: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {CLIQUE_LABEL: CLIQUE}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def claim(name: str, node_name: str, driver: str, device: str, config: Obj | None = None) -> Obj:
    request = "r"
    devices: Obj = {
        "results": [{"request": request, "driver": driver, "pool": node_name, "device": device}]
    }
    if config is not None:
        devices["config"] = [
            {
                "source": "FromClaim",
                "requests": [request],
                "opaque": {"driver": driver, "parameters": config},
            }
        ]
    return {
        "apiVersion": DRA,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": devices}},
    }


class Meter:
    """Requests per node (by user agent) between marks."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self.mark = 0

    def take(self) -> list[Any]:
        reqs = self.server.requests[self.mark :]
        self.mark = len(self.server.requests)
        return reqs

    @staticmethod
    def per_node(reqs: list[Any], nodes: list[str]) -> dict[str, Any]:
        counts = {n: Counter() for n in nodes}  # type: dict[str, Counter[str]]
        for r in reqs:
            agent = r.user_agent.removeprefix("kgpu-agent/")
            if agent in counts:
                key = f"{r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''}"
                counts[agent][key if r.resource else f"discovery {r.path}"] += 1
        totals = [sum(c.values()) for c in counts.values()]
        merged: Counter[str] = Counter()
        for c in counts.values():
            merged.update(c)
        return {
            "per_node_mean": round(sum(totals) / len(totals), 2),
            "per_node_max": max(totals),
            "by_verb_per_node": {k: round(v / len(nodes), 2) for k, v in sorted(merged.items())},
        }


def bench_agent(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    server = FakeApiServer(bookmark_interval_s=60.0).start()
    admin = KubeStore.from_config(
        str(write_kubeconfig(root / "admin", server.url)), qps=None, user_agent="bench-admin"
    )
    names = [f"tray-{i}" for i in range(args.nodes)]
    for i, name in enumerate(names):
        admin.create(node(name, f"10.0.0.{i + 1}"))
    for cls in device_classes():
        admin.create(cls)
    domain = admin.create(compute_domain("job", args.nodes, namespace="ml", channel="c"))
    uid = domain["metadata"]["uid"]
    meter = Meter(server)
    meter.take()

    components: dict[str, DraComponent] = {}
    stores = []
    t0 = time.monotonic()
    for name in names:
        store = KubeStore.from_config(
            str(write_kubeconfig(root / f"kc-{name}", server.url)), user_agent=f"kgpu-agent/{name}"
        )
        stores.append(store)
        machine = load_machine("gb200", hostname=name, clique=CLIQUE)
        component = DraComponent(
            root / name / "kubelet",
            root / name / "cdi",
            name,
            SimulatedBackend(machine),
            store,
            driver_factories=(compute_domain_driver,),
        )
        component.start()
        components[name] = component
    start = meter.per_node(meter.take(), names)
    start["seconds"] = round(time.monotonic() - t0, 2)

    # join: one channel + one daemon claim per node, of one domain
    refs: dict[str, list[ClaimRef]] = {}
    for name in names:
        channel = {"apiVersion": CD_API, "kind": "ComputeDomainChannelConfig", "domainID": uid}
        daemon = {"apiVersion": CD_API, "kind": "ComputeDomainDaemonConfig", "domainID": uid}
        refs[name] = []
        for what, device, config in (("ch", "channel-0", channel), ("d", "daemon-0", daemon)):
            made = admin.create(claim(f"{name}-{what}", name, CD_DRIVER, device, config))
            refs[name].append(ClaimRef("ml", made["metadata"]["uid"], made["metadata"]["name"]))
    meter.take()  # the admin's claim writes
    for name in names:
        for ref in refs[name]:
            result = components[name].plugins[CD_DRIVER].prepare([ref])[ref.uid]
            assert not result.error, result.error
    time.sleep(1.0)  # let every node's watches see every label
    join = meter.per_node(meter.take(), names)

    configs = sorted(root.rglob(f"domains/{uid}/nodes_config.cfg"))
    peers = [len(p.read_text().split()) for p in configs]

    # idle
    t0 = time.monotonic()
    time.sleep(args.idle)
    idle = meter.per_node(meter.take(), names)
    idle["seconds"] = round(time.monotonic() - t0, 1)
    watches = {
        name: sorted(i.scope.describe() for i in c.store.informers.informers())
        for name, c in components.items()
    }

    # claim storm
    made_claims: dict[str, list[ClaimRef]] = {}
    for name in names:
        made_claims[name] = []
        for k in range(args.claims):
            made = admin.create(claim(f"{name}-gpu-{k}", name, "gpu.nvidia.com", f"gpu-{k % 4}"))
            made_claims[name].append(
                ClaimRef("ml", made["metadata"]["uid"], made["metadata"]["name"])
            )
    meter.take()
    t0 = time.monotonic()
    for name in names:
        plugin = components[name].plugins["gpu.nvidia.com"]
        for ref in made_claims[name]:
            result = plugin.prepare([ref])[ref.uid]
            assert not result.error, result.error
            plugin.unprepare([ref])
    storm = meter.per_node(meter.take(), names)
    storm["seconds"] = round(time.monotonic() - t0, 2)
    storm["claims_per_node"] = args.claims
    storm["per_claim"] = round(storm["per_node_mean"] / args.claims, 2)

    for c in components.values():
        c.stop()
    for s in stores:
        s.close()
    admin.close()
    server.stop()
    open_watches = max(len(w) for w in watches.values())
    renewals = round(open_watches * WATCH_RENEWALS_PER_MIN, 3)
    return {
        "nodes": args.nodes,
        "start": start,
        "join": join,
        "nodes_config_peers": peers,
        "idle": idle,
        "watches_per_node": watches,
        "idle_requests_per_node_per_min_watch_renewals": renewals,
        "storm": storm,
    }


def bench_reconcile(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    server = FakeApiServer(bookmark_interval_s=60.0, validate=False).start()
    kc = str(write_kubeconfig(root / "controller", server.url))
    admin = KubeStore.from_config(kc, qps=None, user_agent="bench-admin")
    names = [f"n{i:04d}" for i in range(args.cluster_nodes)]
    for i, name in enumerate(names):
        admin.create(node(name, f"10.1.{i // 250}.{i % 250 + 1}"))
    for d in ("a", "b"):
        admin.create(compute_domain(d, 4, namespace="ml"))
    out: dict[str, Any] = {"cluster_nodes": args.cluster_nodes, "domains": 2}
    for mode in ("plain",):
        store: Any = KubeStore.from_config(kc, qps=None, user_agent=f"kgpu-controller/{mode}")
        for _ in range(3):  # reach the steady state (objects created, status written)
            reconcile(store)
            time.sleep(0.3)
        mark = len(server.requests)
        passes = 5
        for _ in range(passes):
            reconcile(store)
            time.sleep(0.3)
        reqs = [r for r in server.requests[mark:] if r.user_agent.startswith("kgpu-controller")]
        by = Counter(f"{r.verb} {r.resource}" for r in reqs)
        out[mode] = {
            "requests_per_pass": round(len(reqs) / passes, 2),
            "by_verb_per_pass": {k: round(v / passes, 2) for k, v in sorted(by.items())},
        }
        store.close()
    admin.close()
    server.stop()
    return out


def _quiet(server: FakeApiServer, ctl: Controller, agent: str, quiet_s: float = 0.5) -> None:
    """Wait until the controller's queue is empty and it sent nothing for ``quiet_s``."""
    deadline = time.monotonic() + 60
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        mine = sum(1 for r in server.requests if r.user_agent.startswith(agent))
        busy = len(ctl.queue) or ctl.queue.waiting()
        if mine != seen or busy:
            seen, since = mine, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.05)


def _count(reqs: list[Any], agent: str, lease_only: bool = False) -> dict[str, Any]:
    mine = [r for r in reqs if r.user_agent.startswith(agent)]
    by = Counter(
        f"{r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''}" for r in mine
    )
    work = {k: v for k, v in by.items() if k != "update leases"}
    return {
        "requests": len(mine),
        "without_lease_renewals": sum(work.values()),
        "by_verb": dict(sorted(by.items())),
    }


def bench_controller(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    server = FakeApiServer(bookmark_interval_s=60.0, validate=False).start()
    kc = str(write_kubeconfig(root / "ctl", server.url))
    admin = KubeStore.from_config(kc, qps=None, user_agent="bench-admin")
    cliques = [CLIQUE, CLIQUE.replace(".0", ".1")]
    names = [f"n{i:04d}" for i in range(args.cluster_nodes)]
    for i, name in enumerate(names):
        obj = node(name, f"10.1.{i // 250}.{i % 250 + 1}")
        obj["metadata"]["labels"][CLIQUE_LABEL] = cliques[i % 2]
        admin.create(obj)
    for d in range(args.domains):
        admin.create(compute_domain(f"bg-{d}", 0, namespace="ml"))
    agent = "kgpu-controller/bench"
    # kgpu controller's default client-side limit (kube-controller-manager's): 20 QPS / burst 30
    store = KubeStore.from_config(kc, user_agent=agent, qps=20.0, burst=30)
    ctl = Controller(store, ControllerOptions(namespace="kgpu-system", identity="bench"))
    t0 = time.monotonic()
    ctl.start()
    while not ctl.leading and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    _quiet(server, ctl, agent)
    out: dict[str, Any] = {
        "cluster_nodes": args.cluster_nodes,
        "domains_before": args.domains,
        "start": {**_count(server.requests, agent), "seconds": round(time.monotonic() - t0, 2)},
        "watches": sorted(i.scope.describe() for i in ctl.informers.informers()),
    }
    mark = len(server.requests)
    t0 = time.monotonic()
    time.sleep(args.controller_idle)
    idle = _count(server.requests[mark:], agent)
    idle["seconds"] = round(time.monotonic() - t0, 1)
    out["idle"] = idle

    events: dict[str, Any] = {}

    def measure(name: str, act: Any) -> None:
        mark = len(server.requests)
        syncs = ctl.domains.syncs
        t0 = time.monotonic()
        act()
        _quiet(server, ctl, agent)
        events[name] = {
            **_count(server.requests[mark:], agent),
            "syncs": ctl.domains.syncs - syncs,
            "seconds": round(time.monotonic() - t0, 2),
        }

    def create() -> None:
        admin.create(compute_domain("job", 2, namespace="ml"))

    measure("domain created", create)
    uid = admin.get(CD_API, "ComputeDomain", "job", "ml")["metadata"]["uid"]

    def join(i: int) -> Any:
        def act() -> None:
            name = names[2 * i]  # same clique
            admin.patch(
                "v1", "Node", name, {"metadata": {"labels": {f"{DOMAIN_LABEL}.{uid}": "true"}}}
            )
            pod = admin.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"daemon-{i}",
                        "namespace": "kgpu-system",
                        "labels": {DOMAIN_LABEL: uid},
                    },
                    "spec": {"nodeName": name, "containers": [{"name": "c", "image": "i"}]},
                }
            )
            pod["status"] = {"phase": "Running", "podIP": f"192.168.0.{i + 1}"}
            admin.update(pod)

        return act

    measure("node joins", join(0))
    measure("second node joins (Ready)", join(1))

    def fail() -> None:
        admin.patch(
            "v1",
            "Node",
            names[0],
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            subresource="status",
        )

    measure("node fails", fail)
    measure("domain deleted", lambda: admin.delete(CD_API, "ComputeDomain", "job", "ml"))
    out["events"] = events
    status = admin.list(CD_API, "ComputeDomain")
    out["background_domains_with_status"] = sum(1 for d in status if d.get("status"))
    ctl.stop()
    store.close()
    admin.close()
    server.stop()
    return out


BASELINE_AGENT = """
import json, sys, time
from pathlib import Path
from kgpu.cluster.kube import KubeStore
from kgpu.drivers.computedomain import compute_domain_driver
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.dra.handler import ClaimRef
kubeconfig, root, name, clique, refs, idle = sys.argv[1:7]
store = KubeStore.from_config(kubeconfig)
store._api.user_agent = "kgpu-agent/" + name
machine = load_machine("gb200", hostname=name, clique=clique)
c = DraComponent(Path(root) / "kubelet", Path(root) / "cdi", name, SimulatedBackend(machine),
                 store, driver_factories=(compute_domain_driver,))
c.start()
for ns, uid, claim in json.loads(refs):
    ref = ClaimRef(ns, uid, claim)
    assert not c.plugins["compute-domain.nvidia.com"].prepare([ref])[ref.uid].error
print("ready", flush=True)
time.sleep(float(idle))
c.stop()
"""


def bench_baseline(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The agent of ``--baseline`` (a commit of this repository) against the same stand-in:
    one GB200 node holding a channel and a daemon claim of one domain, idle."""
    src = root / "baseline"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", args.baseline, "src"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    server = FakeApiServer(bookmark_interval_s=60.0).start()
    admin = KubeStore.from_config(
        str(write_kubeconfig(root / "base-admin", server.url)), qps=None, user_agent="bench-admin"
    )
    names = [f"tray-{i}" for i in range(4)]
    for i, name in enumerate(names):
        admin.create(node(name, f"10.0.0.{i + 1}"))
    domain = admin.create(compute_domain("job", 4, namespace="ml", channel="c"))
    uid = domain["metadata"]["uid"]
    refs = []
    for what, device, kind in (
        ("ch", "channel-0", "ComputeDomainChannelConfig"),
        ("d", "daemon-0", "ComputeDomainDaemonConfig"),
    ):
        config = {"apiVersion": CD_API, "kind": kind, "domainID": uid}
        made = admin.create(claim(f"{what}", names[0], CD_DRIVER, device, config))
        refs.append(["ml", made["metadata"]["uid"], made["metadata"]["name"]])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            BASELINE_AGENT,
            str(write_kubeconfig(root / "base-agent", server.url)),
            str(root / "base-root"),
            names[0],
            CLIQUE,
            json.dumps(refs),
            str(args.idle),
        ],
        env={**os.environ, "PYTHONPATH": str(src / "src")},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    meter = Meter(server)
    meter.take()
    t0 = time.monotonic()
    proc.wait()
    seconds = time.monotonic() - t0
    idle = meter.per_node(meter.take(), names[:1])
    admin.close()
    server.stop()
    return {
        "commit": args.baseline,
        "idle_seconds": round(seconds, 1),
        "idle_requests": idle["per_node_mean"],
        "idle_requests_per_min": round(idle["per_node_mean"] / seconds * 60, 1),
        "by_verb": idle["by_verb_per_node"],
    }


def before(args: argparse.Namespace) -> dict[str, Any]:
    per_domain_per_min = 2 * 60 / 2  # GET own Node + LIST all Nodes, every 2 s
    return {
        "source": "code at 49c105e: DraComponent._sync_loop every 2 s -> ComputeDomainHandler."
        "sync_daemons -> per daemon domain _peer_ips (GET Node + LIST all Nodes)",
        "requests_per_node_per_min_per_domain": per_domain_per_min,
        "lists_of_all_nodes_per_s_at_5000_nodes": NODES_AT_SCALE / 2,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--claims", type=int, default=20)
    ap.add_argument("--cluster-nodes", type=int, default=200)
    ap.add_argument("--domains", type=int, default=20, help="domains there before the controller")
    ap.add_argument("--controller-idle", type=float, default=30.0)
    ap.add_argument("--only", choices=("agent", "reconcile", "controller"), default=None)
    ap.add_argument(
        "--baseline",
        default="",
        help="also run the agent of this commit (e.g. 49c105e, before informers) idle",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kb", dir="/tmp"))  # short: unix socket paths
    try:
        if args.only == "controller":
            result = {"controller": bench_controller(args, root)}
            print(json.dumps(result, indent=2))
            return
        agent = bench_agent(args, root)
        controller = bench_reconcile(args, root)
        ctl = bench_controller(args, root)
        baseline = bench_baseline(args, root) if args.baseline else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    idle_min = agent["idle"]["per_node_mean"] / agent["idle"]["seconds"] * 60
    renew = agent["idle_requests_per_node_per_min_watch_renewals"]
    result = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d"),
        "agent": agent,
        "reconcile": controller,
        "controller": ctl,
        "before": before(args),
        "baseline_measured": baseline,
        "at_5000_nodes": {
            "idle_req_per_s_measured": round(idle_min * NODES_AT_SCALE / 60, 2),
            "idle_req_per_s_with_watch_renewals": round(
                (idle_min + renew) * NODES_AT_SCALE / 60, 2
            ),
            "storm_req_per_claim": agent["storm"]["per_claim"],
            "before_req_per_s_one_domain_per_node": round(60 * NODES_AT_SCALE / 60, 0),
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    a = result["agent"]
    print(f"agent, {a['nodes']} gb200 nodes (requests per node):")
    for phase in ("start", "join", "idle", "storm"):
        p = a[phase]
        mean, top, verbs = p["per_node_mean"], p["per_node_max"], p["by_verb_per_node"]
        print(f"  {phase:6s} mean {mean:6}  max {top:4}  {verbs}")
    first = next(iter(a["watches_per_node"].values()))
    print(f"  idle window {a['idle']['seconds']} s; open watches per node: {first}")
    print(f"  watch renewals: {renew} req/node/min; storm: {a['storm']['per_claim']} req per claim")
    r = result["reconcile"]
    print(f"reconcile full pass, {r['cluster_nodes']} nodes, {r['domains']} domains: {r['plain']}")
    c = result["controller"]
    print(f"controller, {c['cluster_nodes']} nodes, {c['domains_before']} domains before:")
    print(f"  start {c['start']}")
    print(f"  idle  {c['idle']}")
    for name, e in c["events"].items():
        print(f"  {name:28s} {e}")
    print(f"before: {result['before']}")
    if baseline is not None:
        print(f"baseline measured: {baseline}")
    print(f"at 5,000 nodes: {result['at_5000_nodes']}")


if __name__ == "__main__":
    main()
