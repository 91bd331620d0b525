"""The node side of driver ``compute-domain.nvidia.com``: a :class:`DriverHandler` for the
agent's DRA kubelet-plugin framework (the simulator's kubelets use the same class).

Preparing a *channel* claim gives the claim's domain an IMEX channel on this node (one per
domain, never shared between domains), labels the node for the domain so that the domain's
DaemonSet starts an IMEX daemon here (as upstream's plugin does), and returns the CDI edits
that create ``/dev/nvidia-caps-imex-channels/channel<N>`` in the container (every channel of
the node for ``allocationMode: All``, which no other domain may then share). Preparing a
*daemon* claim writes, under ``<work_dir>/domains/<uid>/`` mounted at ``/imexd``, upstream's
IMEX config template ``imexd.cfg.tmpl``, ``nodes.cfg`` (the clique's daemon DNS names) and
``hosts`` (which IP each name has, from the domain's ComputeDomainClique in this clique, which
the controller keeps). The Kubernetes API is reached only through the object store; claim
state lives in the framework's checkpoint (``PreparedClaim.state``), so a restarted agent keeps
its channel numbers.

The daemon directory is the one place where the privileged agent and a pod share files, so:

- a daemon claim is prepared only in the controller's namespace (``daemon_namespace``: where
  the controller keeps the daemon claim templates; no tenant can create claims there) and only
  when the claim carries the domain label its template stamps, naming the same domain as its
  ``domainID`` (``compute-domain-daemon.nvidia.com`` is a cluster-wide class: without the
  check a claim in any namespace would get any domain's directory);
- the directory is created ``0750`` whatever the umask and mounted **read-only** at
  ``/imexd`` (the daemon writes its rendered config in its own filesystem);
- the agent only ever writes there, by a fresh temporary file renamed over the old name (a
  FIFO or a symlink left in the directory is replaced, never opened), and remembers what it
  wrote instead of reading the file back; so no lock is ever held across I/O a container can
  stall or inflate.

What the driver reads, and how (a fabric node of a 5,000-node cluster must not poll):

- the ComputeDomainClique of each domain whose IMEX daemon runs here, by label selector
  (``resource.nvidia.com/computeDomain=<uid>,resource.nvidia.com/computeDomain.cliqueID=
  <clique>``, one small object): with a :class:`~kgpu.store.CachedStore` one informer per such
  domain keeps it, and a change rewrites the daemon's ``hosts`` at once (no timer); with a
  plain store, one selected list when the daemon is prepared or
  :meth:`ComputeDomainHandler.sync_daemons` runs;
- ComputeDomains, to find a claim's domain by uid: with a cached store one informer while the
  node holds any claim of the driver, else a list per prepare;
- the domain's nodes in this clique (label selector
  ``resource.nvidia.com/computeDomain.<uid>=true,nvidia.com/gpu.clique=<clique>``), once when a
  channel is prepared, for the channel the domain already uses there;
- its own Node only when the clique is not known from the hardware.

Writes are merge patches of the keys the driver owns (the domain label, the channel
annotation), never whole-Node updates.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from kgpu.computedomain.api import (
    API_VERSION,
    CHANNEL_CONFIG_KIND,
    CLIQUE_ID_LABEL,
    CLIQUE_KIND,
    CLIQUE_LABEL,
    DAEMON_CONFIG_KIND,
    DOMAIN_LABEL,
    DRIVER,
    KIND,
    MAX_NODES_PER_IMEX_DOMAIN,
    ComputeDomain,
    DomainNode,
    node_label,
    parse_compute_domain,
)
from kgpu.computedomain.imex import (
    CDI_KIND,
    HOSTS,
    IMEX_CONFIG_DIR,
    IMEX_CONFIG_TEMPLATE,
    MAX_CHANNELS,
    NODES_CONFIG,
    ChannelsExhausted,
    assign_channel,
    cdi_device_name,
    channel_path,
    render_hosts,
    render_imex_config_template,
    render_nodes_config,
)
from kgpu.computedomain.objects import DRIVER_NAMESPACE
from kgpu.computedomain.placement import node_clique
from kgpu.computedomain.slices import DEFAULT_SLOTS, machine_clique, node_slice
from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.model import Machine
from kgpu.kubelet.cdi import ContainerEdits, DeviceNode, Mount, write_atomic
from kgpu.kubelet.dirs import ensure_directory
from kgpu.kubelet.dra.handler import (
    ClaimError,
    ClaimInfo,
    OpaqueConfig,
    PreparedClaim,
    PreparedDevice,
)
from kgpu.kubelet.dra.server import plugin_dir
from kgpu.store import CachedStore, Informer, NotFound, ObjectStore

log = logging.getLogger(__name__)

Obj = dict[str, Any]
#: Node annotation: the IMEX channel each domain uses on the node (JSON ``{uid: channel}``),
#: read by the domain's other nodes so that a domain keeps one channel index in its clique.
CHANNELS_ANNOTATION = "resource.nvidia.com/imexChannels"
#: The domain directory's mode (as NVIDIA's driver): the daemon container reads it as root.
DOMAIN_DIR_MODE = 0o750
_KINDS = {"channel": CHANNEL_CONFIG_KIND, "daemon": DAEMON_CONFIG_KIND}


def _device_type(device: str) -> str:
    return device.split("-", 1)[0]


def _parse_config(config: OpaqueConfig) -> tuple[str, str, str]:
    """(kind, domainID, allocationMode) of one opaque config, or a FieldError naming the field."""
    params = config.parameters
    if not isinstance(params, Mapping):
        raise FieldError(FieldProblem("must be an object", config.path))
    problems = []
    if params.get("apiVersion") != API_VERSION:
        problems.append(
            FieldProblem(
                f"must be {API_VERSION!r}, got {params.get('apiVersion')!r}",
                f"{config.path}.apiVersion",
            )
        )
    kind = params.get("kind")
    if kind not in _KINDS.values():
        problems.append(
            FieldProblem(
                f"must be {CHANNEL_CONFIG_KIND} or {DAEMON_CONFIG_KIND}, got {kind!r}",
                f"{config.path}.kind",
            )
        )
    domain = params.get("domainID")
    if not isinstance(domain, str) or not domain:
        problems.append(FieldProblem("cannot be empty", f"{config.path}.domainID"))
    mode = params.get("allocationMode", "Single") or "Single"
    if mode not in ("Single", "All"):
        problems.append(
            FieldProblem(f"must be Single or All, got {mode!r}", f"{config.path}.allocationMode")
        )
    for key in params:
        if key not in ("apiVersion", "kind", "domainID", "allocationMode"):
            problems.append(FieldProblem("unknown field", f"{config.path}.{key}"))
    if problems:
        raise FieldError(problems)
    return str(kind), str(domain), str(mode)


class ComputeDomainHandler:
    """Driver ``compute-domain.nvidia.com`` on one node (a ``DriverHandler``)."""

    driver = DRIVER
    cdi_kind = CDI_KIND

    def __init__(
        self,
        node_name: str,
        store: ObjectStore,
        work_dir: Path,
        *,
        clique: str | None = None,
        slots: int = DEFAULT_SLOTS,
        daemon_namespace: str = DRIVER_NAMESPACE,
    ) -> None:
        self.node_name = node_name
        self.daemon_namespace = daemon_namespace
        self.store = store
        self.work_dir = Path(work_dir)
        self.clique = clique
        self.slots = slots
        self._claims: dict[str, dict[str, Any]] = {}
        # domain uid -> the hosts text last written: never read back from the directory
        self._written: dict[str, str] = {}
        # The kubelet's gRPC calls and the informers' events run on different threads; one
        # lock keeps a daemon directory from being rewritten while it is removed.
        self._lock = threading.RLock()
        # with a caching store: domain uid -> (its nodes' informer, unsubscribe), and the
        # ComputeDomain informer held while the node has claims of this driver
        self._domain_nodes: dict[str, tuple[Informer, Callable[[], None]]] = {}
        self._domains: Informer | None = None

    # -- DriverHandler ------------------------------------------------------------------------
    def resource_slices(self, node_name: str) -> list[Obj]:
        if self._clique() is None:
            return []
        return [node_slice(node_name, slots=self.slots)]

    def restore(self, states: Mapping[str, Mapping[str, Any]]) -> None:
        with self._lock:
            self._claims = {uid: dict(state) for uid, state in states.items() if state}
            self._follow()

    def prepare(self, claim: ClaimInfo) -> PreparedClaim:
        with self._lock:
            try:
                return self._prepare(claim)
            finally:  # informers follow the claims held, whether this one was prepared or not
                self._follow()

    def _prepare(self, claim: ClaimInfo) -> PreparedClaim:
        if claim.uid in self._claims:  # called again after a crash: same answer, no new channel
            self.unprepare(claim.uid, self._claims[claim.uid])
        devices: list[PreparedDevice] = []
        state: dict[str, Any] = {}
        self._hold_domains(True)
        for result in claim.results:
            device = str(result.get("device", ""))
            request = str(result.get("request", ""))
            dtype = _device_type(device)
            if dtype not in _KINDS:
                raise ClaimError(f"unknown {DRIVER} device {device!r}")
            configs = [c for c in claim.configs if c.applies_to(request)]
            if not configs:
                raise ClaimError(
                    f"request {request!r}: no {_KINDS[dtype]} for driver {DRIVER}; claims for "
                    "IMEX channels and daemons come from a ComputeDomain's claim templates"
                )
            kind, domain_uid, mode = _parse_config(configs[-1])
            if kind != _KINDS[dtype]:
                raise ClaimError(f"device {device} is a {dtype} but its config is a {kind}")
            domain = self._domain(domain_uid)
            if dtype == "channel":
                if domain.namespace != claim.namespace:
                    raise ClaimError(
                        "the ResourceClaim's namespace is different than the "
                        "ComputeDomain's namespace"
                    )
                edits, state = self._prepare_channel(domain, mode)
            else:
                self._check_daemon_claim(claim, domain)
                edits, state = self._prepare_daemon(domain)
            devices.append(
                PreparedDevice(
                    requests=(request,),
                    pool=str(result.get("pool", self.node_name)),
                    device=device,
                    cdi_name=cdi_device_name(claim.uid, device),
                    edits=edits,
                )
            )
        self._claims[claim.uid] = state
        return PreparedClaim(devices=tuple(devices), state=state)

    def unprepare(self, claim_uid: str, state: Mapping[str, Any] | None) -> None:
        with self._lock:
            known = self._claims.pop(claim_uid, None)
            state = state or known
            if not state:
                return
            domain = str(state.get("domain", ""))
            same = [s for s in self._claims.values() if s.get("domain") == domain]
            if state.get("type") == "channel" and not any(s["type"] == "channel" for s in same):
                self._set_label(domain, present=False)
            if state.get("type") == "daemon" and not any(s["type"] == "daemon" for s in same):
                # rmtree never follows a symlink, and unlinking a FIFO does not open it
                shutil.rmtree(self.domain_dir(domain), ignore_errors=True)
                self._written.pop(domain, None)
            self._follow()

    # -- queries --------------------------------------------------------------------------------
    def channels(self) -> dict[str, int]:
        """IMEX channel per domain uid on this node."""
        with self._lock:
            return {
                str(s["domain"]): int(s["channel"])
                for s in self._claims.values()
                if s.get("type") == "channel"
            }

    def all_mode_domains(self) -> set[str]:
        """Domains whose pods here got every channel of the node (``allocationMode: All``)."""
        with self._lock:
            return {
                str(s["domain"])
                for s in self._claims.values()
                if s.get("type") == "channel" and s.get("mode") == "All"
            }

    def daemon_domains(self) -> list[str]:
        """Domains whose IMEX daemon runs on this node."""
        with self._lock:
            claims = list(self._claims.values())
        return sorted({str(s["domain"]) for s in claims if s["type"] == "daemon"})

    def domain_dir(self, domain_uid: str) -> Path:
        return self.work_dir / "domains" / domain_uid

    def sync_daemons(self) -> list[str]:
        """Rewrite each local IMEX daemon's ``hosts`` mapping from the domain's
        ComputeDomainClique, as upstream's daemon rewrites its /etc/hosts when the clique's
        daemons change; returns the domains whose file changed. With a caching store this runs
        by itself on every change of the clique; calling it reads the informers' caches only."""
        with self._lock:
            return [uid for uid in self.daemon_domains() if self._sync_domain(uid)]

    def close(self) -> None:
        """Stop following the cluster (the agent stops): release every informer."""
        with self._lock:
            for uid in list(self._domain_nodes):
                self._unfollow(uid)
            self._hold_domains(False)

    def _sync_domain(self, uid: str) -> bool:
        with self._lock:
            if uid not in self.daemon_domains():
                return False
            text = self._hosts(uid)
            if self._written.get(uid) == text:
                return False
            self._write_hosts(uid, text)
            return True

    def _write_hosts(self, uid: str, text: str) -> None:
        """Replace the daemon's ``hosts`` (a new file renamed over whatever the name holds)
        and remember the text: what is in the directory is never read back."""
        write_atomic(self.domain_dir(uid) / HOSTS, text)
        self._written[uid] = text

    def _domain_changed(self, uid: str) -> None:
        """An informer saw the domain's clique change."""
        try:
            if self._sync_domain(uid):
                log.info("ComputeDomain %s: IMEX daemon hosts mapping rewritten", uid)
        except OSError:
            log.exception("ComputeDomain %s: cannot rewrite the IMEX daemon hosts mapping", uid)

    # -- following the cluster ------------------------------------------------------------------
    def _node_selector(self, uid: str) -> dict[str, str]:
        """The nodes of a domain in this node's clique, as a server-side label selector."""
        selector = {node_label(uid): "true"}
        clique = self._clique()
        if clique is not None:
            selector[CLIQUE_LABEL] = clique
        return selector

    def _clique_selector(self, uid: str) -> dict[str, str]:
        """The domain's ComputeDomainClique for this node's clique, by its labels (whatever
        namespace the controller runs in)."""
        return {DOMAIN_LABEL: uid, CLIQUE_ID_LABEL: self._clique() or ""}

    def _follow(self) -> None:
        """Hold one ComputeDomainClique informer per domain whose daemon runs here, and the
        ComputeDomain informer while any claim is held (caching stores only)."""
        if not isinstance(self.store, CachedStore):
            return
        wanted = set(self.daemon_domains())
        for uid in wanted:
            self._watch_domain(uid)
        for uid in set(self._domain_nodes) - wanted:
            self._unfollow(uid)
        self._hold_domains(bool(self._claims))

    def _watch_domain(self, uid: str) -> None:
        if not isinstance(self.store, CachedStore) or uid in self._domain_nodes:
            return
        informer = self.store.informers.acquire(
            API_VERSION, CLIQUE_KIND, labels=self._clique_selector(uid)
        )
        unsubscribe = informer.add_handler(on_change=partial(self._domain_changed, uid))
        self._domain_nodes[uid] = (informer, unsubscribe)

    def _unfollow(self, uid: str) -> None:
        informer, unsubscribe = self._domain_nodes.pop(uid)
        unsubscribe()
        if isinstance(self.store, CachedStore):
            self.store.informers.release(informer)

    def _hold_domains(self, hold: bool) -> None:
        if not isinstance(self.store, CachedStore):
            return
        if hold and self._domains is None:
            self._domains = self.store.informers.acquire(API_VERSION, KIND)
        elif not hold and self._domains is not None:
            self.store.informers.release(self._domains)
            self._domains = None

    # -- internals --------------------------------------------------------------------------
    def _clique(self) -> str | None:
        if self.clique is not None:
            return self.clique
        try:
            node = self.store.get("v1", "Node", self.node_name)
        except NotFound:
            return None
        return node_clique(node)

    def _domain(self, uid: str) -> ComputeDomain:
        stores = [self.store]
        if isinstance(self.store, CachedStore):
            stores.append(self.store.store)  # a domain created a moment ago: ask the server
        for store in stores:
            for obj in store.list(API_VERSION, KIND):
                if (obj.get("metadata") or {}).get("uid") == uid:
                    return parse_compute_domain(obj)
        raise ClaimError(f"ComputeDomain with uid {uid} not found")

    def _prepare_channel(self, domain: ComputeDomain, mode: str) -> tuple[ContainerEdits, Obj]:
        in_use = self.channels()
        try:
            channel = assign_channel(
                in_use,
                domain.uid,
                MAX_CHANNELS,
                self._peer_channel(domain.uid) if domain.uid not in in_use else None,
                all_mode=self.all_mode_domains(),
                want_all=mode == "All",
            )
        except ChannelsExhausted as exc:
            raise ClaimError(str(exc)) from exc
        self._set_label(domain.uid, present=True, channels={**in_use, domain.uid: channel})
        channels = range(MAX_CHANNELS) if mode == "All" else (channel,)
        edits = ContainerEdits(device_nodes=tuple(DeviceNode(channel_path(c)) for c in channels))
        state = {
            "type": "channel",
            "domain": domain.uid,
            "channel": channel,
            "mode": mode,
            "ref": domain.ref,
        }
        return edits, state

    def _check_daemon_claim(self, claim: ClaimInfo, domain: ComputeDomain) -> None:
        """A daemon claim gets the domain's directory only when the controller made it: in
        the controller's namespace, from the domain's daemon claim template (its label)."""
        if claim.namespace != self.daemon_namespace:
            raise ClaimError(
                f"a {DAEMON_CONFIG_KIND} claim must be in the kgpu controller's namespace "
                f"{self.daemon_namespace!r}, not {claim.namespace!r}: IMEX daemon claims come "
                "from the daemon claim template the controller creates for each ComputeDomain"
            )
        labels = (claim.claim.get("metadata") or {}).get("labels") or {}
        if not isinstance(labels, Mapping) or labels.get(DOMAIN_LABEL) != domain.uid:
            raise ClaimError(
                f"claim {claim.namespace}/{claim.name} names ComputeDomain {domain.uid} but "
                f"was not made from its daemon claim template (label {DOMAIN_LABEL}="
                f"{domain.uid} missing); the controller re-creates the template"
            )

    def _prepare_daemon(self, domain: ComputeDomain) -> tuple[ContainerEdits, Obj]:
        self._watch_domain(domain.uid)  # from now on the domain's clique comes from its watch
        directory = self.domain_dir(domain.uid)
        ensure_directory(directory, DOMAIN_DIR_MODE)
        os.chmod(directory, DOMAIN_DIR_MODE)  # made by an older agent: its mode too
        write_atomic(directory / IMEX_CONFIG_TEMPLATE, render_imex_config_template())
        write_atomic(directory / NODES_CONFIG, render_nodes_config(MAX_NODES_PER_IMEX_DOMAIN))
        self._write_hosts(domain.uid, self._hosts(domain.uid))
        edits = ContainerEdits(
            env=(
                f"CLIQUE_ID={self._clique() or ''}",
                f"COMPUTE_DOMAIN_UUID={domain.uid}",
                f"COMPUTE_DOMAIN_NAME={domain.name}",
                f"COMPUTE_DOMAIN_NAMESPACE={domain.namespace}",
                f"MAX_NODES_PER_IMEX_DOMAIN={MAX_NODES_PER_IMEX_DOMAIN}",
            ),
            # read-only: the daemon renders its config elsewhere; nothing it could leave here
            # (a FIFO, a symlink to /dev/zero, another domain's hosts) reaches the agent
            mounts=(
                Mount(str(directory), IMEX_CONFIG_DIR, ("ro", "nosuid", "nodev", "noexec", "bind")),
            ),
        )
        return edits, {"type": "daemon", "domain": domain.uid, "ref": domain.ref}

    def _hosts(self, domain_uid: str) -> str:
        """The daemon's hosts mapping: the daemons of the domain's ComputeDomainClique for
        this clique (the informer's cache, or one selected list)."""
        clique = self._clique() or ""
        daemons: list[DomainNode] = []
        selector = self._clique_selector(domain_uid)
        for obj in self.store.list(API_VERSION, CLIQUE_KIND, labels=selector):
            for entry in obj.get("daemons") or []:
                parsed = DomainNode.from_obj(entry) if isinstance(entry, Mapping) else None
                if parsed is not None:
                    daemons.append(parsed)
        return render_hosts(daemons, clique, MAX_NODES_PER_IMEX_DOMAIN)

    def _domain_nodes_of(self, domain_uid: str) -> list[Obj]:
        """The domain's nodes in this clique: one selected list (or a covering cache)."""
        clique = self._clique()
        nodes = self.store.list("v1", "Node", labels=self._node_selector(domain_uid))
        return [n for n in nodes if node_clique(n) == clique]

    def _peer_channel(self, domain_uid: str) -> int | None:
        """The channel the domain uses on another node of this clique, if any (from the
        nodes' ``resource.nvidia.com/imexChannels`` annotation)."""
        for node in self._domain_nodes_of(domain_uid):
            meta = node.get("metadata") or {}
            if meta.get("name") == self.node_name:
                continue
            try:
                used = json.loads((meta.get("annotations") or {}).get(CHANNELS_ANNOTATION, "{}"))
            except ValueError:
                continue
            if isinstance(used, dict) and isinstance(used.get(domain_uid), int):
                return int(used[domain_uid])
        return None

    def _set_label(
        self, domain_uid: str, *, present: bool, channels: Mapping[str, int] | None = None
    ) -> None:
        """Label the node for the domain (or not) and publish the node's channel map: one
        merge patch of exactly those two keys, so no other writer's labels are touched and no
        read is needed first."""
        current = dict(self.channels() if channels is None else channels)
        wanted = json.dumps(current, sort_keys=True) if current else None
        patch = {
            "metadata": {
                "labels": {node_label(domain_uid): "true" if present else None},
                "annotations": {CHANNELS_ANNOTATION: wanted},
            }
        }
        try:
            self.store.patch("v1", "Node", self.node_name, patch)
        except NotFound:
            log.warning("node %s not found: cannot label it for ComputeDomains", self.node_name)


def compute_domain_driver(
    node_name: str,
    store: ObjectStore,
    machine: Machine,
    kubelet_root: Path,
    *,
    daemon_namespace: str = DRIVER_NAMESPACE,
) -> ComputeDomainHandler | None:
    """The ``compute-domain.nvidia.com`` driver for a node whose GPUs sit in an NVLink fabric
    clique, else None (a :data:`kgpu.drivers.dra.DriverFactory`). ``daemon_namespace``: the
    controller's, where IMEX daemon claims are made (the chart runs agent and controller in
    the release namespace)."""
    clique = machine_clique(machine)  # registered with the fabric manager, as slices require
    if clique is None:
        return None
    return ComputeDomainHandler(
        node_name,
        store,
        plugin_dir(kubelet_root, DRIVER),
        clique=clique,
        daemon_namespace=daemon_namespace,
    )
