"""The built-in quickstart scenario (``kgpu sim`` with no argument) and the guides' YAML it
applies, shipped as package data so the command works from any directory."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def quickstart_path() -> Path:
    return Path(str(resources.files(__name__).joinpath("quickstart.yaml")))


__all__ = ["quickstart_path"]
