"""What the host says about its GPUs beside NVML: the facts GFD's labels and the DRA driver's
attributes read from sysfs, read under an injectable root (``/`` on a node, a laid-out
directory in tests).

* ``/sys/class/dmi/id/product_name``: the machine's product name (GFD's ``gpu.machine``;
  absent in many VMs, as on the H200 of 2026-11-28, where GFD writes ``unknown``);
* ``/sys/bus/pci/devices/<bdf>/class``: the PCI class (``0x030200`` a 3D controller: GFD's
  ``gpu.mode=compute``; ``0x030000`` VGA: ``graphics``);
* the ``/sys/bus/pci/devices/<bdf>`` link's target: its ``pci<domain>:<bus>`` component is the
  PCIe root complex (Kubernetes' ``resource.kubernetes.io/pcieRoot``), right behind PCIe
  switches too, where guessing from the GPU's own bus is wrong.

Every reader answers None when the host does not say; nothing here raises for a missing file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DMI_PRODUCT_NAME = "sys/class/dmi/id/product_name"
PCI_DEVICES = "sys/bus/pci/devices"
_ROOT_COMPLEX = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")


def sysfs_bdf(bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` as sysfs spells it: ``0000:1b:00.0``."""
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}".lower()


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or None


def dmi_product_name(root: Path = Path("/")) -> str | None:
    return _read(root / DMI_PRODUCT_NAME)


def pci_class(bus_id: str, root: Path = Path("/")) -> str | None:
    """``0x030200``-style, as sysfs writes it (and GFD compares it)."""
    text = _read(root / PCI_DEVICES / sysfs_bdf(bus_id) / "class")
    return text.lower() if text else None


def pcie_root(bus_id: str, root: Path = Path("/")) -> str | None:
    """``pci0000:00``: the root complex in the device's sysfs path."""
    try:
        target = os.readlink(root / PCI_DEVICES / sysfs_bdf(bus_id))
    except OSError:
        return None
    for part in target.split("/"):
        if _ROOT_COMPLEX.match(part):
            return part.lower()
    return None
