"""Counters CSV in dcgm-exporter's format: what it selects, what it refuses, what it warns of."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.errors import FieldError
from kgpu.metrics import fields as F
from kgpu.metrics.counters import (
    DEFAULT,
    MAX_BYTES,
    counters_for,
    load_counters,
    parse_counters,
)

from .conftest import parse_series

runner = CliRunner()


def default_csv() -> str:
    """A file in the layout of dcgm-exporter's default-counters.csv: comments, blank lines,
    aligned columns, the driver-version label, and fields left commented out."""
    lines = ["# Format", "# DCGM FIELD, Prometheus metric type, help message", ""]
    for spec in F.DCGM_METRICS:
        lines.append(f"{spec.name + ',':42} {spec.type + ',':8} {spec.help}")
        if spec is F.ROW_REMAP_FAILURE:
            lines += ["", "DCGM_FI_DRIVER_VERSION,        label, Driver Version", ""]
    lines.append("# DCGM_FI_PROF_SM_ACTIVE, gauge, commented out: not selected")
    return "\n".join(lines) + "\n"


def test_the_default_layout_selects_exactly_the_default_set() -> None:
    counters = parse_counters(default_csv(), "default-counters.csv")
    assert counters.metrics == F.DCGM_METRICS
    assert counters.driver_version_label
    assert counters.warnings == ()
    assert len(DEFAULT.metrics) == 25


# dcgm-exporter's TestExtractCounters cases (internal/pkg/counters/counter_config_test.go)
@pytest.mark.parametrize(
    ("line", "valid"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n", True),
        ("DCGM_EXP_XID_ERRORS_COUNTXXX, gauge, temperature\n", False),
    ],
)
def test_dcgm_exporters_extract_counters_cases(line: str, valid: bool) -> None:
    if valid:
        counters = parse_counters(line, "f.csv")
        assert [m.name for m in counters.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
        assert counters.metrics[0].help == "temperature"
    else:
        with pytest.raises(FieldError, match="is not a DCGM field"):
            parse_counters(line, "f.csv")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge\n", "line 1: expected 3 fields"),
        ("# c\nDCGM_FI_DEV_GPU_TEMP, gauge, a, b\n", "line 2: expected 3 fields"),
        ("DCGM_FI_DEV_GPU_TEMP, gaug, temperature\n", "type 'gaug' is not one of gauge"),
        ("GPU_TEMP, gauge, temperature\n", "'GPU_TEMP' is not a DCGM field"),
        ('DCGM_FI_DEV_GPU_TEMP, gauge, "unterminated\n', "line 1"),
    ],
)
def test_malformed_lines_name_the_file_and_line(text: str, problem: str) -> None:
    with pytest.raises(FieldError) as info:
        parse_counters(text, "my.csv")
    assert str(info.value).startswith("my.csv: line ")
    assert problem in str(info.value)


def test_fields_kgpu_cannot_serve_are_warnings_naming_file_line_and_field() -> None:
    text = (
        "DCGM_FI_DEV_GPU_UTIL, gauge, util\n"
        "DCGM_FI_DEV_POWER_VIOLATION, counter, power throttling\n"
        "DCGM_EXP_XID_ERRORS_COUNT, counter, xids in the window\n"
        "DCGM_FI_DEV_GPU_UTIL, gauge, again\n"
        "DCGM_FI_DEV_FB_USED, histogram, fb\n"
        "DCGM_FI_DRIVER_VERSION, gauge, not a label\n"
    )
    counters = parse_counters(text, "cm.csv")
    assert [m.name for m in counters.metrics] == ["DCGM_FI_DEV_GPU_UTIL"]
    assert not counters.driver_version_label
    assert counters.warnings == (
        "cm.csv: line 2: DCGM_FI_DEV_POWER_VIOLATION: kgpu cannot serve this field from NVML; "
        "skipped",
        "cm.csv: line 3: DCGM_EXP_XID_ERRORS_COUNT: kgpu cannot serve this field from NVML; "
        "skipped",
        "cm.csv: line 4: DCGM_FI_DEV_GPU_UTIL: listed again (line 1 counts)",
        "cm.csv: line 5: DCGM_FI_DEV_FB_USED: kgpu serves it as one sample (gauge or counter), "
        "not as histogram; skipped",
        "cm.csv: line 6: DCGM_FI_DRIVER_VERSION: kgpu serves it only as a label (type label); "
        "skipped",
    )


def test_the_files_type_and_help_are_what_the_exposition_says() -> None:
    counters = parse_counters('DCGM_FI_DEV_XID_ERRORS, counter, "last XID, any GPU"\n', "f")
    (spec,) = counters.metrics
    assert (spec.type, spec.help) == ("counter", "last XID, any GPU")


def test_files_that_are_not_counters_files(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(b"#" * (MAX_BYTES + 10))
    with pytest.raises(FieldError, match="larger than"):
        load_counters(big)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FieldError, match="not UTF-8"):
        load_counters(binary)
    with pytest.raises(FieldError, match=r"nope\.csv: cannot read"):
        load_counters(tmp_path / "nope.csv")


def test_the_environment_variable_is_the_fallback(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    assert counters_for(None, {}) is DEFAULT
    assert [
        m.name for m in counters_for(None, {"DCGM_EXPORTER_COLLECTORS": str(path)}).metrics
    ] == ["DCGM_FI_DEV_GPU_TEMP"]
    other = tmp_path / "d.csv"
    other.write_text("DCGM_FI_DEV_SM_CLOCK, gauge, c\n")
    chosen = counters_for(other, {"DCGM_EXPORTER_COLLECTORS": str(path)})
    assert [m.name for m in chosen.metrics] == ["DCGM_FI_DEV_SM_CLOCK"]


def test_kgpu_metrics_takes_the_file_by_flag_or_environment(tmp_path: Path) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, double-bit errors\n"
    )
    base = ["metrics", "--machine", "t4", "--kubelet-root", "", "--once", "--hostname", "n"]
    for args, env in ((["-f", str(path)], {}), ([], {"DCGM_EXPORTER_COLLECTORS": str(path)})):
        result = runner.invoke(app, base + args, env=env)
        assert result.exit_code == 0, result.output
        assert {name for name, _, _ in parse_series(result.stdout)} == {"DCGM_FI_DEV_GPU_TEMP"}
        assert "DCGM_FI_DRIVER_VERSION" not in result.stdout
        assert f"{path}: line 2: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in result.stderr
    bad = runner.invoke(app, [*base, "--collectors", str(tmp_path / "missing.csv")])
    assert bad.exit_code == 1
    assert "missing.csv: cannot read the counters file" in bad.output
    assert "Traceback" not in bad.output
