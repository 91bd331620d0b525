"""gRPC over unix sockets, the way every kubelet-facing server and client here uses it.

The device plugin, the DRA plugin and the fakes that play the kubelet all listen on a socket
file that a previous instance (or a crashed one) may have left behind, and all dial sockets
named by paths that may be relative (``--kubelet-root ./root``). gRPC reads ``unix://rel/x``
as an authority, not a path, so every target is made absolute in one place.

Modes are explicit, never left to the umask: a socket file is ``0600`` and a directory this
module creates is ``0750`` (the kubelet, which dials the sockets, runs as root), so an agent
started under ``umask 000`` does not hand every local user its gRPC endpoints.

A socket file is known by :func:`identity` (device, inode and change time in nanoseconds), not
by its inode alone: ext4 and tmpfs hand a freed inode to the next file, so a kubelet that
re-binds ``kubelet.sock`` often gets the same inode back, never the same change time.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from kgpu.kubelet.dirs import DIRECTORY_MODE, ensure_directory

SOCKET_MODE = 0o600
__all__ = ["DIRECTORY_MODE", "SOCKET_MODE", "ensure_directory", "serve_unix", "unix_target"]

#: (st_dev, st_ino, st_ctime_ns) of a file; None when it does not exist.
Identity = tuple[int, int, int]


def unix_target(path: Path | str) -> str:
    """The gRPC target for a socket file: ``unix:///abs/path``."""
    return f"unix://{Path(path).absolute()}"


def identity(path: Path) -> Identity | None:
    """What tells this file from any later one of the same name (None: no such file)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def serve_unix(
    path: Path,
    add: Callable[[grpc.Server], None],
    *,
    workers: int,
    thread_name_prefix: str = "",
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Server:
    """Start a server on ``path``: its directory created, a stale socket file replaced,
    ``add`` registering the servicers, the socket file ``0600``. OSError when nothing could be
    bound."""
    ensure_directory(path.parent)
    path.unlink(missing_ok=True)  # a socket left by a previous (crashed) instance
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name_prefix),
        options=list(options),
    )
    add(server)
    # bound in a private 0700 directory next to it, made 0600 there and renamed into place:
    # no moment where the socket exists with the umask's mode at a path others can reach
    private = Path(tempfile.mkdtemp(prefix=".k", dir=path.parent))
    try:
        bound = private / "s"
        if server.add_insecure_port(unix_target(bound)) == 0:
            raise OSError(f"cannot listen on {path}")
        os.chmod(bound, SOCKET_MODE)
        os.replace(bound, path)
    except OSError:
        server.stop(None)
        raise
    finally:
        shutil.rmtree(private, ignore_errors=True)
    server.start()
    return server


def wait_listening(path: Path, timeout_s: float = 5.0) -> None:
    """Return once ``path`` accepts a connection (TimeoutError otherwise).

    A plain ``connect`` answers as soon as the server listens: no gRPC channel, whose
    connectivity poll adds about 0.2 s to every check."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                probe.connect(str(path.absolute()))
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path} does not accept connections: {exc}") from None
        time.sleep(0.005)
