"""The samples a Prometheus server would hold: series with their history, scrape by scrape.

:meth:`History.scrape` records one scrape of a target the way Prometheus' scrape loop does: every
sample gets the scrape's timestamp and the target's labels (``job``, ``instance``; a label the
exporter already set wins, as with ``honor_labels: true``, which dcgm-exporter's ServiceMonitor
uses), an ``up`` series says the target answered, and a series the target stops exposing gets a
staleness marker at the next scrape, so an instant query stops returning it at once instead of
five minutes later. :meth:`History.append` adds raw samples (backfill, tests).

History is bounded: :meth:`History.trim` drops samples older than what any query can read
(``retention_s``), and the simulator calls it as its clock advances.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from kgpu.promql.ast import Matcher

#: Sorted ``(name, value)`` pairs; ``__name__`` is one of them. Hashable, so usable as a key.
Labels = tuple[tuple[str, str], ...]

#: Prometheus' default lookback for instant selectors (``--query.lookback-delta``).
LOOKBACK_MS = 5 * 60 * 1000
#: The most history a query may read (its longest range plus offset). Each evaluation of a
#: range reads every sample in it, and KEDA evaluates every 30 s; with no cap, ``[10000y]``
#: keeps every sample of the run and reads them all at each poll (minutes, growing memory).
#: kgpu's simulated Prometheus keeps this much, and refuses a query that would read further.
MAX_RANGE_MS = 6 * 3600 * 1000


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """Labels from a mapping; empty values are dropped (Prometheus never stores them)."""
    return tuple(sorted((k, str(v)) for k, v in mapping.items() if v != ""))


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass
class Series:
    """One series: times (ms) ascending; a value of None is a staleness marker."""

    labels: Labels
    times: list[int] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)

    def add(self, t_ms: int, value: float | None) -> None:
        if self.times and t_ms <= self.times[-1]:
            if t_ms == self.times[-1]:
                self.values[-1] = value  # the same timestamp again: the newer value wins
                return
            raise ValueError(
                f"out-of-order sample for {render_labels(self.labels)}: {t_ms} ms is before "
                f"{self.times[-1]} ms"
            )
        self.times.append(t_ms)
        self.values.append(value)

    def latest(self, mint: int, maxt: int) -> float | None:
        """The value of the newest sample in ``[mint, maxt]``; None if there is none or it is
        a staleness marker."""
        i = bisect.bisect_right(self.times, maxt) - 1
        if i < 0 or self.times[i] < mint:
            return None
        return self.values[i]

    def points(self, mint: int, maxt: int) -> list[tuple[int, float]]:
        """The samples in ``[mint, maxt]`` without staleness markers."""
        lo = bisect.bisect_left(self.times, mint)
        hi = bisect.bisect_right(self.times, maxt)
        return [
            (t, v)
            for t, v in zip(self.times[lo:hi], self.values[lo:hi], strict=True)
            if v is not None
        ]

    def trim(self, before_ms: int) -> None:
        cut = bisect.bisect_left(self.times, before_ms)
        if cut:
            del self.times[:cut]
            del self.values[:cut]


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def render_labels(labels: Labels) -> str:
    """``{__name__="foo", a="1"}``, as Prometheus' ``labels.Labels.String`` prints a series."""
    return "{" + ", ".join(f"{k}={_quote(v)}" for k, v in labels) + "}"


class History:
    """Series by metric name, as a Prometheus TSDB would hold them for queries."""

    def __init__(self, retention_s: float = 3600.0) -> None:
        self.retention_ms = to_ms(retention_s)
        self._by_name: dict[str, dict[Labels, Series]] = {}
        self._last_scrape: dict[Labels, set[Labels]] = {}  # target -> series it exposed

    def __len__(self) -> int:
        return sum(len(series) for series in self._by_name.values())

    def series(self) -> Iterator[Series]:
        for by_labels in self._by_name.values():
            yield from by_labels.values()

    def append(self, labels: Mapping[str, str] | Labels, t: float, value: float | None) -> None:
        """One sample at ``t`` seconds (None records a staleness marker)."""
        key = labels if isinstance(labels, tuple) else labels_of(labels)
        name = dict(key).get("__name__", "")
        if not name:
            raise ValueError(f"a sample needs a metric name (__name__): {dict(key)}")
        by_labels = self._by_name.setdefault(name, {})
        series = by_labels.get(key)
        if series is None:
            series = by_labels[key] = Series(key)
        series.add(to_ms(t), value)

    def scrape(
        self,
        t: float,
        samples: Iterable[tuple[Mapping[str, str], float]],
        target: Mapping[str, str] | None = None,
        up: bool = True,
    ) -> None:
        """Record one scrape of ``target`` (its ``job``/``instance`` labels) at ``t`` seconds:
        each sample is ``(labels with __name__, value)``."""
        target_labels = dict(target or {})
        seen: set[Labels] = set()
        for labels, value in samples:
            merged = {**target_labels, **labels}
            key = labels_of(merged)
            self.append(key, t, float(value))
            seen.add(key)
        if target_labels and up:
            key = labels_of({**target_labels, "__name__": "up"})
            self.append(key, t, 1.0)
            seen.add(key)
        target_key = labels_of(target_labels)
        for gone in self._last_scrape.get(target_key, set()) - seen:
            self.append(gone, t, None)
        self._last_scrape[target_key] = seen

    def scrape_text(self, t: float, text: str, target: Mapping[str, str] | None = None) -> None:
        """Record a scrape of a Prometheus text exposition (what ``/metrics`` answers)."""
        self.scrape(t, parse_exposition(text), target)

    def select(self, matchers: Sequence[Matcher]) -> list[Series]:
        """Every series all ``matchers`` accept, ordered by labels as the TSDB returns them."""
        name = next((m.value for m in matchers if m.name == "__name__" and m.op == "="), None)
        if name is not None:
            candidates: Iterable[Series] = self._by_name.get(name, {}).values()
        else:
            candidates = self.series()
        out = []
        for series in candidates:
            labels = dict(series.labels)
            if all(m.matches(labels.get(m.name, "")) for m in matchers):
                out.append(series)
        out.sort(key=lambda s: s.labels)
        return out

    def trim(self, now: float) -> None:
        """Drop samples older than the retention before ``now`` seconds, and empty series."""
        before = to_ms(now) - self.retention_ms
        for name in list(self._by_name):
            by_labels = self._by_name[name]
            for key in list(by_labels):
                series = by_labels[key]
                series.trim(before)
                if not series.times:
                    del by_labels[key]
            if not by_labels:
                del self._by_name[name]


_SAMPLE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(-?[0-9]+))?[ \t]*$"
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_NAME = re.compile(r"[^{ \t]*")
_VALUES = {"+inf": math.inf, "-inf": -math.inf, "inf": math.inf, "nan": math.nan}


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _metric_name(line: str) -> str:
    match = _NAME.match(line)
    return match.group(0) if match else ""


def parse_exposition(
    text: str, names: Collection[str] | None = None
) -> list[tuple[dict[str, str], float]]:
    """The samples of a Prometheus text exposition (format 0.0.4), as ``(labels with
    __name__, value)``, sample names exactly as written (``prometheus_client``'s parser renames
    counters to ``*_total``, which Prometheus does not). With ``names``, only those metrics
    (other lines are skipped unread, as a scrape that drops them with ``metric_relabel_configs``
    keeps nothing of them). Raises ValueError on a bad line."""
    out: list[tuple[dict[str, str], float]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if names is not None and _metric_name(line.lstrip()) not in names:
            continue
        match = _SAMPLE.match(line.strip())
        if match is None:
            raise ValueError(f"line {number}: not a sample line: {line!r}")
        name, body, raw_value = match.group(1), match.group(2), match.group(3)
        labels = {"__name__": name}
        pos = 0
        body = (body or "").strip()
        while pos < len(body):
            label = _LABEL.match(body, pos)
            if label is None:
                raise ValueError(f"line {number}: bad label set: {{{body}}}")
            labels[label.group(1)] = _unescape(label.group(2))
            pos = label.end()
        try:
            value = _VALUES.get(raw_value.lower())
            out.append((labels, float(raw_value) if value is None else value))
        except ValueError:
            raise ValueError(f"line {number}: bad value {raw_value!r}") from None
    return out
