"""glibc's linker cache (``/etc/ld.so.cache``): which shared library lives where.

The dynamic linker finds ``libcuda.so.1`` through this cache, so it is the authority on where a
node's driver libraries are (``/usr/lib/x86_64-linux-gnu``, ``/usr/lib64``, a driver
container's ``/run/nvidia/driver/usr/lib64``...). Reading it from the driver root, rather than
running ``ldconfig -p``, works for a driver root that is not this process' own root and needs
no binary from the host.

The format (glibc ``elf/cache.c``), all little-endian on the platforms NVIDIA ships drivers for:

* optionally an old-format block first: the magic ``ld.so-1.7.0`` + NUL, a ``uint32`` entry
  count, that many 12-byte entries (``int32`` flags, ``uint32`` key and value offsets), padded
  to 8 bytes;
* the new-format header: magic ``glibc-ld.so.cache``, version ``1.1``, ``uint32`` entry count,
  ``uint32`` string-table size, 3 unused ``uint32`` and 8 bytes of padding (48 bytes);
* that many 24-byte entries: ``int32`` flags, ``uint32`` key (the soname) and value (the path)
  offsets, ``uint32`` OS version, ``uint64`` hwcap;
* NUL-terminated strings; new-format offsets count from the new header's first byte.

The flags' low byte says the library type (1 = ELF), the next byte the ABI: 0x03 x86-64,
0x0a AArch64, 0x05 ppc64le (64-bit); 0x00 i386, 0x08 x32, 0x09 ARM hard-float (32-bit).
Entries of other types or ABIs are skipped, as the toolkit's reader skips them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

CACHE_PATH = "etc/ld.so.cache"
OLD_MAGIC = b"ld.so-1.7.0\x00"
NEW_MAGIC = b"glibc-ld.so.cache"
NEW_VERSION = b"1.1"
_OLD_HEADER = struct.Struct("<12sI")
_OLD_ENTRY_SIZE = 12
_NEW_HEADER = struct.Struct("<17s3sII12x8x")
_NEW_ENTRY = struct.Struct("<iIIIQ")

FLAG_ELF = 0x0001
_TYPE_MASK = 0x00FF
_ARCH_MASK = 0xFF00
ARCH_BITS = {0x0300: 64, 0x0A00: 64, 0x0500: 64, 0x0000: 32, 0x0800: 32, 0x0900: 32}

#: A cache larger than this is not a linker cache (a real one with 3000 libraries is ~200 KiB).
MAX_CACHE_BYTES = 64 * 1024 * 1024


class LdCacheError(ValueError):
    """The file is not a linker cache kgpu can read."""


@dataclass(frozen=True)
class CacheEntry:
    """One library: its soname (``libcuda.so.1``), where it is, and 32 or 64 bits."""

    name: str
    path: str
    bits: int
    flags: int


def _string(data: bytes, offset: int) -> str | None:
    if offset >= len(data):
        return None
    end = data.find(b"\x00", offset)
    if end < 0:
        return None
    return data[offset:end].decode("utf-8", "surrogateescape")


def parse_ld_cache(data: bytes) -> list[CacheEntry]:
    """Every ELF entry of a linker cache, in cache order (the linker's search order)."""
    start = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < _OLD_HEADER.size:
            raise LdCacheError("truncated old-format header")
        _, count = _OLD_HEADER.unpack_from(data)
        start = _OLD_HEADER.size + count * _OLD_ENTRY_SIZE
        start += -start % 8
    if len(data) < start + _NEW_HEADER.size:
        raise LdCacheError("no glibc-ld.so.cache header")
    magic, version, count, _table = _NEW_HEADER.unpack_from(data, start)
    if magic != NEW_MAGIC or version != NEW_VERSION:
        raise LdCacheError(f"unknown cache format {magic!r} {version!r}")
    first = start + _NEW_HEADER.size
    if first + count * _NEW_ENTRY.size > len(data):
        raise LdCacheError(f"{count} entries do not fit in {len(data)} bytes")
    strings = data[start:]
    out: list[CacheEntry] = []
    for i in range(count):
        flags, key, value, _os, _hwcap = _NEW_ENTRY.unpack_from(data, first + i * _NEW_ENTRY.size)
        if not flags & _TYPE_MASK & FLAG_ELF:
            continue
        bits = ARCH_BITS.get(flags & _ARCH_MASK)
        if bits is None:
            continue
        name, path = _string(strings, key), _string(strings, value)
        if name and path:
            out.append(CacheEntry(name, path, bits, flags))
    return out


def read_ld_cache(root: Path | str = "/") -> list[CacheEntry]:
    """The entries of ``<root>/etc/ld.so.cache``; paths stay as the cache writes them (relative
    to ``root``). Raises OSError when there is no cache, :class:`LdCacheError` when it is not
    one."""
    path = Path(root) / CACHE_PATH
    with path.open("rb") as handle:
        data = handle.read(MAX_CACHE_BYTES + 1)
    if len(data) > MAX_CACHE_BYTES:
        raise LdCacheError(f"{path}: larger than {MAX_CACHE_BYTES} bytes")
    return parse_ld_cache(data)


def build_ld_cache(entries: list[tuple[str, str]], *, flags: int = 0x0303) -> bytes:
    """A new-format cache listing (soname, path) pairs, as ``ldconfig`` writes it: for driver
    roots laid out by tests and benchmarks. ``flags`` defaults to ELF x86-64 (libc6)."""
    strings = bytearray()
    offsets: list[tuple[int, int]] = []
    base = _NEW_HEADER.size + len(entries) * _NEW_ENTRY.size
    for name, path in entries:
        key = base + len(strings)
        strings += name.encode() + b"\x00"
        value = base + len(strings)
        strings += path.encode() + b"\x00"
        offsets.append((key, value))
    out = bytearray(_NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, len(entries), len(strings)))
    for key, value in offsets:
        out += _NEW_ENTRY.pack(flags, key, value, 0, 0)
    return bytes(out + strings)
