"""Kubernetes resource quantities (``resource.Quantity``): ``100m``, ``64Mi``, ``1G``, ``1e3``.

One parser for every layer that reads quantities: pod requests in the simulator, capacities in
CEL device selectors and the DRA allocator, ComputeDomain placement. It follows the API
server's grammar exactly, so what kgpu accepts is what ``kubectl apply`` accepts::

    <quantity>     ::= <sign>? <number> <suffix>
    <number>       ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>       ::= "" | Ki | Mi | Gi | Ti | Pi | Ei        (binary, powers of 1024)
                     | n | u | m | k | M | G | T | P | E       (decimal SI)
                     | e<sign>?<digits> | E<sign>?<digits>    (decimal exponent)

Values are exact :class:`~decimal.Decimal` numbers; callers round as they need (the scheduler
rounds requests up to whole units, as the API server does).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
DECIMAL_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]+))?$"
)
#: The API server's wording for a string it cannot parse (``resource.ParseQuantity``).
K8S_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity: ``"64Mi"`` -> 67108864, ``"100m"`` -> 0.1.

    Integers and floats (what YAML makes of ``cpu: 2`` or ``cpu: 0.5``) are taken as numbers;
    booleans and other types are refused. Surrounding whitespace is ignored.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{value!r} is not a quantity (a string such as 500m or 1Gi)")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity (not a finite number)")
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(
            f"{value!r} is not a quantity: {K8S_FORMAT} (for example 1, 500m, 64Mi, 1Gi, 1e3)"
        )
    number_text, suffix, exponent = match.groups()
    try:
        number = Decimal(number_text)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"{value!r} is not a quantity") from exc
    try:
        if exponent is not None:
            return number.scaleb(int(exponent))
        if suffix in BINARY_SUFFIXES:
            return number * BINARY_SUFFIXES[suffix]
        return number * DECIMAL_SUFFIXES[suffix or ""]
    except ArithmeticError as exc:  # an exponent beyond what Decimal holds
        raise QuantityError(f"{value!r}: quantity too large") from exc


def format_binary(value: int) -> str:
    """An integer as the API server writes a ``BinarySI`` quantity (what Go's
    ``resource.NewQuantity(n, resource.BinarySI).String()`` gives): the largest binary suffix
    that divides it exactly (``85899345920`` -> ``80Gi``, ``3072`` -> ``3Ki``; ``1536`` stays
    ``1536``), and plain digits below 1024. Drivers publish capacities this way, so kgpu's
    slices read like upstream's."""
    if -1024 < value < 1024:
        return str(value)
    for suffix, size in reversed(BINARY_SUFFIXES.items()):
        if value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


__all__ = [
    "BINARY_SUFFIXES",
    "DECIMAL_SUFFIXES",
    "QuantityError",
    "format_binary",
    "parse_quantity",
]
