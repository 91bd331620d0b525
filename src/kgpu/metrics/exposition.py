"""A small renderer for the Prometheus text exposition format (version 0.0.4).

kgpu owns its exposition rather than going through ``prometheus_client`` families because the
names are a contract with dcgm-exporter's users: its counters have no ``_total`` suffix, its
label order is fixed, and its values print as ``%d`` for integer fields and ``%f`` for double
fields. Rendering straight from pre-built label strings also keeps a scrape cheap: every label
set of a device is escaped once and shared by all of that device's series.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kgpu.metrics.fields import MetricSpec

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label_value(value: str) -> str:
    """Escape a label value as the text format requires: backslash, double quote, newline."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


@dataclass
class Family:
    """One metric family: its spec and its series as (pre-rendered labels, value)."""

    spec: MetricSpec
    samples: list[tuple[str, float]] = field(default_factory=list)

    def add(self, labels: str, value: float) -> None:
        self.samples.append((labels, value))


def render(families: Sequence[Family], keep_empty: Iterable[str] = ()) -> str:
    """The exposition text. Families without series are left out (as dcgm-exporter does),
    except those named in ``keep_empty``, which keep their HELP and TYPE lines."""
    keep = set(keep_empty)
    out: list[str] = []
    for family in families:
        spec = family.spec
        if not family.samples and spec.name not in keep:
            continue
        out.append(f"# HELP {spec.name} {escape_help(spec.help)}\n")
        out.append(f"# TYPE {spec.name} {spec.type}\n")
        name = spec.name
        integer = spec.integer
        for labels, value in family.samples:
            # dcgm-exporter's formatting: %d for int64 fields, %f for double fields
            text = f"{int(value):d}" if integer else f"{value:f}"
            if labels:
                out.append(f"{name}{{{labels}}} {text}\n")
            else:
                out.append(f"{name} {text}\n")
    return "".join(out)
