"""The ways a device can be shared, one module each, and their registry.

Each mode (:mod:`~kgpu.node.sharing.none`, :mod:`~kgpu.node.sharing.timeslicing`,
:mod:`~kgpu.node.sharing.mps`) is one :class:`~kgpu.node.sharing.base.SharingMode` object that
owns its config rules, hardware limits, per-client limits, Allocate edits, labels and DRA
opaque-config handling. The node view, the allocator, the labeler, the MPS daemons and the DRA
driver ask the mode of a device instead of testing its name.

Adding a mode: write its module (a ``SharingMode`` subclass and one instance), then register
it here: a member of :class:`Sharing` named after it and an entry in ``MODES``. If upstream
gives it a section of its own under ``sharing:`` in the device-plugin config, that key is part
of the file format and is declared there too (``kgpu.config.plugin.Sharing``).
"""

from __future__ import annotations

from enum import StrEnum

from kgpu.config.plugin import DevicePluginConfig
from kgpu.errors import FieldProblem
from kgpu.node.sharing.base import ContainerEdits, SharingMode, SharingPlan
from kgpu.node.sharing.mps import MPS
from kgpu.node.sharing.none import NONE
from kgpu.node.sharing.timeslicing import TIME_SLICING


class Sharing(StrEnum):
    """How a physical device is shared between containers (a registered mode's name)."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


#: Every mode, in the order DRA documents its strategies.
MODES: tuple[SharingMode, ...] = (NONE, TIME_SLICING, MPS)

_BY_NAME = {Sharing(mode.name): mode for mode in MODES}

#: The modes a device-plugin config can ask for, the one that wins a device first.
CONFIGURED_MODES: tuple[SharingMode, ...] = tuple(
    sorted((m for m in MODES if m.config_key is not None), key=lambda m: m.precedence)
)

#: The modes a DRA opaque config can ask for, by ``sharing.strategy``.
DRA_MODES: dict[str, SharingMode] = {m.dra_strategy: m for m in MODES if m.dra_strategy}


def mode_of(sharing: str) -> SharingMode:
    """The mode called ``sharing`` (a :class:`Sharing` value)."""
    return _BY_NAME[Sharing(sharing)]


def config_problems(
    config: DevicePluginConfig, *, file: str = "", entry: str = ""
) -> list[FieldProblem]:
    """Everything the configured modes refuse in one device-plugin config, GPUs unseen."""
    return [
        problem
        for mode in CONFIGURED_MODES
        for problem in mode.config_problems(config, file=file, entry=entry)
    ]


__all__ = [
    "CONFIGURED_MODES",
    "DRA_MODES",
    "MODES",
    "ContainerEdits",
    "Sharing",
    "SharingMode",
    "SharingPlan",
    "config_problems",
    "mode_of",
]
