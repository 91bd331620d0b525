"""The exposition, byte for byte, on a fixed simulated sample.

dcgm-exporter's names, label order, HELP texts, types and value formats are the contract that
dashboards and KEDA queries rely on; this pins all of them (and kgpu's own per-pod series).
"""

from __future__ import annotations

from pathlib import Path

from kgpu.hardware.model import Gpu, Machine, MigDevice, NvLink
from kgpu.metrics.attribution import Attribution
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.simulated import SimulatedTelemetry, Workload
from kgpu.metrics.sources import PodRef

H100 = "GPU-11111111-2222-3333-4444-555555555555"
A100 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
MIG = "MIG-99999999-8888-7777-6666-555555555555"
machine = Machine(
    profile="fixed",
    driver_version="570.124.06",
    cuda_driver_version=(12, 8),
    hostname="node-a",
    gpus=(
        Gpu(
            index=0,
            uuid=H100,
            product_name="NVIDIA H100 80GB HBM3",
            brand="Nvidia",
            architecture="hopper",
            compute_capability=(9, 0),
            memory_mib=81559,
            pci_bus_id="00000000:1B:00.0",
            minor=0,
            nvlinks=(NvLink(-1, 18),),
            power_limit_w=700.0,
        ),
        Gpu(
            index=1,
            uuid=A100,
            product_name="NVIDIA A100-SXM4-40GB",
            brand="Nvidia",
            architecture="ampere",
            compute_capability=(8, 0),
            memory_mib=40960,
            pci_bus_id="00000000:2A:00.0",
            minor=1,
            mig_capable=True,
            mig_enabled=True,
            power_limit_w=400.0,
            mig_devices=(
                MigDevice(
                    parent_index=1,
                    parent_uuid=A100,
                    index=0,
                    uuid=MIG,
                    profile="3g.20gb",
                    gi_id=2,
                    ci_id=0,
                    placement_start=4,
                    placement_size=4,
                    memory_mib=19968,
                    compute_slices=3,
                ),
            ),
        ),
    ),
)
pod_a = PodRef("ml", "trainer-0", "main")
pod_b = PodRef("ml", "notebook", "jupyter")
source = SimulatedTelemetry(
    workloads=[
        Workload(pod_a, H100, sm_percent=75, mem_copy_percent=30, memory_mib=10240),
        Workload(pod_b, MIG, sm_percent=70, mem_copy_percent=20, memory_mib=4096),
    ]
)
attribution = Attribution(holders={H100: (pod_a,), MIG: (pod_b,)})


EXPECTED = (Path(__file__).parent / "data" / "fixed-sample.prom").read_text(encoding="utf-8")


def _exporter(hostname_label: str = "Hostname") -> Exporter:
    return Exporter(
        [
            NodeTarget(
                machine=lambda: machine,
                source=source,
                attribution=lambda: attribution,
                hostname="node-a",
            )
        ],
        hostname_label=hostname_label,
    )


def test_exposition_is_exactly_dcgm_exporters_format() -> None:
    assert _exporter().scrape() == EXPECTED


def test_hostname_label_can_use_dcgm_exporter_mains_name() -> None:
    text = _exporter("hostname").scrape()
    assert 'Hostname="' not in text
    assert text == EXPECTED.replace(',Hostname="node-a",', ',hostname="node-a",')


def test_label_values_are_escaped() -> None:
    from dataclasses import replace

    odd = replace(machine, gpus=(replace(machine.gpus[0], product_name='A "quoted"\\ GPU'),))
    text = Exporter(
        [NodeTarget(machine=lambda: odd, source=SimulatedTelemetry(), hostname="n")]
    ).scrape()
    assert 'modelName="A \\"quoted\\"\\\\ GPU"' in text
