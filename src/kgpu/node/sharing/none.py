"""No sharing: a device is one advertised id, allocated to one container at a time.

Every decision of :class:`~kgpu.node.sharing.base.SharingMode` keeps its default here (no
config section, no limits, nothing added to Allocate, no labels of its own, no DRA strategy);
it is a mode so that code asking "what does this device's mode say" never special-cases it.
"""

from __future__ import annotations

from kgpu.node.sharing.base import SharingMode


class Unshared(SharingMode):
    name = "none"
    title = "not shared"


NONE = Unshared()
