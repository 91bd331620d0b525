"""Directories created with their mode, never the umask's: an agent started under ``umask 000``
must not hand every local user its sockets, CDI specs, checkpoints or IMEX configs (issue 28).
A light module (no gRPC) so that CDI writing, NFD and MPS use the same rule."""

from __future__ import annotations

import os
from pathlib import Path

#: The default: the kubelet and container runtimes that read these run as root (NVIDIA's DRA
#: driver uses 0750 too).
DIRECTORY_MODE = 0o750


def ensure_directory(path: Path, mode: int = DIRECTORY_MODE) -> None:
    """Create ``path`` and missing parents with ``mode`` (set explicitly, whatever the umask,
    with no moment where a wider mode is visible: each is made 0700 and then widened);
    directories that exist already (the kubelet's own) keep theirs."""
    missing = []
    for parent in (path, *path.parents):
        if parent.is_dir():
            break
        missing.append(parent)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, their mode
        os.chmod(directory, mode)
