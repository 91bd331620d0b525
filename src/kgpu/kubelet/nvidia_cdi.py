"""What NVIDIA's CDI specs carry: the driver as common edits, GPUs as device nodes.

Upstream's DRA driver and device plugin build their specs with the container toolkit's
``nvcdi``: per device the device nodes (``/dev/nvidia<minor>``, and for a MIG device its GPU-
and compute-instance capability nodes ``/dev/nvidia-caps/nvidia-cap<N>``), and as spec-level
*common edits* everything a CUDA program needs from the driver (see
:mod:`kgpu.kubelet.driver_root`), plus the hooks that make the injected libraries usable in the
container. The common edits, as upstream writes them:

* ``env``: ``NVIDIA_CTK_LIBCUDA_DIR=<library dirs>``, ``NVIDIA_VISIBLE_DEVICES=void`` (so the
  NVIDIA runtime hook does not inject GPUs a second time);
* ``deviceNodes``: the control nodes that exist (``hostPath`` under the host's device root);
* ``hooks`` (``createContainer``, ``<hook path> <name> ...``, env ``NVIDIA_CTK_DEBUG=false``):
  ``create-symlinks --link <target>::<link>`` (SONAME and ``.so`` links, ``libcuda.so``),
  ``enable-cuda-compat --host-driver-version=<version>``, ``update-ldcache --folder <dir>``,
  ``disable-device-node-modification``;
* ``mounts``: libraries, then IPC sockets, firmware and binaries, bind-mounted read-only
  (``ro, nosuid, nodev, rbind, rprivate``; sockets ``nosuid, nodev, rbind, rprivate, noexec``).

The hooks run the toolkit's ``nvidia-cdi-hook`` on the host (a path ending in ``nvidia-ctk``
runs ``nvidia-ctk hook <name>``, as the device plugin's ``nvidiaCTKPath`` does). Upstream ships
its own copy of that binary (the DRA driver into its plugin directory); no registry kgpu can
use has it, so kgpu uses the node's own: the configured path when it exists, else the first of
:data:`~kgpu.kubelet.driver_root.HOOK_CANDIDATES` under the driver root (where the toolkit and
the GPU Operator install it). A node without one (a real H200 of 2026-11-28 had no toolkit, and
a spec naming ``/usr/bin/nvidia-cdi-hook`` would have failed every container) gets specs that
need no hook: the libraries' SONAME and ``.so`` links the host has are mounted as files (what
``create-symlinks`` would make) and ``LD_LIBRARY_PATH`` names the library directories (what
``update-ldcache`` would put in the container's linker cache). What that cannot serve: the
``libcuda.so`` link when the host has none, CUDA forward compatibility (``enable-cuda-compat``),
keeping the driver from creating device nodes in the container
(``disable-device-node-modification``), and an image whose own ``LD_LIBRARY_PATH`` comes first.
:class:`HookOptions` also turns hooks off one by one (``update-application-profile`` —
graphics only, new in 2025 — is off by default).

Graphics: the EGL, Vulkan and OpenCL ICD files the node has are mounted as the toolkit mounts
them, and a whole GPU's ``/dev/dri`` card and render nodes join its device nodes when present.
Every host path the common edits name is checked when they are made
(:meth:`NodeDriver.present`): one that does not exist on the node is left out with a warning,
so a runtime never fails a container over a missing driver file or hook. A device's own nodes
are checked too, but a missing one is only reported (a CDI device needs an edit; the runtime's
error then names the node, and the warning says to check ``NVIDIA_DEV_ROOT``).
``cdiVersion`` is the lowest the contents need (:func:`kgpu.kubelet.cdi.minimum_version`, the
CDI library's rules, which the toolkit's spec builder applies too).

When the node's toolkit has generated its own spec (``nvidia-ctk cdi generate`` writes
``/etc/cdi/nvidia.yaml``; its systemd unit ``/var/run/cdi/nvidia.yaml``), its common edits are
reused as they are: the node's administrator made them for this host and keeps them current.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kgpu.hardware.backend import Backend
from kgpu.hardware.model import Gpu, MigDevice
from kgpu.kubelet import cdi
from kgpu.kubelet.cdi import ContainerEdits, DeviceNode, Hook, Mount
from kgpu.kubelet.driver_root import (
    CONTROL_DEVICES,
    HOOK_CANDIDATES,
    DriverFiles,
    DriverNotFound,
    DriverRoot,
    discover,
    dri_nodes,
    find_hook,
)
from kgpu.node.allocate import CDI_CLASS, CDI_VENDOR
from kgpu.node.allocate import DeviceNode as AllocatedDeviceNode
from kgpu.node.ids import strip_replica
from kgpu.node.model import AdvertisedDevice, NodeView

log = logging.getLogger(__name__)

DEFAULT_HOOK_PATH = "/usr/bin/nvidia-cdi-hook"
#: ``HookOptions.path``: use the node's own hook binary, wherever the toolkit installed it.
AUTO_HOOK = "auto"
LD_LIBRARY_PATH = "LD_LIBRARY_PATH"
CREATE_SYMLINKS = "create-symlinks"
ENABLE_CUDA_COMPAT = "enable-cuda-compat"
UPDATE_LDCACHE = "update-ldcache"
DISABLE_DEVICE_NODE_MODIFICATION = "disable-device-node-modification"
UPDATE_APPLICATION_PROFILE = "update-application-profile"
#: Hooks in the order upstream's specs list them.
HOOKS = (
    CREATE_SYMLINKS,
    ENABLE_CUDA_COMPAT,
    UPDATE_LDCACHE,
    DISABLE_DEVICE_NODE_MODIFICATION,
    UPDATE_APPLICATION_PROFILE,
)
LIBRARY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_MOUNT_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"
LIBCUDA_DIR_ENV = "NVIDIA_CTK_LIBCUDA_DIR"

TOOLKIT_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
TOOLKIT_SPEC_NAMES = ("nvidia.yaml", "nvidia.json")
TOOLKIT_KIND = "nvidia.com/gpu"

DEVICE_PLUGIN_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
#: The spec file the device plugin writes (the CDI library's ``<vendor>-<class>`` name).
DEVICE_PLUGIN_SPEC = f"{cdi.spec_name(DEVICE_PLUGIN_KIND)}.json"

#: How long common edits are reused before the driver is looked at again (upstream's DRA
#: driver caches them for 5 minutes too); a driver upgrade is picked up within it.
CACHE_TTL_S = 300.0


def mig_cap_minors(gpu_minor: int, gi_id: int, ci_id: int) -> tuple[int, int]:
    """Minor numbers of ``gpu<minor>/gi<gi>/access`` and ``.../ci<ci>/access`` in
    ``/proc/driver/nvidia-caps/mig-minors``: after ``config`` (1) and ``monitor`` (2), each GPU
    has 15 GPU instances of 1 access + 8 compute-instance minors each."""
    gi = 3 + gpu_minor * 15 * 9 + gi_id * 9
    return gi, gi + 1 + ci_id


def device_paths(gpu_minor: int, mig: tuple[int, int] | None = None) -> list[str]:
    """The device nodes of a GPU (``/dev/nvidia<minor>``) or of one of its MIG devices
    (``mig`` = (GPU instance, compute instance)): the parent's node and both capability nodes."""
    paths = [f"/dev/nvidia{gpu_minor}"]
    if mig is not None:
        gi, ci = mig_cap_minors(gpu_minor, *mig)
        paths += [f"/dev/nvidia-caps/nvidia-cap{gi}", f"/dev/nvidia-caps/nvidia-cap{ci}"]
    return paths


@dataclass(frozen=True)
class HookOptions:
    """Which hooks specs carry, and the binary that runs them (None: no hooks at all;
    :data:`AUTO_HOOK`: the node's own, found by :func:`resolve_hooks`)."""

    path: str | None = AUTO_HOOK
    disabled: frozenset[str] = frozenset({UPDATE_APPLICATION_PROFILE})
    debug: bool = False

    def enabled(self, name: str) -> bool:
        return self.path is not None and name not in self.disabled

    def hook(self, name: str, *args: str) -> Hook:
        assert self.path is not None and self.path != AUTO_HOOK
        base = os.path.basename(self.path)
        prefix = (base, "hook") if base == "nvidia-ctk" else (base,)
        return Hook(
            hook_name="createContainer",
            path=self.path,
            args=(*prefix, name, *args),
            env=(f"NVIDIA_CTK_DEBUG={'true' if self.debug else 'false'}",),
        )


def resolve_hooks(hooks: HookOptions, root: DriverRoot) -> tuple[HookOptions, str | None]:
    """``hooks`` with a hook binary that exists on the node, and a warning when the one asked
    for is not there: the configured path if it exists, else the node's own
    (:func:`~kgpu.kubelet.driver_root.find_hook`), else no hooks at all."""
    if hooks.path is None:
        return hooks, None
    asked = hooks.path
    if asked != AUTO_HOOK:
        there = root.read_host(asked)
        if there is None or there.is_file():  # exists, or where this process cannot look
            return hooks, None
    found = find_hook(root)
    missing = "" if asked == AUTO_HOOK else f"the hook {asked} does not exist on the node; "
    if found is not None:
        return replace(hooks, path=found), (f"{missing}using {found}" if missing else None)
    return replace(hooks, path=None), (
        f"{missing}no nvidia-cdi-hook or nvidia-ctk under the driver root "
        f"({', '.join(HOOK_CANDIDATES[:3])}, ...): CDI specs carry no hooks; the libraries' "
        f"links are mounted and {LD_LIBRARY_PATH} is set instead"
    )


def driver_edits(
    files: DriverFiles, root: DriverRoot, hooks: HookOptions = HookOptions()
) -> ContainerEdits:
    """The common edits that carry a discovered driver into a container."""

    def mount(path: str, options: tuple[str, ...] = LIBRARY_MOUNT_OPTIONS) -> Mount:
        return Mount(root.host(path), path, options)

    env: tuple[str, ...] = (
        f"{LIBCUDA_DIR_ENV}={':'.join(files.library_dirs)}",
        VISIBLE_DEVICES_VOID,
    )
    nodes = tuple(DeviceNode(d, root.host_dev(d)) for d in files.control_devices)
    hook_list: list[Hook] = []
    if files.symlinks and hooks.enabled(CREATE_SYMLINKS):
        links = [arg for target, link in files.symlinks for arg in ("--link", f"{target}::{link}")]
        hook_list.append(hooks.hook(CREATE_SYMLINKS, *links))
    if hooks.enabled(ENABLE_CUDA_COMPAT):
        hook_list.append(hooks.hook(ENABLE_CUDA_COMPAT, f"--host-driver-version={files.version}"))
    folders = list(dict.fromkeys(os.path.dirname(lib) for lib in files.libraries))
    if folders and hooks.enabled(UPDATE_LDCACHE):
        hook_list.append(hooks.hook(UPDATE_LDCACHE, *[a for f in folders for a in ("--folder", f)]))
    for name in (DISABLE_DEVICE_NODE_MODIFICATION, UPDATE_APPLICATION_PROFILE):
        if hooks.enabled(name):
            hook_list.append(hooks.hook(name))
    if folders and not hooks.enabled(UPDATE_LDCACHE):
        # no linker cache entry will name the driver's directories: the loader's path does
        env += (f"{LD_LIBRARY_PATH}={':'.join(folders)}",)
    mounts = [mount(lib) for lib in files.libraries]
    if not hooks.enabled(CREATE_SYMLINKS):
        # nothing will create libcuda.so.1 -> libcuda.so.<version> in the container: bind the
        # host's SONAME links themselves (a bind mount of a link mounts its target file)
        mounts += [mount(link) for target, link in files.symlinks if _exists(root, link)]
    mounts += [mount(path, IPC_MOUNT_OPTIONS) for path in files.ipc]
    mounts += [mount(path) for path in (*files.firmware, *files.binaries)]
    mounts += [Mount(root.host(p), inside, LIBRARY_MOUNT_OPTIONS) for p, inside in files.graphics]
    return ContainerEdits(env=env, device_nodes=nodes, mounts=tuple(mounts), hooks=tuple(hook_list))


def _exists(root: DriverRoot, path: str) -> bool:
    return root.read(path).exists()


def control_nodes(root: DriverRoot, paths: Iterable[str]) -> tuple[DeviceNode, ...]:
    return tuple(DeviceNode(p, root.host_dev(p)) for p in paths)


def find_toolkit_spec(dirs: Sequence[Path] = TOOLKIT_SPEC_DIRS) -> Path | None:
    """The toolkit's generated spec for ``nvidia.com/gpu``, if the node has one."""
    for directory in dirs:
        for name in TOOLKIT_SPEC_NAMES:
            path = directory / name
            if path.is_file():
                return path
    return None


def toolkit_common_edits(path: Path) -> ContainerEdits:
    """The common edits of the toolkit's spec at ``path``; ValueError naming the file and the
    field when it is not a spec kgpu can reuse."""
    try:
        spec = cdi.read_spec(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from None
    problems = cdi.validate_spec(spec)
    if problems:
        raise ValueError(f"{path}: {problems[0]}")
    if spec.get("kind") != TOOLKIT_KIND:
        raise ValueError(f"{path}: kind: {spec.get('kind')!r} is not {TOOLKIT_KIND}")
    raw = spec.get("containerEdits") or {}
    try:
        edits = ContainerEdits.from_dict(raw)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not edits.mounts:
        raise ValueError(f"{path}: containerEdits.mounts: carries no driver files")
    if VISIBLE_DEVICES_VOID not in edits.env:
        edits = edits.merged(ContainerEdits(env=(VISIBLE_DEVICES_VOID,)))
    return edits


@dataclass
class _Cached:
    edits: ContainerEdits
    at: float
    version: str | None


@dataclass
class NodeDriver:
    """The driver of one node as CDI edits, looked up once and reused (every claim's spec and
    the device plugin's spec carry the same common edits).

    ``source`` says where the last common edits came from: ``toolkit spec <path>``,
    ``driver root <root> (<how libraries were found>)`` or ``none`` (no driver found: only the
    control nodes that exist and ``NVIDIA_VISIBLE_DEVICES=void``; the reason is in
    ``warnings``)."""

    root: DriverRoot = field(default_factory=DriverRoot)
    hooks: HookOptions = field(default_factory=HookOptions)
    toolkit_spec_dirs: tuple[Path, ...] = TOOLKIT_SPEC_DIRS
    ttl_s: float = CACHE_TTL_S
    clock: Callable[[], float] = time.monotonic
    uts_release: str | None = None
    firmware_path: str | None = None
    source: str = ""
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: _Cached | None = None
        self._missing_reported: set[str] = set()

    @classmethod
    def from_env(cls, **kwargs: Any) -> NodeDriver:
        return cls(root=DriverRoot.from_env(), **kwargs)

    def common_edits(self, version: str | None = None) -> ContainerEdits:
        """The spec-level edits for this node; ``version`` is NVML's driver version."""
        with self._lock:
            now = self.clock()
            cached = self._cached
            if cached is not None and cached.version == version and now - cached.at < self.ttl_s:
                return cached.edits
            edits = self.present(self._lookup(version))
            self._cached = _Cached(edits, now, version)
            return edits

    def _lookup(self, version: str | None) -> ContainerEdits:
        self.warnings = []
        toolkit = find_toolkit_spec(self.toolkit_spec_dirs)
        if toolkit is not None:
            try:
                edits = toolkit_common_edits(toolkit)
                self.source = f"toolkit spec {toolkit}"
                return edits
            except ValueError as exc:
                self._warn(f"not reusing the toolkit's CDI spec: {exc}")
        files: DriverFiles | None = None
        try:
            files = discover(
                self.root, version, uts_release=self.uts_release, firmware_path=self.firmware_path
            )
        except DriverNotFound as exc:
            if version is None:
                self._warn(str(exc))
            else:  # NVML's version and the files disagree: say so, use what is installed
                self._warn(f"{exc}; looking for any driver version instead")
                try:
                    files = discover(
                        self.root,
                        None,
                        uts_release=self.uts_release,
                        firmware_path=self.firmware_path,
                    )
                except DriverNotFound as again:
                    self._warn(str(again))
        if files is None:
            self.source = "none"
            return self.minimal_edits()
        for warning in files.warnings:
            self._warn(warning)
        hooks, note = resolve_hooks(self.hooks, self.root)
        if note is not None:
            self._warn(note)
        self.source = f"driver root {self.root.root} ({files.source})"
        return driver_edits(files, self.root, hooks)

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        log.warning("CDI: %s", text)

    def minimal_edits(self) -> ContainerEdits:
        """No driver to carry: the control nodes that exist, and no second injection."""
        present = [d for d in CONTROL_DEVICES if self.root.read_dev(d).exists()]
        return ContainerEdits(
            env=(VISIBLE_DEVICES_VOID,), device_nodes=control_nodes(self.root, present)
        )

    def device_nodes(
        self, gpu_minor: int, mig: tuple[int, int] | None = None, bus_id: str = ""
    ) -> tuple[DeviceNode, ...]:
        """One device's nodes, with host paths under the host's device root: a whole GPU's
        ``/dev/dri`` nodes too when the node has them (``bus_id``: NVML's PCI bus id)."""
        paths = device_paths(gpu_minor, mig)
        if mig is None:
            paths += dri_nodes(self.root, bus_id)
        nodes = control_nodes(self.root, paths)
        # A device's own node is kept even when missing (a CDI device needs an edit, and the
        # runtime's error then names the node), but said: NVIDIA_DEV_ROOT may be wrong.
        self.present(ContainerEdits(device_nodes=nodes))
        return nodes

    def present(self, edits: ContainerEdits) -> ContainerEdits:
        """``edits`` less every device node, mount and hook whose host path does not exist on
        the node (each named once in a warning): a runtime fails a container whose spec names
        a missing path, so none is ever written. A path outside the host root this process
        sees (a configured hook binary the agent's container does not mount) is kept."""

        def exists(host: str, device: bool = False) -> bool:
            there = self.root.read_host(host, device=device)
            if there is None or there.exists() or there.is_symlink():
                return True  # (None: outside what this process sees of the host; trusted)
            if host not in self._missing_reported:
                self._missing_reported.add(host)
                self._warn(f"{host} does not exist on the node: left out of the CDI specs")
            return False

        return replace(
            edits,
            device_nodes=tuple(
                n for n in edits.device_nodes if exists(n.host_path or n.path, device=True)
            ),
            mounts=tuple(m for m in edits.mounts if exists(m.host_path)),
            hooks=tuple(h for h in edits.hooks if exists(h.path)),
        )


def for_backend(backend: Backend) -> NodeDriver | None:
    """The node's driver for a backend on real GPUs (one that reads them through NVML), from
    upstream's environment variables; None for a simulated backend (its specs carry no driver:
    there is none)."""
    if backend.telemetry().nvml is None:
        return None
    return NodeDriver.from_env()


# -- the device plugin's spec -------------------------------------------------------------------


def _device_of(view: NodeView, dev: AdvertisedDevice) -> tuple[Gpu, tuple[int, int] | None]:
    gpu = view.machine.by_uuid(dev.gpu_uuid)
    if not isinstance(gpu, Gpu):
        raise KeyError(f"{dev.gpu_uuid} is not a GPU of this node")
    mig = None
    if dev.mig_uuid is not None:
        found = view.machine.by_uuid(dev.mig_uuid)
        if not isinstance(found, MigDevice):
            raise KeyError(f"{dev.mig_uuid} is not a MIG device of this node")
        mig = (found.gi_id, found.ci_id)
    return gpu, mig


def _paths_of(view: NodeView, dev: AdvertisedDevice) -> list[str]:
    gpu, mig = _device_of(view, dev)
    return device_paths(gpu.minor, mig)


def device_plugin_devices(view: NodeView, driver: NodeDriver | None = None) -> list[cdi.CdiDevice]:
    """One CDI device per id the device plugin hands out under a CDI strategy
    (``k8s.device-plugin.nvidia.com/gpu=<id>``: GPU or MIG UUID, or index under
    ``deviceIDStrategy: index``), plus ``all``."""
    root = driver.root if driver is not None else DriverRoot()
    nodes_of: dict[str, tuple[DeviceNode, ...]] = {}
    for res in view.resources:
        for dev in res.devices:
            name = strip_replica(dev.visible_id)
            if name not in nodes_of:
                if driver is not None:  # a real node: the nodes that exist, /dev/dri too
                    gpu, mig = _device_of(view, dev)
                    nodes_of[name] = driver.device_nodes(gpu.minor, mig, gpu.pci_bus_id)
                else:
                    nodes_of[name] = control_nodes(root, _paths_of(view, dev))
    devices = [
        cdi.CdiDevice(name, ContainerEdits(device_nodes=nodes)) for name, nodes in nodes_of.items()
    ]
    if devices:
        every = tuple(dict.fromkeys(n for nodes in nodes_of.values() for n in nodes))
        devices.append(cdi.CdiDevice("all", ContainerEdits(device_nodes=every)))
    return devices


def device_plugin_spec(view: NodeView, driver: NodeDriver | None = None) -> dict[str, Any] | None:
    """The spec behind the CDI names the device plugin's ``cdi-annotations``/``cdi-cri``
    strategies hand out; None when the view uses neither or advertises nothing."""
    if not set(view.device_list_strategy) & {"cdi-annotations", "cdi-cri"}:
        return None
    devices = device_plugin_devices(view, driver)
    if not devices:
        return None
    common = (
        driver.common_edits(view.machine.driver_version)
        if driver is not None
        else ContainerEdits(env=(VISIBLE_DEVICES_VOID,))
    )
    return cdi.build_spec(DEVICE_PLUGIN_KIND, devices, common)


def write_device_plugin_spec(
    view: NodeView, cdi_root: Path, driver: NodeDriver | None = None
) -> Path | None:
    """Write (or keep) ``<cdi_root>/k8s.device-plugin.nvidia.com-gpu.json`` for ``view``.

    Call it with every new view, before the device plugin answers Allocate with CDI names:
    a runtime refuses a container whose CDI device has no spec. Rewrites only when the content
    changed; returns the path, or None when the view names no CDI devices (an older spec is
    then left alone: nothing refers to it)."""
    spec = device_plugin_spec(view, driver)
    if spec is None:
        return None
    path = Path(cdi_root) / DEVICE_PLUGIN_SPEC
    try:
        if path.is_file() and cdi.read_spec(path) == spec:
            return path
    except (OSError, ValueError):
        pass
    cdi.write_spec(path, spec)
    return path


def pass_device_specs(
    view: NodeView, ids: Sequence[str], driver: NodeDriver | None = None
) -> tuple[AllocatedDeviceNode, ...]:
    """The device nodes an Allocate response passes with ``passDeviceSpecs: true``, as
    upstream builds them: the control nodes that exist (``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
    ``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset``), then the allocated devices' nodes, host
    paths under the device root, ``rw``. Upstream sends them only when at least one non-CDI
    device-list strategy is in use. Raises KeyError for an id the view does not advertise."""
    root = driver.root if driver is not None else DriverRoot()
    paths = [d for d in reversed(CONTROL_DEVICES) if root.read_dev(d).exists()]
    for device_id in ids:
        paths += _paths_of(view, view.device(device_id))
    return tuple(
        AllocatedDeviceNode(container_path=p, host_path=root.host_dev(p))
        for p in dict.fromkeys(paths)
    )
