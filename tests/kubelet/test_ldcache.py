"""The linker-cache reader against the host's real /etc/ld.so.cache and hand-built caches."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kgpu.kubelet.ldcache import (
    OLD_MAGIC,
    LdCacheError,
    build_ld_cache,
    parse_ld_cache,
    read_ld_cache,
)


@pytest.mark.skipif(
    not Path("/etc/ld.so.cache").is_file() or shutil.which("ldconfig") is None,
    reason="needs the host's linker cache and ldconfig",
)
def test_the_hosts_cache_reads_as_ldconfig_prints_it() -> None:
    printed = subprocess.run(
        ["ldconfig", "-p"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    expected = []
    for line in printed:
        if " => " not in line:
            continue
        name, rest = line.strip().split(" (", 1)
        expected.append((name, rest.split(" => ", 1)[1]))
    entries = read_ld_cache("/")
    assert [(e.name, e.path) for e in entries] == expected
    assert {e.bits for e in entries} <= {32, 64}


def test_a_built_cache_round_trips_with_and_without_the_old_format_block() -> None:
    pairs = [
        ("libcuda.so.1", "/usr/lib64/libcuda.so.1"),
        ("libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1"),
    ]
    new = build_ld_cache(pairs)
    assert [(e.name, e.path, e.bits) for e in parse_ld_cache(new)] == [(n, p, 64) for n, p in pairs]
    # glibc before 2.32 wrote an old-format table first (12-byte entries), padded to 8 bytes;
    # offsets in the new part count from the new header, so they stay valid after the prefix.
    old = OLD_MAGIC + struct.pack("<I", 1) + bytes(12)
    old += bytes(-len(old) % 8)
    assert [(e.name, e.path) for e in parse_ld_cache(old + new)] == pairs


def test_32_bit_and_foreign_entries_are_told_apart_or_skipped() -> None:
    data = bytearray(build_ld_cache([("libcuda.so.1", "/usr/lib/libcuda.so.1")], flags=0x0003))
    assert [e.bits for e in parse_ld_cache(bytes(data))] == [32]  # i386 libc6
    data = bytearray(build_ld_cache([("libfoo.so.1", "/opt/libfoo.so.1")], flags=0x7703))
    assert parse_ld_cache(bytes(data)) == []  # an ABI kgpu does not know


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a cache at all, just text that is long enough for a header......",
        build_ld_cache([("libcuda.so.1", "/x")])[:60],  # entries cut off
        OLD_MAGIC + struct.pack("<I", 10**9),  # an old block claiming a billion entries
    ],
)
def test_what_is_not_a_cache_is_refused_without_reading_past_the_data(data: bytes) -> None:
    with pytest.raises(LdCacheError):
        parse_ld_cache(data)


def test_offsets_out_of_range_drop_only_that_entry(tmp_path: Path) -> None:
    good = build_ld_cache([("libcuda.so.1", "/usr/lib64/libcuda.so.1"), ("libx.so.1", "/l")])
    corrupt = bytearray(good)
    struct.pack_into("<I", corrupt, 48 + 24 + 4, 10**6)  # second entry's key points nowhere
    assert [e.name for e in parse_ld_cache(bytes(corrupt))] == ["libcuda.so.1"]
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(bytes(corrupt))
    assert [e.name for e in read_ld_cache(tmp_path)] == ["libcuda.so.1"]
    with pytest.raises(OSError):
        read_ld_cache(tmp_path / "nowhere")
