"""Kubernetes quantities: one parser (kgpu.quantity) for pod requests in the simulator and for
capacities in CEL device selectors, accepting what the API server accepts."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from kgpu.dra.cel import compile_selector, device_view
from kgpu.quantity import QuantityError, parse_quantity
from kgpu.sim.quantity import to_units

DEVICE = device_view("gpu.nvidia.com", {"name": "gpu-0", "attributes": {}, "capacity": {}})

VALID: list[tuple[object, Decimal]] = [
    ("100m", Decimal("0.1")),
    ("1Gi", Decimal(2**30)),
    ("1G", Decimal(10**9)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("5e-1", Decimal("0.5")),
    ("0.5", Decimal("0.5")),
    (".5", Decimal("0.5")),
    ("5.", Decimal(5)),
    ("+2", Decimal(2)),
    ("1.5k", Decimal(1500)),
    ("64Mi", Decimal(64 * 2**20)),
    ("129M", Decimal(129 * 10**6)),
    ("250u", Decimal("0.00025")),
    ("3n", Decimal("3e-9")),
    ("2Ei", Decimal(2 * 2**60)),
    (" 8 ", Decimal(8)),
    (4, Decimal(4)),  # YAML `cpu: 4`
    (0.25, Decimal("0.25")),  # YAML `cpu: 0.25`
]
INVALID: list[object] = [
    "1K",  # kilo is a lower-case k
    "1Kb",
    "10 Ki",
    "1e3Mi",  # an exponent takes no suffix
    "1mi",
    "Gi",
    "",
    ".",
    "1.2.3",
    "0x10",
    "--1",
    "1e",
    "lots",
]


@pytest.mark.parametrize(("text", "value"), VALID)
def test_kubernetes_quantity_forms(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", INVALID)
def test_invalid_quantities_are_rejected_with_the_api_servers_words(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    message = str(err.value)
    assert message.startswith(repr(text))
    assert "quantities must match the regular expression" in message
    assert "for example 1, 500m, 64Mi, 1Gi" in message


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}, float("nan")])
def test_non_quantities_are_rejected(value: object) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        parse_quantity(value)


def _cel_accepts(text: str) -> bool:
    return bool(compile_selector(f"isQuantity({text!r})").evaluate(DEVICE))


@pytest.mark.parametrize("text", [t for t, _ in VALID if isinstance(t, str)] + INVALID)
def test_simulator_and_cel_agree(text: str) -> None:
    """A request the simulator takes is a quantity to a CEL selector, and the other way round."""
    try:
        units = to_units("memory", text)
    except QuantityError:
        units = None
    assert (units is not None) == _cel_accepts(text)
    if units is not None:
        value = parse_quantity(text)
        assert units == math.ceil(value)  # rounded up to whole bytes
        assert compile_selector(f"quantity({text!r}).compareTo(quantity('{value}')) == 0").evaluate(
            DEVICE
        )
