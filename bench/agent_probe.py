"""``python bench/agent_probe.py agent ...``: the ``kgpu`` CLI with a probe that reports from
inside the process on SIGUSR1, for attributing RSS growth (``bench/agent.py --only
rss-by-action``). Nothing here changes what the agent does; it only adds a signal handler.

On SIGUSR1 it writes ``$KGPU_PROBE_OUT`` (JSON, atomically): VmRSS, threads, open files, glibc's
malloc arenas (``malloc_info``), the live objects of the types that hold native gRPC state or
threads (``gc.get_objects``), and, with ``KGPU_PROBE_TRACEMALLOC=1``, the top 10 Python
allocation sites grown since the first probe. With ``KGPU_PROBE_TRIM=1`` it calls
``malloc_trim(0)`` first and reports VmRSS before and after, which tells memory glibc holds
free (fragmentation) from memory still in use (a leak).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import runpy
import signal
import sys
import threading
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

WATCHED = (
    "grpc._server._Server",
    "grpc._channel.Channel",
    "grpc._cython.cygrpc.Channel",
    "grpc._cython.cygrpc.Server",
    "grpc._cython.cygrpc.CompletionQueue",
    "concurrent.futures.thread.ThreadPoolExecutor",
    "threading.Thread",
    "kgpu.kubelet.deviceplugin.server.PluginServer",
    "kgpu.kubelet.deviceplugin.servicer.DevicePluginServicer",
    "kgpu.config.loader.ConfigSet",
    "kgpu.node.model.NodeView",
)

_libc = ctypes.CDLL("libc.so.6")
_first: tracemalloc.Snapshot | None = None


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _arenas() -> int:
    """How many malloc arenas glibc has (``<heap nr=...>`` in ``malloc_info``)."""
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    _libc.open_memstream.restype = ctypes.c_void_p
    stream = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    _libc.malloc_info(0, ctypes.c_void_p(stream))
    _libc.fclose(ctypes.c_void_p(stream))
    text = (buf.value or b"").decode()
    _libc.free(buf)
    return len(re.findall(r"<heap nr=", text))


def _objects() -> dict[str, int]:
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        kind = type(obj)
        name = f"{kind.__module__}.{kind.__qualname__}"
        if name in WATCHED:
            counts[name] += 1
    return dict(counts)


def _probe(_signum: int, _frame: FrameType | None) -> None:
    global _first
    out: dict[str, Any] = {"rss_kib": _rss_kib()}
    if os.environ.get("KGPU_PROBE_TRIM") == "1":
        _libc.malloc_trim(0)
        out["rss_kib_trimmed"] = _rss_kib()
    out["threads"] = len(os.listdir("/proc/self/task"))
    out["python_threads"] = sorted(
        Counter(t.name.rstrip("0123456789_") for t in threading.enumerate()).items()
    )
    out["fds"] = len(os.listdir("/proc/self/fd"))
    out["arenas"] = _arenas()
    out["objects"] = _objects()
    out["types_top"] = Counter(type(o).__qualname__ for o in gc.get_objects()).most_common(15)
    out["gc_objects"] = len(gc.get_objects())
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot()
        if _first is None:
            _first = snapshot
        out["traced_kib"] = tracemalloc.get_traced_memory()[0] // 1024
        out["top"] = [
            f"{s.size_diff / 1024:+.1f} KiB {s.count_diff:+d} {s.traceback[0]}"
            for s in snapshot.compare_to(_first, "lineno")[:10]
        ]
    target = Path(os.environ["KGPU_PROBE_OUT"])
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    tmp.rename(target)


def main() -> None:
    if os.environ.get("KGPU_PROBE_TRACEMALLOC") == "1":
        tracemalloc.start(1)
    if os.environ.get("KGPU_PROBE_OUT"):
        signal.signal(signal.SIGUSR1, _probe)
    sys.argv = ["kgpu", *sys.argv[1:]]
    runpy.run_module("kgpu", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
