"""Engine counts of MIG profiles (copy engines, decoders, encoders, JPEG and OFA engines): what
NVML's ``nvmlDeviceGetGpuInstanceProfileInfo`` reports per GPU-instance profile and what NVIDIA's
DRA driver publishes as MIG capacities and shared counters.

This is a stop-gap accessor: the hardware model is gaining the same numbers per profile and per
MIG device (``MigProfile.engines`` / ``MigDevice.engines``, field names as here). Once it has
them, :func:`profile_engines` should read ``geometry.profiles[name].engines`` and this table
goes. The numbers are the published ones (NVIDIA's MIG user guide for A100 and A30,
``nvidia-smi mig -lgip`` of GH100 boards for H100/H200, of a GB200 NVL for the GB200 profiles
that were published); a profile missing here has no published table and gets no engine
capacities.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engines:
    """Engines of one GPU instance, as NVML counts them."""

    copy: int = 0
    decoder: int = 0
    encoder: int = 0
    jpeg: int = 0
    ofa: int = 0


_A100 = ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB PCIe")
_A100_80 = ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")
_H100 = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800")
_H200 = ("NVIDIA H200", "NVIDIA H200 NVL")

#: (products, {profile: (copy, decoder, encoder, jpeg, ofa)})
_TABLE: tuple[tuple[tuple[str, ...], dict[str, tuple[int, int, int, int, int]]], ...] = (
    (
        _A100,
        {
            "1g.5gb": (1, 0, 0, 0, 0),
            "1g.5gb+me": (1, 1, 0, 1, 1),
            "1g.10gb": (1, 1, 0, 0, 0),
            "2g.10gb": (2, 1, 0, 0, 0),
            "3g.20gb": (3, 2, 0, 0, 0),
            "4g.20gb": (4, 2, 0, 0, 0),
            "7g.40gb": (7, 5, 0, 1, 1),
        },
    ),
    (
        _A100_80,
        {
            "1g.10gb": (1, 0, 0, 0, 0),
            "1g.10gb+me": (1, 1, 0, 1, 1),
            "1g.20gb": (1, 1, 0, 0, 0),
            "2g.20gb": (2, 1, 0, 0, 0),
            "3g.40gb": (3, 2, 0, 0, 0),
            "4g.40gb": (4, 2, 0, 0, 0),
            "7g.80gb": (7, 5, 0, 1, 1),
        },
    ),
    (
        ("NVIDIA A30",),
        {
            "1g.6gb": (1, 0, 0, 0, 0),
            "1g.6gb+me": (1, 1, 0, 1, 1),
            "2g.12gb": (2, 2, 0, 0, 0),
            "2g.12gb+me": (2, 2, 0, 1, 1),
            "4g.24gb": (4, 4, 0, 1, 1),
        },
    ),
    (
        _H100,
        {
            "1g.10gb": (1, 1, 0, 1, 0),
            "1g.10gb+me": (1, 1, 0, 1, 1),
            "1g.20gb": (1, 1, 0, 1, 0),
            "2g.20gb": (2, 2, 0, 2, 0),
            "3g.40gb": (3, 3, 0, 3, 0),
            "4g.40gb": (4, 4, 0, 4, 0),
            "7g.80gb": (8, 7, 0, 7, 1),
        },
    ),
    (
        _H200,
        {
            "1g.18gb": (1, 1, 0, 1, 0),
            "1g.18gb+me": (1, 1, 0, 1, 1),
            "1g.35gb": (1, 1, 0, 1, 0),
            "2g.35gb": (2, 2, 0, 2, 0),
            "3g.71gb": (3, 3, 0, 3, 0),
            "4g.71gb": (4, 4, 0, 4, 0),
            "7g.141gb": (8, 7, 0, 7, 1),
        },
    ),
    (
        ("NVIDIA GB200",),
        {
            "1g.23gb": (2, 1, 0, 1, 0),
            "1g.23gb+me": (2, 1, 0, 1, 1),
            "1g.47gb": (2, 1, 0, 1, 0),
            "2g.47gb": (4, 2, 0, 2, 0),
        },
    ),
)

_BY_PRODUCT: dict[str, dict[str, Engines]] = {
    product: {name: Engines(*counts) for name, counts in profiles.items()}
    for products, profiles in _TABLE
    for product in products
}


def profile_engines(product_name: str, profile: str) -> Engines | None:
    """The engines of MIG profile ``profile`` on the product NVML calls ``product_name``; None
    when no published table gives them."""
    return _BY_PRODUCT.get(product_name, {}).get(profile)
