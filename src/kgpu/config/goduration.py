"""Go's ``time.Duration`` as upstream's config files hold it.

GFD's ``flags.gfd.sleepInterval`` is a Go duration with upstream's own JSON decoding: a number is
nanoseconds (JSON numbers are float64, truncated toward zero as Go converts them), a string is
parsed by ``time.ParseDuration`` (``"60s"``, ``"1m30s"``, ``"1.5h"``, ``"-2ms"``, ``"0"``), and the
word ``infinite`` means the largest duration (GFD labels once and then sleeps forever). Python has
no parser with Go's grammar, so this is one, with Go's error wording.
"""

from __future__ import annotations

import math
from typing import Any

INFINITE = 2**63 - 1  # math.MaxInt64 nanoseconds: upstream's "infinite"
_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}


def parse_go_duration(text: str) -> int:
    """``time.ParseDuration``: nanoseconds, or ValueError with Go's message."""
    orig = text
    negative = False
    if text[:1] in ("-", "+"):
        negative = text[0] == "-"
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise ValueError(f'time: invalid duration "{orig}"')
    total = 0
    while text:
        if not (text[0] == "." or text[0].isdigit()):
            raise ValueError(f'time: invalid duration "{orig}"')
        i = 0
        while i < len(text) and "0" <= text[i] <= "9":
            i += 1
        whole = int(text[:i]) if i else 0
        seen_digits = i > 0
        text = text[i:]
        fraction, scale = 0, 1
        if text.startswith("."):
            text = text[1:]
            i = 0
            while i < len(text) and "0" <= text[i] <= "9":
                i += 1
            if i:
                # Go keeps at most the digits that fit; more precision changes nothing in ns
                digits = text[:i][:18]
                fraction, scale = int(digits), 10 ** len(digits)
                seen_digits = True
            text = text[i:]
        if not seen_digits:
            raise ValueError(f'time: invalid duration "{orig}"')
        i = 0
        while i < len(text) and text[i] != "." and not ("0" <= text[i] <= "9"):
            i += 1
        unit_name = text[:i]
        text = text[i:]
        if not unit_name:
            raise ValueError(f'time: missing unit in duration "{orig}"')
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise ValueError(f'time: unknown unit "{unit_name}" in duration "{orig}"')
        value = whole * unit
        if fraction:
            # Go adds the fraction in float64, as here
            value += int(float(fraction) * (float(unit) / scale))
        total += value
        if total > 2**63 - 1 + (1 if negative else 0):
            raise ValueError(f'time: invalid duration "{orig}"')
    return -total if negative else total


def decode_duration(value: Any) -> int:
    """Upstream's ``Duration.UnmarshalJSON``: a number of nanoseconds, a Go duration string or
    ``infinite``; ValueError says what is accepted."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f"{value!r} is not a duration (a number of nanoseconds, a duration such as 60s or "
            "1m30s, or infinite)"
        )
    if isinstance(value, str):
        if value == "infinite":
            return INFINITE
        try:
            return parse_go_duration(value)
        except ValueError as exc:
            raise ValueError(f"{exc} (for example 60s, 1m30s, or infinite)") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a number of nanoseconds")
    nanoseconds = int(value)  # float64 -> int64 truncates toward zero, as Go converts it
    if not -(2**63) <= nanoseconds <= 2**63 - 1:
        raise ValueError(f"{value!r} nanoseconds is out of range for a Go duration")
    return nanoseconds
