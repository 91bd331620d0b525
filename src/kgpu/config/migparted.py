"""The mig-parted config (``version: v1``, ``mig-configs``) and the layouts it selects.

Format and selection follow NVIDIA/mig-parted's ``api/spec/v1``: each named config is a list of
entries; an entry applies to the GPUs its ``devices`` names (``all`` or a list of indices) whose
PCI device id matches its optional ``device-filter``; ``mig-enabled: false`` turns MIG off, and
``mig-enabled: true`` with ``mig-devices`` asks for exactly those GPU instances. Whether the
instances fit is the hardware layer's business (:func:`kgpu.hardware.mig.apply_layout`).

The GPU Operator's default configs (``all-disabled``, ``all-balanced``, ``all-1g.10gb`` ...)
ship as a data file, so ``nvidia.com/mig.config=all-balanced`` works with no file at all.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from kgpu.config.fields import StrictModel, load_yaml_mapping, problems_from, unknown_warnings
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.hardware.model import Gpu

_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb([+-][a-z]+(\.[a-z]+)*)?$")
BUILTIN_SOURCE = "built-in GPU Operator mig-parted config"


class MigConfigSpec(StrictModel):
    """One entry of a named mig config."""

    device_filter: str | list[str] | None = Field(None, alias="device-filter")
    devices: str | list[int]
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, int] | None = Field(None, alias="mig-devices")

    @field_validator("devices", mode="after")
    @classmethod
    def _devices(cls, value: str | list[int]) -> str | list[int]:
        if isinstance(value, str) and value != "all":
            raise ValueError(f"must be 'all' or a list of GPU indices, not {value!r}")
        if isinstance(value, list) and any(i < 0 for i in value):
            raise ValueError("GPU indices must be >= 0")
        return value

    @field_validator("mig_devices", mode="after")
    @classmethod
    def _profiles(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for name, count in (value or {}).items():
            if not _PROFILE.match(name):
                raise ValueError(
                    f"{name!r} is not a MIG profile name (like 1g.10gb, 3g.40gb, 1g.10gb+me)"
                )
            if count < 0:
                raise ValueError(f"count for {name} must be >= 0")
        return value

    @model_validator(mode="after")
    def _enabled(self) -> MigConfigSpec:
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices is set but mig-enabled is false")
        return self

    def filters(self) -> tuple[str, ...]:
        if self.device_filter is None:
            return ()
        raw = [self.device_filter] if isinstance(self.device_filter, str) else self.device_filter
        return tuple(f.upper().replace("0X", "0x") for f in raw)

    def selects(self, gpu: Gpu) -> bool:
        if isinstance(self.devices, list) and gpu.index not in self.devices:
            return False
        wanted = self.filters()
        if not wanted:
            return True
        device_id = pci_device_id(gpu.product_name)
        return device_id is not None and device_id in wanted


class MigPartedSpec(StrictModel):
    version: str
    mig_configs: dict[str, list[MigConfigSpec]] = Field(alias="mig-configs")

    @field_validator("version", mode="after")
    @classmethod
    def _version(cls, value: str) -> str:
        if value != "v1":
            raise ValueError(f"unknown version: {value} (allowed: v1)")
        return value


@dataclass(frozen=True, eq=False)
class MigConfig:
    """One named mig config and where it came from (for error messages)."""

    name: str
    entries: tuple[MigConfigSpec, ...]
    source: str


@dataclass(frozen=True)
class ParsedMigParted:
    configs: dict[str, MigConfig]
    warnings: tuple[str, ...]


def parse_mig_parted(data: Any, *, file: str = "", entry: str = "") -> ParsedMigParted:
    if not isinstance(data, dict):
        raise FieldError(
            FieldProblem("a mig-parted config must be a mapping", file=file, entry=entry)
        )
    try:
        spec = MigPartedSpec.model_validate(data)
    except ValidationError as exc:
        raise problems_from(exc, file=file, entry=entry) from None
    warnings = unknown_warnings(spec, file=file, entry=entry)
    warnings += _hardware_warnings(spec, file=file, entry=entry)
    configs = {
        name: MigConfig(name, tuple(entries), file or entry)
        for name, entries in spec.mig_configs.items()
    }
    return ParsedMigParted(configs, tuple(warnings))


_PCI_ID = re.compile(r"^0[xX][0-9a-fA-F]{8}$")


def _known_profiles() -> frozenset[str]:
    """Profile names NVIDIA GPUs offer: kgpu's geometry tables plus every name the GPU
    Operator's default configs use (B200, H100 NVL... that kgpu has no machine for)."""
    from kgpu.hardware.mig import known_profile_names

    builtin = {
        name
        for cfg in builtin_mig_configs().values()
        for item in cfg.entries
        for name in item.mig_devices or {}
    }
    return known_profile_names() | builtin


def _hardware_warnings(spec: MigPartedSpec, *, file: str, entry: str) -> list[str]:
    """A profile name no NVIDIA GPU has, or a device-filter that is not a PCI id, would
    otherwise only show when the layout meets a machine (``kgpu plan``), not in validate."""
    if file == BUILTIN_SOURCE:
        return []
    profiles = _known_profiles()
    out: list[str] = []
    for name, entries in spec.mig_configs.items():
        for i, item in enumerate(entries):
            at = join_path("mig-configs", name, i)
            for profile in item.mig_devices or {}:
                if profile not in profiles:
                    sample = ", ".join(sorted(profiles)[:4])
                    out.append(
                        str(
                            FieldProblem(
                                f"profile {profile} is offered by no NVIDIA GPU kgpu knows of "
                                f"({sample}, ...; `kgpu machines <machine>` lists a GPU's "
                                "profiles)",
                                join_path(at, "mig-devices", profile),
                                file,
                                entry,
                            )
                        )
                    )
            raw = item.device_filter
            for f in [raw] if isinstance(raw, str) else raw or []:
                if not _PCI_ID.match(f):
                    out.append(
                        str(
                            FieldProblem(
                                f"{f!r} is not a PCI device id (0x<device><vendor>, 8 hex "
                                "digits, e.g. 0x20B210DE for NVIDIA A100-SXM4-80GB); this "
                                "entry applies to no GPU",
                                join_path(at, "device-filter"),
                                file,
                                entry,
                            )
                        )
                    )
    return out


def layout_for(
    config: MigConfig, gpus: tuple[Gpu, ...]
) -> tuple[dict[int, dict[str, int] | None], list[str]]:
    """What ``config`` asks of each GPU (absent: untouched), and warnings about the selection.

    As mig-parted walks entries in order, a GPU selected by several entries ends up with the last.
    """
    layout: dict[int, dict[str, int] | None] = {}
    warnings: list[str] = []
    present = {gpu.index for gpu in gpus}
    for i, spec in enumerate(config.entries):
        if isinstance(spec.devices, list):
            missing = sorted(set(spec.devices) - present)
            if missing:
                warnings.append(
                    str(
                        FieldProblem(
                            f"GPU {', '.join(map(str, missing))} not on this machine; skipped",
                            join_path("mig-configs", config.name, i, "devices"),
                            config.source,
                        )
                    )
                )
        for gpu in gpus:
            if not spec.selects(gpu):
                continue
            if not spec.mig_enabled:
                layout[gpu.index] = None
            elif not gpu.mig_capable:
                raise FieldError(
                    FieldProblem(
                        f"GPU {gpu.index} ({gpu.product_name}) is not MIG capable, "
                        "so mig-enabled: true cannot apply to it",
                        join_path("mig-configs", config.name, i),
                        config.source,
                    )
                )
            else:
                layout[gpu.index] = {k: v for k, v in (spec.mig_devices or {}).items() if v}
    if not layout and gpus:
        warnings.append(
            str(
                FieldProblem(
                    f"mig config {config.name!r} selects no GPU on this machine (no entry's "
                    "devices and device-filter match one); MIG is left as it is",
                    join_path("mig-configs", config.name),
                    config.source,
                )
            )
        )
    return layout, warnings


# PCI device ids (``0x<device><vendor>``) of the MIG-capable products, keyed by NVML name:
# what mig-parted's device-filter matches against.
_PCI_DEVICE_IDS = {
    "NVIDIA A100-SXM4-40GB": "0x20B010DE",
    "NVIDIA A100-PCIE-40GB": "0x20F110DE",
    "NVIDIA A100 40GB PCIe": "0x20F110DE",
    "NVIDIA A100-SXM4-80GB": "0x20B210DE",
    "NVIDIA A100 80GB PCIe": "0x20B510DE",
    "NVIDIA A30": "0x20B710DE",
    "NVIDIA A800-SXM4-80GB": "0x20F310DE",
    "NVIDIA H100 80GB HBM3": "0x233010DE",
    "NVIDIA H100 PCIe": "0x233110DE",
    "NVIDIA H800": "0x232410DE",
    "NVIDIA H100 NVL": "0x232110DE",
    "NVIDIA GH200 480GB": "0x234210DE",
    "NVIDIA H200": "0x233510DE",
    "NVIDIA H200 NVL": "0x233B10DE",
    "NVIDIA B200": "0x290110DE",
    "NVIDIA GB200": "0x294110DE",
}


def pci_device_id(product_name: str) -> str | None:
    return _PCI_DEVICE_IDS.get(product_name)


@functools.cache
def builtin_mig_configs() -> dict[str, MigConfig]:
    """The GPU Operator's default mig-parted configs (``default-mig-parted-config``)."""
    text = (
        resources.files("kgpu.config").joinpath("data/default-mig-parted-config.yaml").read_text()
    )
    data = load_yaml_mapping(text, file=BUILTIN_SOURCE)
    parsed = parse_mig_parted(data, file=BUILTIN_SOURCE)
    return parsed.configs
