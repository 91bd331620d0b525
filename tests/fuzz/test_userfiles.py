"""kgpu.userfiles: the one way user files are read (issue 11), and the values from files that
become paths or config lines (MPS roots, IMEX node IPs)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kgpu import userfiles
from kgpu.agent.upstream import read_environment
from kgpu.cli import app
from kgpu.computedomain.api import DomainNode
from kgpu.computedomain.imex import node_ip, render_hosts
from kgpu.config.plugin import host_root
from kgpu.errors import FieldError

from .harness import REPO

YAML_FILES = sorted((REPO / "examples").rglob("*.yaml")) + sorted(
    (REPO / "tests" / "data" / "fuzz").rglob("*.yaml")
)


def _outcome(text: str, loader: type) -> object:
    try:
        return [d for d in userfiles._documents(text, loader) if d is not None]
    except yaml.YAMLError as exc:
        return userfiles.yaml_error_message(exc)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_libyaml_and_pure_python_read_every_file_alike(path: Path) -> None:
    """The C parser is the fast path; without libyaml the pure one must say the same."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        pytest.skip("not UTF-8 (refused before parsing)")
    fast = _outcome(text, userfiles._Loader)
    pure = _outcome(text, userfiles._PyLoader)
    if isinstance(fast, str) and "nested more than" in fast:
        assert isinstance(pure, str) and "nested more than" in pure  # libyaml stops at 1,000
    else:
        assert fast == pure


def test_aliases_and_merge_keys_within_the_limit_load() -> None:
    text = (
        "base: &b {cpu: 1, labels: &l {a: b}}\n"
        "one: {<<: *b, name: one}\n"
        "two: {<<: *b, name: two, extra: *l}\n"
        "many: [" + ", ".join(["*l"] * 1000) + "]\n"
    )
    doc = userfiles.parse_yaml(text, file="f.yaml")[0]
    assert doc["one"] == {"cpu": 1, "labels": {"a": "b"}, "name": "one"}
    assert doc["two"]["extra"] == {"a": "b"} and len(doc["many"]) == 1000


def test_a_bomb_is_refused_at_the_alias_that_crosses_the_limit() -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    levels += [
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]" for p, c in zip("abcd", "bcde", strict=True)
    ]
    text = "\n".join(levels) + "\n"
    assert userfiles.parse_yaml("\n".join(levels[:4]), file="f")  # 10,000 repeated: fine
    with pytest.raises(FieldError, match=r"f: line 5, column \d+: the aliases .* repeat more than"):
        userfiles.parse_yaml(text, file="f")


def test_special_files_are_refused_by_name_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    done: list[str] = []

    def read() -> None:
        try:
            userfiles.read_text(fifo)
        except FieldError as exc:
            done.append(str(exc))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert done == [f"{fifo}: is a named pipe (FIFO), not a file"]
    with pytest.raises(FieldError, match="/dev/zero: is a character device"):
        userfiles.read_text("/dev/zero")
    with pytest.raises(FieldError, match=r"is a directory; pass the files in it"):
        userfiles.read_text(tmp_path)
    assert userfiles.file_problem(fifo) == "is a named pipe (FIFO), not a file"


def test_size_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(userfiles.MAX_FILE_BYTES + 1)  # sparse: no 8 MiB written
    with pytest.raises(
        FieldError, match=r"big.yaml: is 8.0 MiB; kgpu reads files of at most 8 MiB"
    ):
        userfiles.read_bytes(big)
    ok = tmp_path / "ok.yaml"
    ok.write_bytes(b"a: 1\n" + b"#" * 1000)
    assert userfiles.read_yaml(ok) == [{"a": 1}]


def test_bad_encodings_name_line_and_column() -> None:
    with pytest.raises(FieldError, match=r"^f: line 2, column 4: byte 0xff is not UTF-8"):
        userfiles.decode(b"a: 1\nb: \xff\n", file="f")
    assert userfiles.decode(b"\xef\xbb\xbfa: 1", file="f") == "a: 1"  # a UTF-8 BOM is fine


def test_json_limits() -> None:
    assert userfiles.parse_json('{"a": [1, {"b": null}]}', file="s.json") == {"a": [1, {"b": None}]}
    with pytest.raises(FieldError, match="nested more than 100 levels"):
        userfiles.parse_json("[" * 101 + "]" * 101, file="s.json")
    with pytest.raises(FieldError, match=r"line 1, column 6: not valid JSON"):
        userfiles.parse_json('{"a":', file="s.json")


def test_validate_parses_a_large_pod_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11: a 1.3 MB Pod was parsed four times by the pure-Python loader (19 s)."""
    env = "".join(f"    - name: VAR_{i}\n      value: v{i}\n" for i in range(5000))
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n"
        f"  - name: c\n    image: busybox\n    env:\n{env}"
    )
    calls: list[int] = []
    real = userfiles._documents

    def counting(text: str, loader: type | None = None) -> object:
        calls.append(len(text))
        return real(text, loader)

    monkeypatch.setattr(userfiles, "_documents", counting)
    result = CliRunner().invoke(app, ["validate", str(pod)])
    assert result.exit_code == 0, result.output
    assert calls == [pod.stat().st_size]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/run/nvidia/mps/", "/run/nvidia/mps"),
        ("//run//nvidia/./mps", "/run/nvidia/mps"),
        ("/", "/"),
        ("run/mps", "is not an absolute path"),
        ("/run/../etc", "must not contain '..'"),
        ("/run/\x00", "must not contain a NUL byte"),
    ],
)
def test_host_roots_are_absolute_and_normalised(given: str, expected: str) -> None:
    if expected.startswith("/"):
        assert host_root(given) == expected
    else:
        with pytest.raises(ValueError, match=expected):
            host_root(given)


def test_environment_roots_get_the_same_check() -> None:
    """MPS_ROOT, NVIDIA_DRIVER_ROOT... (the upstream device plugin's variables) set what the
    config file's flags set, through the same check."""
    settings, problems = read_environment({"MPS_ROOT": "/run/mps/", "NVIDIA_DEV_ROOT": "/a/.."}, {})
    assert dict(settings.flags) == {"mpsRoot": "/run/mps"}
    assert [p.path for p in problems] == ["NVIDIA_DEV_ROOT"]
    assert "must not contain '..'" in problems[0].message


def test_imex_node_ips_are_parsed_never_copied() -> None:
    node = {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1\nIMEX_CMD_PORT=1"},
                {"type": "InternalIP", "address": "fd00::0001"},
            ]
        }
    }
    assert node_ip(node, "n") == "fd00::1"  # the first one is not an address: skipped
    garbage = {"status": {"addresses": [{"type": "InternalIP", "address": "../../x"}]}}
    assert node_ip(garbage, "n") == node_ip(None, "n")  # as a node without an InternalIP
    assert node_ip({"status": {"addresses": "x"}}, "n") == node_ip(None, "n")
    daemons = [
        DomainNode(f"n{i}", ip, "c", i)
        for i, ip in enumerate(["10.0.0.2", "10.0.0.1\nX=1", "x", " 10.0.0.10 "])
    ]
    assert render_hosts(daemons, "c") == (
        "10.0.0.2\tcompute-domain-daemon-0000\n10.0.0.10\tcompute-domain-daemon-0003\n"
    )
