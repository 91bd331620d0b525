"""Stable colours: a workload keeps its colour from run to run and from report to report.

Each name hashes (FNV-1a, not Python's salted ``hash``) to one of :data:`PALETTE`'s colours, so
the same Deployment has the same colour in every report a team compares. Two names of one
report that hash to the same colour would be indistinguishable, so :func:`assign` gives the
later one (in name order) the next free colour; only then does a colour depend on the other
names. Fills are mid-light (dark outlines and the white of a free replica stay distinct);
:func:`stroke` darkens a fill for lines on white.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Fills, after Tableau's 20-colour palette (its pairs of a hue), greys left out: grey marks a
#: GPU the device plugin does not advertise.
PALETTE = (
    "#4e79a7",
    "#a0cbe8",
    "#f28e2b",
    "#ffbe7d",
    "#59a14f",
    "#8cd17d",
    "#b6992d",
    "#f1ce63",
    "#499894",
    "#86bcb6",
    "#e15759",
    "#ff9d9a",
    "#d37295",
    "#fabfd2",
    "#b07aa1",
    "#d4a6c8",
    "#9d7660",
    "#d7b5a6",
)

#: How far the next free colour is looked for: coprime with the palette's size (every colour is
#: tried) and not 1, which would give the same hue's other shade.
STEP = 5

FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193


def fnv1a(text: str) -> int:
    """32-bit FNV-1a of the UTF-8 bytes: small, fast and the same on every machine."""
    h = FNV_OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return h


def fill(name: str) -> str:
    """The colour ``name`` hashes to."""
    return PALETTE[fnv1a(name) % len(PALETTE)]


def assign(names: Iterable[str]) -> dict[str, str]:
    """A fill per name: its own (:func:`fill`) unless a name before it in order took it, then
    the next free one (:data:`STEP` along the palette); once all are taken, colours repeat."""
    out: dict[str, str] = {}
    taken: set[int] = set()
    for name in sorted(set(names)):
        slot = fnv1a(name) % len(PALETTE)
        if len(taken) < len(PALETTE):
            while slot in taken:
                slot = (slot + STEP) % len(PALETTE)
        taken.add(slot)
        out[name] = PALETTE[slot]
    return out


def stroke(color: str) -> str:
    """A line colour for a fill: the darker shade of the palette's pair, darkened to 80 %
    (any other colour to 55 %), at least 3:1 against white (WCAG's ratio for lines and other
    non-text marks) while keeping the hue recognisable."""
    if color in PALETTE:
        color, factor = PALETTE[PALETTE.index(color) & ~1], 0.8
    else:
        factor = 0.55
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return "#{:02x}{:02x}{:02x}".format(*(round(c * factor) for c in (r, g, b)))


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two ``#rrggbb`` colours."""

    def luminance(color: str) -> float:
        def channel(c: int) -> float:
            s = c / 255
            return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

        r, g, bl = (channel(int(color[i : i + 2], 16)) for i in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * bl

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
