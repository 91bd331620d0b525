"""Built-in simulated machines, read from the YAML data files beside this module.

Facts about GPU products (NVML names, memory, compute capability, MIG geometry) live in
``products.yaml`` and ``mig.yaml``; each other ``<name>.yaml`` describes one machine (which
product, how many GPUs, where they sit on PCI and NUMA, how they are wired). Keeping them as data
lets a reader check them against ``nvidia-smi -q`` output without reading code.

The simulator builds thousands of machines, so the YAML is parsed once per process and each
:func:`load_machine` only stamps out frozen dataclasses with host-specific UUIDs.
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid as uuidlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.model import FabricInfo, Gpu, Machine, NvLink

DATA_FILES = frozenset({"products", "mig"})


@dataclass(frozen=True)
class Product:
    """One GPU product as NVML describes it."""

    key: str
    name: str
    brand: str
    architecture: str
    compute_capability: tuple[int, int]
    memory_mib: int
    multiprocessors: int
    power_limit_w: float
    mig: str | None
    fabric: bool


@dataclass(frozen=True)
class _GpuSlot:
    pci_bus_id: str
    numa_node: int | None
    nvlinks: tuple[NvLink, ...]


@dataclass(frozen=True)
class _Template:
    name: str
    description: str
    product: Product
    driver_version: str
    cuda: tuple[int, int]
    slots: tuple[_GpuSlot, ...]


def read_data(filename: str) -> Any:
    """Parse one of the YAML data files shipped in this package."""
    text = resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@functools.cache
def products() -> dict[str, Product]:
    """The product table, keyed by kgpu's short product id."""
    out: dict[str, Product] = {}
    for key, raw in read_data("products.yaml")["products"].items():
        major, minor = raw["compute_capability"]
        out[key] = Product(
            key=key,
            name=raw["name"],
            brand=raw["brand"],
            architecture=raw["architecture"],
            compute_capability=(int(major), int(minor)),
            memory_mib=int(raw["memory_mib"]),
            multiprocessors=int(raw.get("multiprocessors", 0)),
            power_limit_w=float(raw.get("power_limit_w", 0)),
            mig=raw.get("mig"),
            fabric=bool(raw.get("fabric", False)),
        )
    return out


def product_by_name(product_name: str) -> Product | None:
    """The product whose NVML name is ``product_name``, if kgpu knows it."""
    for product in products().values():
        if product.name == product_name:
            return product
    return None


@functools.cache
def profile_names() -> list[str]:
    """Names of the built-in machine profiles, sorted."""
    names = []
    for entry in resources.files(__name__).iterdir():
        if entry.name.endswith(".yaml"):
            stem = entry.name[: -len(".yaml")]
            if stem not in DATA_FILES:
                names.append(stem)
    return sorted(names)


@functools.cache
def _template(name: str) -> _Template:
    raw = read_data(f"{name}.yaml")
    product = products()[raw["product"]]
    nvswitch_links = int(raw.get("nvswitch_links", 0))
    slots = []
    for entry in raw["gpus"]:
        links = [
            NvLink(peer_index=int(peer["peer"]), links=int(peer["links"]))
            for peer in entry.get("nvlinks", [])
        ]
        if nvswitch_links:
            links.append(NvLink(peer_index=-1, links=nvswitch_links))
        numa = entry.get("numa_node")
        slots.append(
            _GpuSlot(
                pci_bus_id=str(entry["pci_bus_id"]),
                numa_node=None if numa is None else int(numa),
                nvlinks=tuple(links),
            )
        )
    major, minor = str(raw["driver"]["cuda"]).split(".")
    return _Template(
        name=name,
        description=str(raw.get("description", "")),
        product=product,
        driver_version=str(raw["driver"]["version"]),
        cuda=(int(major), int(minor)),
        slots=tuple(slots),
    )


def _unknown(name: str) -> FieldError:
    return FieldError(
        FieldProblem(
            f"unknown machine profile {name!r}; known profiles: {', '.join(profile_names())}",
            path="--machine",
        )
    )


_CLUSTER_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def stable_uuid(prefix: str, *parts: object) -> str:
    """A UUID in NVML's spelling (``GPU-xxxxxxxx-...``) that depends only on ``parts``.

    Simulated nodes must never share UUIDs (device ids are built from them) yet the same node must
    get the same UUIDs on every run, so they are hashed from the node's identity.
    """
    digest = hashlib.md5("/".join(str(p) for p in parts).encode(), usedforsecurity=False)
    return f"{prefix}-{uuidlib.UUID(bytes=digest.digest())}"


def parse_clique(clique: str) -> tuple[str, int]:
    """Split ``<clusterUUID>.<cliqueId>`` (the ``nvidia.com/gpu.clique`` label value).

    Real fabric managers report a UUID for the cluster, but scenario files name racks freely
    (``cluster-abc.0``), so any id that is a valid label value is accepted; the clique id must be
    an integer, as NVML reports it.
    """
    cluster, sep, clique_id = clique.rpartition(".")
    problem = None
    if not sep or not cluster:
        problem = "must be <clusterUUID>.<cliqueId>, e.g. 7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.1"
    elif not _CLUSTER_ID.fullmatch(cluster):
        problem = (
            f"cluster id {cluster!r} must be letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit (it becomes part of the nvidia.com/gpu.clique label)"
        )
    elif not clique_id.isdigit():
        problem = f"clique id {clique_id!r} is not a non-negative integer"
    elif len(clique) > 63:
        problem = "must be at most 63 characters (it is the nvidia.com/gpu.clique label value)"
    if problem:
        raise FieldError(FieldProblem(problem, path="clique"))
    return cluster, int(clique_id)


def load_machine(name: str, *, hostname: str = "", clique: str | None = None) -> Machine:
    """Build the simulated :class:`Machine` for profile ``name``.

    UUIDs derive from ``hostname`` (or the profile name when empty) and the GPU index.
    ``clique`` (``<clusterUUID>.<cliqueId>``) registers every GPU with that NVLink fabric clique,
    as the fabric manager does on a GB200 tray; it is an error for products without a fabric.
    """
    if name not in profile_names():
        raise _unknown(name)
    tpl = _template(name)
    product = tpl.product
    fabric: FabricInfo | None = None
    if clique is not None:
        if not product.fabric:
            raise FieldError(
                FieldProblem(
                    f"machine profile {name!r} ({product.name}) has no multi-node NVLink fabric; "
                    "a clique applies only to fabric-attached GPUs such as gb200",
                    path="clique",
                )
            )
        cluster, clique_id = parse_clique(clique)
        fabric = FabricInfo(cluster_uuid=cluster, clique_id=clique_id)
    identity = hostname or name
    gpus = tuple(
        Gpu(
            index=i,
            uuid=stable_uuid("GPU", identity, i),
            product_name=product.name,
            brand=product.brand,
            architecture=product.architecture,
            compute_capability=product.compute_capability,
            memory_mib=product.memory_mib,
            pci_bus_id=slot.pci_bus_id,
            minor=i,
            numa_node=slot.numa_node,
            nvlinks=slot.nvlinks,
            mig_capable=product.mig is not None,
            fabric=fabric,
            multiprocessor_count=product.multiprocessors,
            power_limit_w=product.power_limit_w,
        )
        for i, slot in enumerate(tpl.slots)
    )
    return Machine(
        profile=name,
        driver_version=tpl.driver_version,
        cuda_driver_version=tpl.cuda,
        gpus=gpus,
        hostname=hostname,
    )


def describe_profiles() -> list[dict[str, object]]:
    """One row per profile, for ``kgpu machines`` and docs."""
    rows: list[dict[str, object]] = []
    for name in profile_names():
        tpl = _template(name)
        product = tpl.product
        switch = any(link.peer_index < 0 for slot in tpl.slots for link in slot.nvlinks)
        direct = any(link.peer_index >= 0 for slot in tpl.slots for link in slot.nvlinks)
        interconnect = (
            "multi-node NVLink fabric"
            if product.fabric
            else "NVSwitch"
            if switch
            else "NVLink"
            if direct
            else "PCIe"
        )
        rows.append(
            {
                "name": name,
                "description": tpl.description,
                "gpus": len(tpl.slots),
                "product": product.name,
                "architecture": product.architecture,
                "computeCapability": "{}.{}".format(*product.compute_capability),
                "memoryMiB": product.memory_mib,
                "migCapable": product.mig is not None,
                "interconnect": interconnect,
                "fabric": product.fabric,
                "numaNodes": len({s.numa_node for s in tpl.slots if s.numa_node is not None}),
                "driverVersion": tpl.driver_version,
                "cudaVersion": f"{tpl.cuda[0]}.{tpl.cuda[1]}",
            }
        )
    return rows


__all__ = [
    "Product",
    "describe_profiles",
    "load_machine",
    "parse_clique",
    "product_by_name",
    "products",
    "profile_names",
    "read_data",
    "stable_uuid",
]
