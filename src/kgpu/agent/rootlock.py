"""One agent per kubelet root: an exclusive ``flock`` held for the agent's whole life.

Two agents on one kubelet root (a DaemonSet rollout with surge, a second copy started by hand)
would each remove and re-create the other's sockets and register in turn. The second one
therefore stops before touching anything, naming the holder; the kernel releases the lock when
the holder exits, however it exits, so a crashed agent never blocks its successor.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from kgpu.errors import KgpuError
from kgpu.kubelet.sockets import ensure_directory


class RootLocked(KgpuError):
    """Another agent serves this kubelet root."""


class RootLock:
    def __init__(self, path: Path, kubelet_root: Path) -> None:
        self.path = path
        self.kubelet_root = kubelet_root
        self._fd: int | None = None

    def acquire(self) -> None:
        """Hold the lock, or RootLocked naming the agent that holds it."""
        ensure_directory(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RootLocked(
                f"another kgpu agent (pid {holder}) serves kubelet root {self.kubelet_root} "
                f"(it holds {self.path}); stop it first, or give this one another --kubelet-root"
            ) from None
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the next agent in (the file stays: removing it would race a new holder)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the last descriptor releases the flock
        self._fd = None
