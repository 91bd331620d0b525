"""Where a node's NVIDIA driver lives, and which of its files a GPU container needs.

A CDI device node alone does not make a GPU usable: the container also needs the user-space
half of the driver (``libcuda.so.<version>`` and friends, matching the kernel module exactly),
its tools, the GSP firmware and the daemons' sockets. Upstream (the NVIDIA container toolkit's
``nvcdi``, which the DRA driver and the device plugin embed) finds them in the *driver root* —
``/`` for a driver installed on the host, ``/run/nvidia/driver`` for the GPU Operator's driver
container — and so does this module, following the toolkit's rules:

* **version**: NVML's driver version, or the suffix of ``libcuda.so.<ver>`` (else
  ``libnvidia-ml.so.<ver>``);
* **libraries**: the directories holding ``lib*.so.<version>`` — found through the driver
  root's linker cache (:mod:`kgpu.kubelet.ldcache`), else the standard library directories —
  then every ``*.so.<version>`` in them and in their ``vdpau/`` subdirectories, plus the
  legacy ``libnvidia-nvvm70.so.*``;
* **symlinks** the container needs (made there by the ``create-symlinks`` hook): a library's
  SONAME link (read from its ELF ``DT_SONAME``) and its ``.so`` link when the host has them, and
  ``libcuda.so -> libcuda.so.1`` always;
* **binaries** ``nvidia-smi``, ``nvidia-debugdump``, ``nvidia-persistenced``,
  ``nvidia-cuda-mps-control``/``-server``, ``nvidia-imex``/``-ctl`` from the usual ``bin`` and
  ``sbin`` directories;
* **firmware** ``nvidia/<version>/gsp*.bin`` from the kernel's firmware search path;
* **IPC** ``/run/nvidia-persistenced/socket``, ``/run/nvidia-fabricmanager/socket`` (or under
  ``/var/run``) and the MPS pipe directory ``/tmp/nvidia-mps``;
* **control device nodes** ``/dev/nvidia-modeset``, ``/dev/nvidia-uvm-tools``,
  ``/dev/nvidia-uvm``, ``/dev/nvidiactl`` that exist under the device root;
* **graphics configuration** as the toolkit's graphics discoverer finds it: the EGL vendor and
  external-platform files, ``nvoptix.bin`` and the X11 snippets under ``/etc`` or
  ``/usr/share`` (mounted where they are), the Vulkan ICD and layer files under ``/etc``,
  ``/usr/share`` or the driver root itself (mounted under ``/etc``, where the loader looks
  first), and the OpenCL ICD ``/etc/OpenCL/vendors/nvidia.icd``; each only when present.

The hook binary the specs' hooks run (:func:`find_hook`) is looked for where the container
toolkit installs it: ``/usr/bin``, ``/usr/local/bin`` and the GPU Operator's
``/usr/local/nvidia/toolkit``, ``nvidia-cdi-hook`` before ``nvidia-ctk``.

Everything is found as a path *inside the driver root*, which is also the path the container
gets; the host path (what a runtime bind-mounts) is the same path under the host's view of the
driver root (:class:`DriverRoot`). Nothing here writes anywhere.
"""

from __future__ import annotations

import fnmatch
import os
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kgpu.kubelet.ldcache import LdCacheError, read_ld_cache

#: Environment of upstream's DRA kubelet plugin: the host's driver root, and where this process
#: sees it (a container mounts the host's driver root at ``/driver-root``).
ENV_DRIVER_ROOT = ("NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT")
ENV_CONTAINER_DRIVER_ROOT = "DRIVER_ROOT_CTR_PATH"
ENV_DEV_ROOT = "NVIDIA_DEV_ROOT"
ENV_CONTAINER_DEV_ROOT = "DEV_ROOT_CTR_PATH"

LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
IPC_SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
IPC_DIRS = ("/run", "/var/run")
MPS_PIPE_DIR = "/tmp/nvidia-mps"
CONTROL_DEVICES = (
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-uvm",
    "/dev/nvidiactl",
)
LEGACY_NVVM = "libnvidia-nvvm70.so.*"
FIRMWARE_CLASS_PATH = Path("/sys/module/firmware_class/parameters/path")

_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)*$")
_MAX_LINKS = 40


#: The toolkit's graphics configuration, relative to a config directory (mounted in place).
GRAPHICS_CONFIGS = (
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "nvidia/nvoptix.bin",
    "X11/xorg.conf.d/10-nvidia.conf",
    "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
)
CONFIG_DIRS = ("/etc", "/usr/share")
#: Vulkan's files, found in a config directory or the driver root, mounted under ``/etc``.
VULKAN_CONFIGS = (
    "vulkan/icd.d/nvidia_icd.json",
    "vulkan/icd.d/nvidia_layers.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
    "vulkan/icd.d/nvidia_icd.x86_64.json",
    "vulkan/icd.d/nvidia_icd.aarch64.json",
)
OPENCL_ICD = "/etc/OpenCL/vendors/nvidia.icd"
#: Where the container toolkit's hook binaries are installed, most specific first.
HOOK_CANDIDATES = tuple(
    f"{directory}/{name}"
    for name in ("nvidia-cdi-hook", "nvidia-ctk")
    for directory in ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/toolkit")
)


class DriverNotFound(LookupError):
    """No driver of the expected version under the driver root (the message says where kgpu
    looked and what to set)."""


@dataclass(frozen=True)
class DriverRoot:
    """Where the driver is: ``root`` as this process reads it, ``host_root`` as the container
    runtime on the host sees it (they differ when kgpu runs in a container that mounts the
    host's driver root elsewhere); the same pair for device nodes (default: the driver root)."""

    root: Path = Path("/")
    host_root: str | None = None
    dev_root: Path | None = None
    host_dev_root: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DriverRoot:
        """Upstream's variables: ``NVIDIA_DRIVER_ROOT`` (the host's driver root, default ``/``),
        ``DRIVER_ROOT_CTR_PATH`` (where this process sees it, default the same),
        ``NVIDIA_DEV_ROOT`` / ``DEV_ROOT_CTR_PATH`` likewise for ``/dev``."""
        env = os.environ if env is None else env
        host = next((env[k] for k in ENV_DRIVER_ROOT if env.get(k)), "/")
        host_dev = env.get(ENV_DEV_ROOT) or None
        return cls(
            root=Path(env.get(ENV_CONTAINER_DRIVER_ROOT) or host),
            host_root=host,
            dev_root=Path(env[ENV_CONTAINER_DEV_ROOT]) if env.get(ENV_CONTAINER_DEV_ROOT) else None,
            host_dev_root=host_dev,
        )

    @classmethod
    def from_plugin_flags(
        cls,
        nvidia_driver_root: str | None,
        container_driver_root: str | None = None,
        nvidia_dev_root: str | None = None,
    ) -> DriverRoot:
        """The device plugin's config: ``flags.nvidiaDriverRoot`` (host),
        ``flags.plugin.containerDriverRoot`` (where the plugin reads it),
        ``flags.nvidiaDevRoot``."""
        host = nvidia_driver_root or "/"
        return cls(
            root=Path(container_driver_root or host),
            host_root=host,
            host_dev_root=nvidia_dev_root or None,
        )

    @property
    def read_dev_root(self) -> Path:
        """Where this process reads device nodes: ``dev_root``; else the host's device root when
        this process sees the driver root where the host does (it runs on the host); else the
        driver root."""
        if self.dev_root is not None:
            return self.dev_root
        on_host = self.host_root is None or Path(self.host_root) == self.root
        if self.host_dev_root and on_host:
            return Path(self.host_dev_root)
        return self.root

    def read(self, path: str) -> Path:
        """Where this process reads ``path`` (a path inside the driver root)."""
        return self.root / path.lstrip("/")

    def host(self, path: str) -> str:
        """Where the host sees ``path`` (a path inside the driver root)."""
        return _join(self.host_root or str(self.root), path)

    def read_dev(self, path: str) -> Path:
        return self.read_dev_root / path.lstrip("/")

    def read_host(self, host_path: str, device: bool = False) -> Path | None:
        """Where this process reads a host path a spec names (the inverse of :meth:`host` /
        :meth:`host_dev`), or None when it is outside the host root this process sees (a
        container that mounts only the driver root cannot look at the host's ``/usr``)."""
        if device:
            base, ours = self.host_dev_root or self.host_root or str(self.root), self.read_dev_root
        else:
            base, ours = self.host_root or str(self.root), self.root
        if base not in ("", "/"):
            prefix = base.rstrip("/") + "/"
            if not host_path.startswith(prefix):
                return None
            host_path = host_path[len(prefix) - 1 :]
        return ours / host_path.lstrip("/")

    def host_dev(self, path: str) -> str:
        return _join(self.host_dev_root or self.host_root or str(self.root), path)


def _join(root: str, path: str) -> str:
    if root in ("", "/"):
        return path
    return root.rstrip("/") + "/" + path.lstrip("/")


@dataclass(frozen=True)
class DriverFiles:
    """What of the driver a container needs, as paths inside the driver root (which are also
    the container paths). ``symlinks`` are ``(target, link)`` pairs for ``create-symlinks``."""

    version: str
    library_dirs: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    binaries: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()
    ipc: tuple[str, ...] = ()
    control_devices: tuple[str, ...] = ()
    #: (path inside the driver root, container path): graphics configuration files
    graphics: tuple[tuple[str, str], ...] = ()
    source: str = ""  # "ld.so.cache" or "library directories": where the libraries were found
    warnings: tuple[str, ...] = ()


# -- resolving paths inside a root ---------------------------------------------------------------


def resolve_chain(root: Path, path: str) -> list[str]:
    """``path`` and every symlink hop after it, resolved inside ``root`` (an absolute link
    target means ``root`` + target, as the host's linker sees it). Empty when it does not
    exist; stops after 40 hops (a loop)."""
    chain: list[str] = []
    current = "/" + path.lstrip("/")
    for _ in range(_MAX_LINKS):
        host = root / current.lstrip("/")
        try:
            target = os.readlink(host)
        except OSError:
            if host.exists():
                chain.append(current)
                return chain
            return []
        chain.append(current)
        if target.startswith("/"):
            current = os.path.normpath(target)
        else:
            current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return []


def resolve(root: Path, path: str) -> str | None:
    chain = resolve_chain(root, path)
    return chain[-1] if chain else None


def _glob(root: Path, directory: str, pattern: str) -> list[str]:
    """Names in ``directory`` (inside ``root``) matching ``pattern``, sorted, files or links."""
    try:
        names = sorted(os.listdir(root / directory.lstrip("/")))
    except OSError:
        return []
    return [f"{directory.rstrip('/')}/{n}" for n in names if fnmatch.fnmatchcase(n, pattern)]


# -- ELF SONAME -------------------------------------------------------------------------------

_SHT_DYNAMIC = 6
_DT_NULL = 0
_DT_SONAME = 14
_MAX_DYNAMIC_BYTES = 1 << 20


def elf_soname(path: Path) -> str | None:
    """A shared library's ``DT_SONAME`` (its file name when it has none); None when the file is
    not a readable ELF object — then no SONAME link is made, as upstream does."""
    try:
        with path.open("rb") as handle:
            ident = handle.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
                return None
            wide = ident[4] == 2
            order = "<" if ident[5] == 1 else ">"
            if wide:
                shoff, shentsize, shnum = struct.unpack_from(order + "Q10xHH", ident, 0x28)
                sh = struct.Struct(order + "IIQQQQIIQQ")
                dyn = struct.Struct(order + "qQ")
            else:
                shoff, shentsize, shnum = struct.unpack_from(order + "I10xHH", ident, 0x20)
                sh = struct.Struct(order + "IIIIIIIIII")
                dyn = struct.Struct(order + "iI")
            if shentsize < sh.size or not shnum:
                return None
            handle.seek(shoff)
            table = handle.read(shentsize * shnum)
            sections = [
                sh.unpack_from(table, i * shentsize)
                for i in range(shnum)
                if (i + 1) * shentsize <= len(table)
            ]
            for section in sections:
                if section[1] != _SHT_DYNAMIC or section[6] >= len(sections):
                    continue
                strtab = sections[section[6]]
                handle.seek(section[4])
                data = handle.read(min(section[5], _MAX_DYNAMIC_BYTES))
                sonames = []
                for offset in range(0, len(data) - dyn.size + 1, dyn.size):
                    tag, value = dyn.unpack_from(data, offset)
                    if tag == _DT_NULL:
                        break
                    if tag == _DT_SONAME:
                        sonames.append(value)
                if len(sonames) > 1:
                    return None
                if not sonames:
                    return path.name
                handle.seek(strtab[4] + sonames[0])
                raw = handle.read(256)
                end = raw.find(b"\x00")
                return raw[:end].decode() if end > 0 else None
            return path.name
    except (OSError, struct.error, UnicodeDecodeError):
        return None


def so_link(name: str) -> str:
    """``libcuda.so.1`` -> ``libcuda.so``: the name a ``.so`` link to it would have ("" when the
    name has no ``.so``)."""
    while True:
        stem, dot, ext = name.rpartition(".")
        if not dot:
            return ""
        if ext == "so":
            return name
        name = stem


def _version_matches(name: str, version: str) -> bool:
    return fnmatch.fnmatchcase(name, f"*.so.{version}")


# -- discovery --------------------------------------------------------------------------------


def _cache_candidates(root: Path) -> list[str] | None:
    """Every path the 64-bit entries of the root's linker cache lead to (links and targets);
    None when the root has no readable cache."""
    try:
        entries = read_ld_cache(root)
    except (OSError, LdCacheError):
        return None
    out: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        if entry.bits != 64:
            continue
        for path in resolve_chain(root, entry.path):
            if path not in seen:
                seen.add(path)
                out.append(path)
    return out


def _search_candidates(root: Path) -> list[str]:
    out: list[str] = []
    for directory in LIBRARY_DIRS:
        for path in _glob(root, directory, "lib*.so.*"):
            resolved = resolve(root, path)
            if resolved is not None:
                out.extend(p for p in (path, resolved) if p not in out)
    return out


def infer_version(candidates: Iterable[str]) -> str | None:
    """The driver version from ``libcuda.so.<ver>``, else ``libnvidia-ml.so.<ver>``."""
    names = [os.path.basename(p) for p in candidates]
    for prefix in ("libcuda.so.", "libnvidia-ml.so."):
        for name in names:
            if name.startswith(prefix) and _VERSION_RE.match(name[len(prefix) :]):
                return name[len(prefix) :]
    return None


def _library_dirs(root: Path, version: str) -> tuple[list[str], str]:
    """Directories holding ``lib*.so.<version>``, and where they were found: the linker cache
    first (it knows non-standard directories), the standard library directories else."""
    finders: tuple[tuple[str, Callable[[], list[str]]], ...] = (
        ("ld.so.cache", lambda: _cache_candidates(root) or []),
        ("library directories", lambda: _search_candidates(root)),
    )
    for source, find in finders:
        dirs: list[str] = []
        for path in find():
            name = os.path.basename(path)
            if name.startswith("lib") and _version_matches(name, version):
                directory = os.path.dirname(resolve(root, path) or path)
                if directory not in dirs:
                    dirs.append(directory)
        if dirs:
            return dirs, source
    return [], ""


def _symlinks_for(root: Path, library: str) -> list[tuple[str, str]]:
    """The links ``create-symlinks`` makes for one library mount (upstream's rules)."""
    directory, name = os.path.split(library)
    version = ".".join(name.split(".so.", 1)[1:])
    links: list[tuple[str, str]] = []
    if name.startswith("libcuda.so."):
        links.append(("libcuda.so.1", f"{directory}/libcuda.so"))
    elif name.startswith("libGLX_nvidia.so."):
        links.append((name, f"{directory}/libGLX_indirect.so.0"))
    elif name.startswith("libnvidia-opticalflow.so."):
        links.append(("libnvidia-opticalflow.so.1", f"{directory}/libnvidia-opticalflow.so"))
    if not version:
        return links
    host_dir = root / directory.lstrip("/")
    soname = elf_soname(host_dir / name)
    if soname is None:
        return links
    if soname != name and (host_dir / soname).is_symlink():
        links.append((name, f"{directory}/{soname}"))
    target = soname or name
    link = so_link(target)
    if link and link != target and (host_dir / link).is_symlink():
        links.append((target, f"{directory}/{link}"))
    return links


def firmware_search_paths(uts_release: str | None = None, custom: str | None = None) -> list[str]:
    """The kernel's firmware search order: a custom ``firmware_class.path`` first, then
    ``/lib/firmware/updates/<release>``, ``/lib/firmware/updates``, ``/lib/firmware/<release>``,
    ``/lib/firmware``."""
    release = uts_release if uts_release is not None else os.uname().release
    paths = [custom] if custom else []
    return [
        *paths,
        f"/lib/firmware/updates/{release}",
        "/lib/firmware/updates",
        f"/lib/firmware/{release}",
        "/lib/firmware",
    ]


def _custom_firmware_path() -> str | None:
    try:
        return FIRMWARE_CLASS_PATH.read_text().strip() or None
    except OSError:
        return None


def discover(
    root: DriverRoot,
    version: str | None = None,
    *,
    uts_release: str | None = None,
    firmware_path: str | None = None,
) -> DriverFiles:
    """The driver's files under ``root``; ``version`` (from NVML) pins which libraries belong
    to the running kernel module. Raises :class:`DriverNotFound` when there is no such driver."""
    base = root.root
    warnings: list[str] = []
    if version is None:
        version = infer_version(_cache_candidates(base) or []) or infer_version(
            _search_candidates(base)
        )
        if version is None:
            raise DriverNotFound(
                f"no libcuda.so.<version> or libnvidia-ml.so.<version> under the driver root "
                f"{base} (its /etc/ld.so.cache and {', '.join(LIBRARY_DIRS[:2])}, ...); set "
                f"NVIDIA_DRIVER_ROOT (nvidiaDriverRoot) to where the driver is installed"
            )
    dirs, source = _library_dirs(base, version)
    if not dirs:
        raise DriverNotFound(
            f"no lib*.so.{version} (driver {version}) under the driver root {base}: the "
            f"driver's libraries do not match the kernel module, or NVIDIA_DRIVER_ROOT "
            f"(nvidiaDriverRoot) points elsewhere"
        )
    libraries: list[str] = []
    for directory in dirs:
        for search in (directory, f"{directory}/vdpau"):
            for path in _glob(base, search, f"*.so.{version}") + _glob(base, search, LEGACY_NVVM):
                resolved = resolve(base, path)
                if resolved is not None and resolved not in libraries:
                    libraries.append(resolved)
    symlinks: list[tuple[str, str]] = []
    for library in libraries:
        for link in _symlinks_for(base, library):
            if link[1] not in {existing for _, existing in symlinks}:
                symlinks.append(link)
    binaries = []
    for name in BINARIES:
        for directory in BINARY_DIRS:
            path = f"{directory}/{name}"
            host = root.read(path)
            if host.is_file() and os.access(host, os.X_OK):
                binaries.append(path)
                break
    firmware: list[str] = []
    custom = firmware_path if firmware_path is not None else _custom_firmware_path()
    for directory in firmware_search_paths(uts_release, custom):
        for path in _glob(base, f"{directory}/nvidia/{version}", "gsp*.bin"):
            if path not in firmware and root.read(path).is_file():
                firmware.append(path)
    ipc: list[str] = []
    for socket in IPC_SOCKETS:
        for directory in IPC_DIRS:
            path = f"{directory}/{socket}"
            if root.read(path).exists():
                ipc.append(path)
                break
    if root.read(MPS_PIPE_DIR).is_dir():
        ipc.append(MPS_PIPE_DIR)
    devices = [d for d in CONTROL_DEVICES if _is_device(root.read_dev(d))]
    graphics = graphics_files(root)
    if "/dev/nvidiactl" not in devices:
        warnings.append(
            f"/dev/nvidiactl not found under {root.read_dev_root}: is the kernel module loaded "
            f"(or NVIDIA_DEV_ROOT / nvidiaDevRoot set)?"
        )
    return DriverFiles(
        version=version,
        library_dirs=tuple(dirs),
        libraries=tuple(libraries),
        symlinks=tuple(symlinks),
        binaries=tuple(binaries),
        firmware=tuple(firmware),
        ipc=tuple(ipc),
        control_devices=tuple(devices),
        graphics=graphics,
        source=source,
        warnings=tuple(warnings),
    )


def graphics_files(root: DriverRoot) -> tuple[tuple[str, str], ...]:
    """The graphics configuration the node has, as (path in the driver root, container path):
    each file from the first directory holding it."""
    found: list[tuple[str, str]] = []
    for rel in GRAPHICS_CONFIGS:
        for directory in CONFIG_DIRS:
            path = f"{directory}/{rel}"
            if root.read(path).is_file():
                found.append((path, path))
                break
    for rel in VULKAN_CONFIGS:
        for directory in (*CONFIG_DIRS, ""):
            path = f"{directory}/{rel}"
            if root.read(path).is_file():
                found.append((path, f"/etc/{rel}"))
                break
    if root.read(OPENCL_ICD).is_file():
        found.append((OPENCL_ICD, OPENCL_ICD))
    return tuple(found)


def find_hook(root: DriverRoot, candidates: Iterable[str] = HOOK_CANDIDATES) -> str | None:
    """The host path of the node's ``nvidia-cdi-hook`` (else ``nvidia-ctk``) under the driver
    root, or None when the node has neither (no container toolkit installed)."""
    for path in candidates:
        local = root.read(path)
        if local.is_file() and os.access(local, os.X_OK):
            return root.host(path)
    return None


def dri_nodes(root: DriverRoot, bus_id: str) -> tuple[str, ...]:
    """The DRM nodes of the GPU at PCI ``bus_id`` (``/dev/dri/card<N>``,
    ``/dev/dri/renderD<N>``), from the ``/dev/dri/by-path/pci-<bdf>-{card,render}`` links udev
    makes; none on a node without them (a VM without display, as the H200 of 2026-11-28)."""
    if not bus_id:
        return ()
    domain, _, rest = bus_id.partition(":")
    bdf = f"{domain[-4:]}:{rest}".lower()
    nodes: list[str] = []
    for kind in ("card", "render"):
        link = root.read_dev(f"/dev/dri/by-path/pci-{bdf}-{kind}")
        try:
            target = os.readlink(link)
        except OSError:
            continue
        node = f"/dev/dri/{os.path.basename(target)}"
        if _is_device(root.read_dev(node)):
            nodes.append(node)
    return tuple(nodes)


def _is_device(path: Path) -> bool:
    """A device node (a plain file stands in for one in laid-out test roots)."""
    try:
        return not path.is_dir() and path.exists()
    except OSError:
        return False
