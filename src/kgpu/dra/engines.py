"""Engine counts of MIG profiles (copy engines, decoders, encoders, JPEG and OFA engines), as
NVIDIA's DRA driver publishes them for MIG devices and their shared counters. The numbers live
once, in the hardware model's MIG geometry (:class:`kgpu.hardware.model.MigEngines` per
profile: what NVML's ``nvmlDeviceGetGpuInstanceProfileInfo`` reports, or the published tables
for built-in products); a profile without a published table has none here either.
"""

from __future__ import annotations

from kgpu.hardware.mig import geometry_for_product
from kgpu.hardware.model import MigEngines

#: The DRA layer's name for the hardware model's engine counts.
Engines = MigEngines


def profile_engines(product_name: str, profile: str) -> MigEngines | None:
    """The engines of MIG profile ``profile`` on the product NVML calls ``product_name``; None
    when no published table gives them."""
    geometry = geometry_for_product(product_name)
    found = geometry.profiles.get(profile) if geometry is not None else None
    return found.engines if found is not None else None


__all__ = ["Engines", "profile_engines"]
