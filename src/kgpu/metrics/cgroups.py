"""Which pod a process belongs to, from ``/proc/<pid>/cgroup``.

The kubelet puts every container in a cgroup below ``kubepods``; the path names the pod UID and
the container id under both cgroup drivers and both cgroup versions:

* cgroupfs driver: ``.../kubepods/burstable/pod<uid>/<container-id>`` (``besteffort`` likewise,
  Guaranteed pods directly under ``kubepods``);
* systemd driver: ``.../kubepods.slice/kubepods-burstable.slice/``
  ``kubepods-burstable-pod<uid with _ for ->.slice/cri-containerd-<id>.scope`` (``crio-``,
  ``docker-`` likewise);
* cgroup v1 files list one line per hierarchy (``12:memory:/kubepods/...``), v2 a single
  ``0::/kubepods...`` line. The first line that names a pod wins.

The ``/proc`` root is a parameter so tests (and exporters in a container that mounts the host's
``/proc`` elsewhere) can point it anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_POD_RE = re.compile(
    r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})"
)
_CONTAINER_RE = re.compile(
    r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-fA-F]{64})(?:\.scope)?$"
)


@dataclass(frozen=True)
class CgroupIdentity:
    pod_uid: str  # with dashes, as in metadata.uid
    container_id: str = ""  # 64 hex digits, without the runtime prefix


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """The pod (and container) a ``/proc/<pid>/cgroup`` file names, or None outside kubepods."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        if "kubepods" not in path:
            continue
        match = _POD_RE.search(path)
        if match is None:
            continue
        uid = match.group(1).replace("_", "-").lower()
        container = ""
        tail = path[match.end() :].strip("/")
        for component in tail.split("/"):
            cmatch = _CONTAINER_RE.match(component)
            if cmatch:
                container = cmatch.group(1).lower()
                break
        return CgroupIdentity(uid, container)
    return None


class ProcCgroups:
    """Reads and caches the cgroup identity of pids under a ``/proc`` root.

    A pid's cgroup never changes while it lives, so identities are cached; :meth:`retain` drops
    pids that are gone so a reused pid is read afresh.
    """

    def __init__(self, proc_root: Path | str = "/proc") -> None:
        self.proc_root = Path(proc_root)
        self._cache: dict[int, CgroupIdentity | None] = {}

    def identity(self, pid: int) -> CgroupIdentity | None:
        """Raises OSError when the file cannot be read (the process is gone, no permission)."""
        if pid in self._cache:
            return self._cache[pid]
        text = (self.proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        ident = parse_cgroup(text)
        self._cache[pid] = ident
        return ident

    def retain(self, pids: set[int]) -> None:
        for pid in [p for p in self._cache if p not in pids]:
            del self._cache[pid]
