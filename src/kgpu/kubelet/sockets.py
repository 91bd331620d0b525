"""gRPC over unix sockets, the way every kubelet-facing server and client here uses it.

The device plugin, the DRA plugin and the fakes that play the kubelet all listen on a socket
file that a previous instance (or a crashed one) may have left behind, and all dial sockets
named by paths that may be relative (``--kubelet-root ./root``). gRPC reads ``unix://rel/x``
as an authority, not a path, so every target is made absolute in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc


def unix_target(path: Path | str) -> str:
    """The gRPC target for a socket file: ``unix:///abs/path``."""
    return f"unix://{Path(path).absolute()}"


def serve_unix(
    path: Path,
    add: Callable[[grpc.Server], None],
    *,
    workers: int,
    thread_name_prefix: str = "",
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Server:
    """Start a server on ``path``: its directory created, a stale socket file replaced,
    ``add`` registering the servicers. OSError when nothing could be bound."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a socket left by a previous (crashed) instance
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name_prefix),
        options=list(options),
    )
    add(server)
    if server.add_insecure_port(unix_target(path)) == 0:
        raise OSError(f"cannot listen on {path}")
    server.start()
    return server
