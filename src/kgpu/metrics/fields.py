"""The metric families kgpu exports, with dcgm-exporter's names, types and HELP texts.

Dashboards, alerts and KEDA queries written for dcgm-exporter select these names byte for byte,
so the table below is the contract: the 25 metrics of dcgm-exporter's
``etc/default-counters.csv`` in its order, with its Prometheus types and HELP strings (a
counters CSV may set other types and HELP texts, as it can for dcgm-exporter:
:mod:`kgpu.metrics.counters`). Its counters carry no ``_total`` suffix, which is why kgpu renders
the exposition itself (:mod:`kgpu.metrics.exposition`) instead of using ``prometheus_client``'s
counter families, which append one.

``integer`` says how DCGM types the field: dcgm-exporter prints int64 fields with ``%d`` and
double fields with ``%f`` (``312.500000``), and so does kgpu. ``per_mig``: a MIG-enabled GPU
reports the field per MIG device instead of for the whole GPU (framebuffer memory);
``also_mig``: per MIG device as well as for the whole GPU (the profiling activities, which GPM
samples per GPU instance too).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str  # "gauge" | "counter"
    help: str
    integer: bool = True
    per_mig: bool = False
    also_mig: bool = False


SM_CLOCK = MetricSpec("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).")
MEM_CLOCK = MetricSpec("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).")
MEMORY_TEMP = MetricSpec("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).")
GPU_TEMP = MetricSpec("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).")
POWER_USAGE = MetricSpec("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", integer=False)
TOTAL_ENERGY = MetricSpec(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "counter",
    "Total energy consumption since boot (in mJ).",
)
PCIE_REPLAY = MetricSpec(
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."
)
GPU_UTIL = MetricSpec("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")
MEM_COPY_UTIL = MetricSpec("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).")
ENC_UTIL = MetricSpec("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).")
DEC_UTIL = MetricSpec("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).")
XID_ERRORS = MetricSpec(
    "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."
)
FB_FREE = MetricSpec(
    "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", per_mig=True
)
FB_USED = MetricSpec(
    "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", per_mig=True
)
FB_RESERVED = MetricSpec(
    "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", per_mig=True
)
NVLINK_BANDWIDTH_TOTAL = MetricSpec(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "counter",
    "Total number of NVLink bandwidth counters for all lanes",
)
VGPU_LICENSE_STATUS = MetricSpec("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status")
UNCORRECTABLE_REMAPPED_ROWS = MetricSpec(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "counter",
    "Number of remapped rows for uncorrectable errors",
)
CORRECTABLE_REMAPPED_ROWS = MetricSpec(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "counter",
    "Number of remapped rows for correctable errors",
)
ROW_REMAP_FAILURE = MetricSpec(
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"
)
GR_ENGINE_ACTIVE = MetricSpec(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "gauge",
    "Ratio of time the graphics engine is active.",
    integer=False,
    also_mig=True,
)
PIPE_TENSOR_ACTIVE = MetricSpec(
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "gauge",
    "Ratio of cycles the tensor (HMMA) pipe is active.",
    integer=False,
    also_mig=True,
)
DRAM_ACTIVE = MetricSpec(
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "gauge",
    "Ratio of cycles the device memory interface is active sending or receiving data.",
    integer=False,
    also_mig=True,
)
PCIE_TX_BYTES = MetricSpec(
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "gauge",
    "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
    "payloads - in bytes per second.",
    integer=False,
)
PCIE_RX_BYTES = MetricSpec(
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "gauge",
    "The rate of data received over the PCIe bus - including both protocol headers and data "
    "payloads - in bytes per second.",
    integer=False,
)

#: The profiling fields NVML's GPM gives (Hopper and newer).
PROF_METRICS: tuple[MetricSpec, ...] = (
    GR_ENGINE_ACTIVE,
    PIPE_TENSOR_ACTIVE,
    DRAM_ACTIVE,
    PCIE_TX_BYTES,
    PCIE_RX_BYTES,
)

#: dcgm-exporter's default set, in the order of its default-counters.csv.
DCGM_METRICS: tuple[MetricSpec, ...] = (
    SM_CLOCK,
    MEM_CLOCK,
    MEMORY_TEMP,
    GPU_TEMP,
    POWER_USAGE,
    TOTAL_ENERGY,
    PCIE_REPLAY,
    GPU_UTIL,
    MEM_COPY_UTIL,
    ENC_UTIL,
    DEC_UTIL,
    XID_ERRORS,
    FB_FREE,
    FB_USED,
    FB_RESERVED,
    NVLINK_BANDWIDTH_TOTAL,
    VGPU_LICENSE_STATUS,
    UNCORRECTABLE_REMAPPED_ROWS,
    CORRECTABLE_REMAPPED_ROWS,
    ROW_REMAP_FAILURE,
    *PROF_METRICS,
)
DCGM_BY_NAME = {spec.name: spec for spec in DCGM_METRICS}

#: The label dcgm-exporter adds to every series from DCGM's driver-version field.
DRIVER_VERSION_LABEL = "DCGM_FI_DRIVER_VERSION"

POD_MEMORY_USED = MetricSpec(
    "kgpu_pod_gpu_memory_used_bytes",
    "gauge",
    "GPU memory used by the container's processes on this GPU or MIG device (in bytes), "
    "accounted from NVML's running compute processes. Accounted, not enforced: only an MPS "
    "pinned-memory limit caps it.",
)
POD_SM_UTIL = MetricSpec(
    "kgpu_pod_gpu_sm_utilization",
    "gauge",
    "SM utilization of the container's processes on this GPU or MIG device (in %), accounted "
    "from NVML's process utilization samples. Accounted, not enforced: only an MPS active "
    "thread percentage caps it; time-slicing shares the GPU without limits.",
    integer=False,
)
SHARE_MEMORY = MetricSpec(
    "kgpu_dra_share_memory_limit_bytes",
    "gauge",
    "GPU memory a DRA claim's share of this GPU holds (its allocation's consumed memory, in "
    "bytes). With consumableShares memory, kgpu's MPS server for the share enforces it as the "
    "pinned device-memory limit; in the unlimited and share-count modes it is not enforced.",
)
SHARE_COMPUTE = MetricSpec(
    "kgpu_dra_share_compute_percent",
    "gauge",
    "Compute share of this GPU a DRA claim's share holds (its consumed computeShares, in % of "
    "the GPU's SMs): the MPS active thread percentage of its server; 0 when the claim asked "
    "none (no guarantee, no cap).",
)
EXPORTER_ERRORS = MetricSpec(
    "kgpu_exporter_errors_total",
    "counter",
    "Telemetry reads that failed since the exporter started; the affected series were left out "
    "of that scrape.",
)
