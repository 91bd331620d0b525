"""Small hand-built node views for unit tests of code that consumes a :class:`NodeView`.

They follow the shapes the node view gives (replica ids ``<uuid>::<n>``, MIG devices under
``nvidia.com/mig-<profile>``, MPS limits ``100 // replicas`` percent and ``memory / replicas``)
without going through config parsing, so a test of allocation or serving fails only for its own
reasons. End-to-end tests use the real ``build_node_view`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from kgpu.hardware.model import Gpu, Machine, MigDevice, NvLink
from kgpu.node.model import AdvertisedDevice, MpsLimits, NodeView, ResourceView, Sharing


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-0000-4000-8000-00000000000{index % 10}"


def mig_uuid(gpu: int, n: int) -> str:
    return f"MIG-{gpu:08x}-{n:04x}-4000-8000-000000000000"


def make_machine(
    gpus: int = 4,
    *,
    nvlink_pairs: Sequence[tuple[int, int, int]] = (),
    nvswitch_links: int = 0,
    numa: Sequence[int] | None = None,
    memory_mib: int = 81920,
    mig: dict[int, Sequence[str]] | None = None,
) -> Machine:
    """A machine with ``gpus`` GPUs; ``nvlink_pairs`` are (a, b, links) direct connections."""
    out = []
    for i in range(gpus):
        links = [
            NvLink(peer_index=b if a == i else a, links=n)
            for a, b, n in nvlink_pairs
            if i in (a, b)
        ]
        if nvswitch_links:
            links.append(NvLink(peer_index=-1, links=nvswitch_links))
        migs = tuple(
            MigDevice(
                parent_index=i,
                parent_uuid=gpu_uuid(i),
                index=k,
                uuid=mig_uuid(i, k),
                profile=profile,
                gi_id=k + 1,
                ci_id=0,
                placement_start=k,
                placement_size=1,
                memory_mib=memory_mib // 8,
                compute_slices=1,
            )
            for k, profile in enumerate((mig or {}).get(i, ()))
        )
        out.append(
            Gpu(
                index=i,
                uuid=gpu_uuid(i),
                product_name="NVIDIA A100-SXM4-80GB",
                brand="Nvidia",
                architecture="ampere",
                compute_capability=(8, 0),
                memory_mib=memory_mib,
                pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
                minor=i,
                numa_node=numa[i] if numa is not None else None,
                nvlinks=tuple(links),
                mig_capable=True,
                mig_enabled=bool(migs),
                mig_devices=migs,
            )
        )
    return Machine(
        profile="test", driver_version="570.124.06", cuda_driver_version=(12, 8), gpus=tuple(out)
    )


def whole_gpus(
    machine: Machine, name: str = "nvidia.com/gpu", gpus: Sequence[int] | None = None
) -> ResourceView:
    chosen = [g for g in machine.gpus if gpus is None or g.index in gpus]
    return ResourceView(
        name=name,
        devices=tuple(
            AdvertisedDevice(
                id=g.uuid,
                resource=name,
                visible_id=g.uuid,
                gpu_index=g.index,
                gpu_uuid=g.uuid,
                numa_node=g.numa_node,
            )
            for g in chosen
        ),
    )


def replicas(
    machine: Machine,
    n: int,
    *,
    name: str = "nvidia.com/gpu",
    gpus: Sequence[int] | None = None,
    sharing: Sharing = Sharing.TIME_SLICING,
    fail_requests_greater_than_one: bool = False,
) -> ResourceView:
    chosen = [g for g in machine.gpus if gpus is None or g.index in gpus]
    devices = []
    for g in chosen:
        mps = (
            MpsLimits(
                active_thread_percentage=100 // n,
                pinned_memory_limit_mib=g.memory_mib // n,
                pipe_directory=f"/run/nvidia/mps/{name}/{g.index}/pipe",
                log_directory=f"/run/nvidia/mps/{name}/{g.index}/log",
                shm_directory="/run/nvidia/mps/shm",
            )
            if sharing is Sharing.MPS
            else None
        )
        for r in range(n):
            devices.append(
                AdvertisedDevice(
                    id=f"{g.uuid}::{r}",
                    resource=name,
                    visible_id=g.uuid,
                    gpu_index=g.index,
                    gpu_uuid=g.uuid,
                    replica=r,
                    sharing=sharing,
                    numa_node=g.numa_node,
                    mps=mps,
                )
            )
    return ResourceView(
        name=name,
        devices=tuple(devices),
        sharing=sharing,
        replicas=n,
        fail_requests_greater_than_one=fail_requests_greater_than_one,
    )


def mig_resources(machine: Machine) -> tuple[ResourceView, ...]:
    """One ``nvidia.com/mig-<profile>`` resource per profile present (mixed strategy)."""
    by_profile: dict[str, list[AdvertisedDevice]] = {}
    for g in machine.gpus:
        for m in g.mig_devices:
            name = f"nvidia.com/mig-{m.profile}"
            by_profile.setdefault(name, []).append(
                AdvertisedDevice(
                    id=m.uuid,
                    resource=name,
                    visible_id=m.uuid,
                    gpu_index=g.index,
                    gpu_uuid=g.uuid,
                    mig_uuid=m.uuid,
                    mig_profile=m.profile,
                    numa_node=g.numa_node,
                )
            )
    return tuple(ResourceView(name=k, devices=tuple(v)) for k, v in sorted(by_profile.items()))


def make_view(
    machine: Machine,
    resources: Sequence[ResourceView],
    *,
    labels: dict[str, str] | None = None,
    device_list_strategy: Sequence[str] = ("envvar",),
) -> NodeView:
    return NodeView(
        machine=machine,
        resources=tuple(resources),
        labels=dict(labels or {}),
        mig_strategy="mixed" if any(g.mig_devices for g in machine.gpus) else "none",
        device_list_strategy=tuple(device_list_strategy),
    )
