"""Which metrics to serve: dcgm-exporter's counters CSV.

dcgm-exporter reads the fields to collect from a CSV (``-f`` / ``--collectors FILE``,
``DCGM_EXPORTER_COLLECTORS``; default ``/etc/dcgm-exporter/default-counters.csv``), one field a
line — ``DCGM field, Prometheus type, help message`` — with ``#`` comment lines. The file sets
each family's TYPE and HELP; a ``label`` line turns a field into a label on every series
(``DCGM_FI_DRIVER_VERSION``). Users keep such files in ConfigMaps, so kgpu reads them unchanged:

* a malformed line (not 3 fields, an unknown Prometheus type, a name that is not a DCGM field)
  is an error naming the file and line, as in dcgm-exporter;
* a DCGM field kgpu cannot serve from NVML (``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``,
  ``DCGM_FI_PROF_SM_ACTIVE``, the ``DCGM_EXP_*`` exporter fields...) is a *warning* naming the file,
  line and field, and is skipped: a file written for dcgm-exporter still works;
* without a file kgpu serves the 25 metrics of dcgm-exporter's default file.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from kgpu.errors import FieldError, FieldProblem
from kgpu.metrics import fields as F
from kgpu.userfiles import file_problem

ENV = "DCGM_EXPORTER_COLLECTORS"
PROMETHEUS_TYPES = ("gauge", "counter", "histogram", "summary", "label")
#: The types a served DCGM field may have (a value is one sample: no histogram or summary).
SAMPLE_TYPES = ("gauge", "counter")
MAX_BYTES = 1024 * 1024

_FIELD_RE = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")
#: dcgm-exporter's own fields (not DCGM's): the only DCGM_EXP_ names it accepts.
EXPORTER_FIELDS = (
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
    "DCGM_EXP_P2P_STATUS",
)


@dataclass(frozen=True)
class CounterSet:
    """The families to serve, with the TYPE and HELP the file gave them, whether series carry
    the driver-version label, and what the file asked for that kgpu cannot serve."""

    metrics: tuple[F.MetricSpec, ...] = F.DCGM_METRICS
    driver_version_label: bool = True
    warnings: tuple[str, ...] = ()
    source: str = "built-in default (dcgm-exporter's default-counters.csv)"

    @property
    def names(self) -> frozenset[str]:
        return frozenset(spec.name for spec in self.metrics)

    def __contains__(self, spec: F.MetricSpec) -> bool:
        return spec.name in self.names


DEFAULT = CounterSet()


def parse_counters(text: str, source: str) -> CounterSet:
    """The counter set a CSV in dcgm-exporter's format selects; FieldError for a bad line."""
    metrics: list[F.MetricSpec] = []
    seen: dict[str, int] = {}
    warnings: list[str] = []
    driver_label = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            (record,) = list(csv.reader(io.StringIO(line), skipinitialspace=True, strict=True))
        except (csv.Error, ValueError) as exc:
            raise _error(source, number, f"not a CSV record: {exc}") from None
        record = [field.strip() for field in record]
        if len(record) != 3:
            raise _error(
                source,
                number,
                f"expected 3 fields (DCGM field, Prometheus type, help message), got "
                f"{len(record)}: {line.strip()!r}",
            )
        name, kind, help_text = record
        if not _FIELD_RE.match(name) and name not in EXPORTER_FIELDS:
            raise _error(
                source,
                number,
                f"{name!r} is not a DCGM field (DCGM_FI_...) or one of dcgm-exporter's "
                f"({', '.join(EXPORTER_FIELDS)})",
            )
        if kind not in PROMETHEUS_TYPES:
            raise _error(
                source,
                number,
                f"{name}: Prometheus type {kind!r} is not one of {', '.join(PROMETHEUS_TYPES)}",
            )
        where = f"{source}: line {number}: {name}"
        if name in seen:
            warnings.append(f"{where}: listed again (line {seen[name]} counts)")
            continue
        seen[name] = number
        if name == F.DRIVER_VERSION_LABEL:
            if kind == "label":
                driver_label = True
            else:
                warnings.append(f"{where}: kgpu serves it only as a label (type label); skipped")
            continue
        spec = F.DCGM_BY_NAME.get(name)
        if spec is None:
            warnings.append(f"{where}: kgpu cannot serve this field from NVML; skipped")
            continue
        if kind not in SAMPLE_TYPES:
            warnings.append(
                f"{where}: kgpu serves it as one sample (gauge or counter), not as {kind}; skipped"
            )
            continue
        metrics.append(replace(spec, type=kind, help=help_text))
    return CounterSet(tuple(metrics), driver_label, tuple(warnings), source)


def _error(source: str, line: int, problem: str) -> FieldError:
    return FieldError(FieldProblem(problem, path=f"line {line}", file=source))


def load_counters(path: str | Path) -> CounterSet:
    """The counter set of the CSV at ``path``; FieldError naming the file when it cannot be
    read or a line is malformed."""
    path = Path(path)
    problem = file_problem(path)  # a FIFO would block the open below; /dev/zero is no CSV
    if problem:
        raise FieldError(
            FieldProblem(
                f"cannot read the counters file: {problem.removeprefix('cannot read: ')}",
                file=str(path),
            )
        )
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise FieldError(
            FieldProblem(f"cannot read the counters file: {exc.strerror or exc}", file=str(path))
        ) from None
    if len(data) > MAX_BYTES:
        raise FieldError(
            FieldProblem(f"larger than {MAX_BYTES} bytes: not a counters CSV", file=str(path))
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FieldError(FieldProblem("not UTF-8 text", file=str(path))) from None
    return parse_counters(text, str(path))


def counters_for(path: str | Path | None, env: Mapping[str, str] | None = None) -> CounterSet:
    """The counter set for a ``-f`` value: the file given, else ``$DCGM_EXPORTER_COLLECTORS``,
    else the built-in default."""
    env = os.environ if env is None else env
    chosen = path or env.get(ENV)
    return load_counters(chosen) if chosen else DEFAULT
