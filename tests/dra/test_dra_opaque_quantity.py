"""MPS memory limits in a GpuConfig go through kgpu's one quantity parser."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.dra import opaque
from kgpu.errors import FieldError

PATH = "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit"


@pytest.mark.parametrize(("text", "value"), [("1e3", 1000), ("0.5Ki", 512), ("1.", 1), ("1m", 1)])
def test_quantities_round_up_to_whole_bytes(text: str, value: int) -> None:
    assert opaque.parse_quantity(text, PATH) == value


@pytest.mark.parametrize("text", ["1e100000000", "5u", "5n", 1.5, True, "1Gb", ""])
def test_bad_quantity_is_a_field_error_naming_the_field(text: Any) -> None:
    with pytest.raises(FieldError) as info:
        opaque.parse_quantity(text, PATH)
    assert info.value.problems[0].path == PATH
    assert "is not a quantity such as '1Gi'" in info.value.problems[0].message
