"""Reading the files users hand to kgpu: one way, bounded, with errors that name the file.

Every command reads configs, manifests, scenarios, allocator inputs and machine snapshots
through here, so each of them refuses the same things the same way, before any other work:

- a path that is not a regular file, by what it is (``/dev/zero``, a FIFO, a directory), and a
  file name with a NUL byte or over the system's name limits;
- a file over :data:`MAX_FILE_BYTES`;
- bytes that are not UTF-8 (with the line and column of the first bad byte);
- YAML nested deeper than :data:`MAX_DEPTH`, with more than :data:`MAX_NODES` values, or whose
  aliases repeat more than :data:`MAX_ALIAS_NODES` values (an "alias bomb": a few hundred bytes
  that stand for billions of values; loading shares them, but every walk over the result —
  error rendering, schema checks — expands them), or an alias inside the node it names;
- a duplicated mapping key (Go's YAML decoders, and so kubectl and the device plugin, refuse
  the document; PyYAML would keep the last value without a word);
- scalars PyYAML's constructors cannot build (``2024-13-45``, a 5,000-digit integer).

YAML is parsed once per file, by libyaml (PyYAML's C parser) when it is installed; the limits
are counted on the parser's events as they arrive, so a bomb or a deep nest is refused before a
node of it is built. JSON is parsed by the standard library and checked against the same limits.

The limits are far above what real files need (a 1.3 MB Pod has ~125,000 values and nests 8
levels) and low enough that every walk over a loaded file stays fast and small.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
)
from yaml.nodes import MappingNode, Node
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from kgpu.errors import FieldError, FieldProblem

MAX_FILE_BYTES = 8 * 2**20
"""The largest file read (8 MiB). The API server takes request bodies of at most 3 MiB and
etcd objects of at most 1.5 MiB; several objects in one file, or Helm values, fit easily."""

MAX_DEPTH = 100
"""The deepest nesting of mappings and lists (real Kubernetes objects nest ~10-20 levels)."""

MAX_NODES = 1_000_000
"""The most values (scalars, lists, mappings, aliases) in one file."""

MAX_ALIAS_NODES = 100_000
"""The most values that aliases (``*name``) may repeat in one file, counting each alias as the
whole node it names, nested aliases included."""

_CONTROL = {
    stat.S_IFDIR: "is a directory",
    stat.S_IFCHR: "is a character device (such as /dev/zero), not a file",
    stat.S_IFBLK: "is a block device, not a file",
    stat.S_IFIFO: "is a named pipe (FIFO), not a file",
    stat.S_IFSOCK: "is a socket, not a file",
}


def _fail(message: str, file: str, entry: str = "") -> FieldError:
    return FieldError(FieldProblem(message, file=file, entry=entry))


def open_problem(exc: OSError, path: str) -> str:
    """Why a file could not be opened, in the user's terms."""
    if exc.errno == errno.ENAMETOOLONG:
        longest = max((len(part.encode()) for part in Path(path).parts), default=0)
        return (
            f"the file name is too long ({len(path.encode())} bytes, longest part {longest}; "
            "the system allows 255 bytes per name)"
        )
    return f"cannot read: {exc.strerror or exc}"


def kind_problem(mode: int, path: str) -> str:
    """What a path is when it is not a regular file ("" when it is one)."""
    if stat.S_ISREG(mode):
        return ""
    what = _CONTROL.get(stat.S_IFMT(mode), "is not a regular file")
    if stat.S_ISDIR(mode):
        return f"{what}; pass the files in it (for example {path}/*.yaml)"
    return what


def shown_path(path: str | Path) -> str:
    """A path as an error line may print it: as it is when printable and short, else quoted
    (a NUL or a newline in a name) and cut."""
    text = os.fspath(path)
    if text.isprintable() and len(text) <= 300:
        return text
    return repr(text[:300]) + ("..." if len(text) > 300 else "")


def file_problem(path: str | Path) -> str:
    """Why ``path`` cannot be read as a user file ("" when it can), without opening it: a
    FIFO is never opened (that would wait for a writer)."""
    shown = os.fspath(path)
    if "\x00" in shown:
        return "the file name contains a NUL byte"
    try:
        info = os.stat(shown)
    except OSError as exc:
        return open_problem(exc, shown)
    except ValueError as exc:
        return f"not a usable file name: {exc}"
    problem = kind_problem(info.st_mode, shown)
    if problem:
        return problem
    if info.st_size > MAX_FILE_BYTES:
        return _too_large(info.st_size)
    return ""


def _too_large(size: int) -> str:
    return (
        f"is {size / 2**20:.1f} MiB; kgpu reads files of at most {MAX_FILE_BYTES // 2**20} MiB "
        "(split it into several files)"
    )


#: The file name that means standard input, as in most Unix tools (``kgpu validate -``).
STDIN = "-"
#: How errors name standard input.
STDIN_NAME = "<stdin>"


def display_name(path: str | Path, shown: str | None = None) -> str:
    """How errors name the file: ``shown`` if given, ``<stdin>`` for ``-``, else the path."""
    if shown is not None:
        return shown
    target = os.fspath(path)
    return STDIN_NAME if target == STDIN else target


def _read_stdin(name: str) -> bytes:
    """Standard input, at most :data:`MAX_FILE_BYTES` (read once: a second ``-`` gets
    nothing more)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise _fail("standard input is not readable", name)
    data: bytes = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise _fail(_too_large(len(data)), name)
    return data


def read_bytes(path: str | Path, *, shown: str | None = None) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_FILE_BYTES`; :class:`FieldError`
    naming the file (``shown``, else the path) otherwise."""
    target = os.fspath(path)
    if target == STDIN:
        return _read_stdin(shown if shown is not None else STDIN_NAME)
    name = shown if shown is not None else target
    if "\x00" in target:
        raise _fail("the file name contains a NUL byte", name)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _fail(open_problem(exc, target), name) from None
    except ValueError as exc:
        raise _fail(f"not a usable file name: {exc}", name) from None
    try:
        info = os.fstat(fd)
        problem = kind_problem(info.st_mode, name)
        if problem:
            raise _fail(problem, name)
        if info.st_size > MAX_FILE_BYTES:
            raise _fail(_too_large(info.st_size), name)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_FILE_BYTES:  # it grew while we read
                raise _fail(_too_large(total), name)
            chunks.append(chunk)
    except OSError as exc:
        raise _fail(open_problem(exc, target), name) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}


def decode(data: bytes, *, file: str) -> str:
    """UTF-8 text (a leading byte-order mark dropped); :class:`FieldError` at the first byte
    that is not UTF-8, by line and column."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for bom, encoding in _BOMS.items():
        if data.startswith(bom):
            raise _fail(
                f"is {encoding} text (it starts with a {encoding} byte-order mark); kgpu reads "
                "UTF-8: save it as UTF-8",
                file,
            )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _fail(
            f"line {line}, column {column}: byte 0x{data[exc.start]:02x} is not UTF-8 text "
            "(is this a binary file? kgpu reads UTF-8)",
            file,
        ) from None


def read_text(path: str | Path, *, shown: str | None = None) -> str:
    """The UTF-8 text of a user file (see :func:`read_bytes` and :func:`decode`)."""
    name = display_name(path, shown)
    return decode(read_bytes(path, shown=name), file=name)


# -- YAML ------------------------------------------------------------------------------------


class LimitError(yaml.MarkedYAMLError):
    """A YAML stream over one of this module's limits (not a syntax error)."""

    def __init__(self, problem: str, event: Event) -> None:
        mark: Any = event.start_mark  # libyaml's Mark or PyYAML's: both have line and column
        super().__init__(problem=problem, problem_mark=mark)


class _Limits:
    """Counts the parser's events as the composer takes them: depth, values, what aliases
    repeat. Every check runs before the composer builds (or recurses into) the node."""

    def _init_limits(self) -> None:
        self._depth = 0
        self._nodes = 0
        self._repeated = 0
        self._sizes: dict[str, int] = {}  # anchor -> values it stands for (aliases expanded)
        self._open: list[list[Any]] = []  # [anchor, size] of each collection being read

    def get_event(self) -> Event:
        event: Event = super().get_event()  # type: ignore[misc]
        self._count(event)
        return event

    def _count(self, event: Event) -> None:
        if isinstance(event, DocumentStartEvent | DocumentEndEvent):
            self._sizes.clear()  # anchors are per document
            return
        if isinstance(event, SequenceEndEvent | MappingEndEvent):
            self._depth -= 1
            anchor, size = self._open.pop()
            if anchor is not None:
                self._sizes[anchor] = size
            self._add(size)
            return
        if isinstance(event, AliasEvent):
            anchor = event.anchor
            if any(frame[0] == anchor for frame in self._open):
                raise LimitError(
                    f"alias *{anchor} is inside the node &{anchor} it names (a structure that "
                    "contains itself)",
                    event,
                )
            size = self._sizes.get(str(anchor), 0)
            self._repeated += size
            if self._repeated > MAX_ALIAS_NODES:
                raise LimitError(
                    f"the aliases (*name) in this file repeat more than {MAX_ALIAS_NODES:,} "
                    "values (an alias bomb?); write the values out, or alias less",
                    event,
                )
            self._node(event)
            self._add(size)
            return
        if isinstance(event, ScalarEvent):
            self._node(event)
            if event.anchor is not None:
                self._sizes[event.anchor] = 1
            self._add(1)
            return
        if isinstance(event, CollectionStartEvent):
            self._node(event)
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise LimitError(
                    f"nested more than {MAX_DEPTH} levels deep (kgpu reads YAML nested at most "
                    f"{MAX_DEPTH} levels)",
                    event,
                )
            self._open.append([event.anchor, 1])

    def _node(self, event: Event) -> None:
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise LimitError(
                f"more than {MAX_NODES:,} values in one file (kgpu's limit); split it",
                event,
            )

    def _add(self, size: int) -> None:
        if self._open:
            self._open[-1][1] += size


class _StrictConstructor(SafeConstructor):
    """SafeConstructor that refuses duplicated keys and turns the exceptions its scalar
    constructors raise (a bad date, a 5,000-digit integer) into YAML errors at the scalar."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError, KeyError) as exc:
            raise ConstructorError(
                None,
                None,
                f"cannot read {node.value!r:.60}: {str(exc).split(';')[0]}",
                node.start_mark,
            ) from None

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeConstructor reports it itself
                    continue
                if first is not None:
                    raise ConstructorError(
                        None,
                        None,
                        f"mapping key {key!r:.80} already defined at line "
                        f"{first.start_mark.line + 1}",
                        key_node.start_mark,
                    )
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


class _PyLoader(_Limits, Reader, Scanner, Parser, Composer, _StrictConstructor, Resolver):
    """Pure-Python parsing (PyYAML without libyaml): ~4x slower, same results and limits."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _StrictConstructor.__init__(self)
        Resolver.__init__(self)
        self._init_limits()


_Loader: type[_PyLoader] | type[Any] = _PyLoader
if getattr(yaml, "__with_libyaml__", False):
    from yaml._yaml import CParser

    class _CLoader(_Limits, Composer, CParser, _StrictConstructor, Resolver):
        """libyaml parses; Python composes (counting), constructs and resolves."""

        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            Composer.__init__(self)
            _StrictConstructor.__init__(self)
            Resolver.__init__(self)
            self._init_limits()

    _Loader = _CLoader


def yaml_error_message(exc: yaml.YAMLError) -> str:
    """One line: where the YAML breaks and why (PyYAML's own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character
        shown = f"#x{char:04x}" if isinstance(char, int) else f"#x{ord(char):04x}"
        return (
            f"position {exc.position}: not valid YAML: character {shown} is not allowed "
            "(is this a binary file?)"
        )
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if problem == "exceeded maximum nesting depth":  # libyaml's own limit (1,000 levels)
        return f"{where}nested more than {MAX_DEPTH} levels deep (kgpu's limit)"
    if isinstance(exc, LimitError):
        return f"{where}{problem}"
    return f"{where}not valid YAML: {problem}"


def _documents(text: str, loader_class: type[Any] | None = None) -> Iterator[Any]:
    loader = (loader_class or _Loader)(text)
    try:
        while loader.check_node():
            yield loader.construct_document(loader.get_node())
    finally:
        loader.dispose()


def parse_yaml(text: str, *, file: str, entry: str = "") -> list[Any]:
    """Every document of a YAML stream (empty ones dropped); :class:`FieldError` with the
    line for bad YAML and for input over the limits."""
    try:
        docs = list(_documents(text))
    except yaml.YAMLError as exc:
        raise _fail(yaml_error_message(exc), file, entry) from None
    except RecursionError:  # a limit above should have caught it first
        raise _fail(f"nested too deeply (more than {MAX_DEPTH} levels)", file, entry) from None
    return [doc for doc in docs if doc is not None]


def parse_yaml_mapping(text: str, *, file: str, entry: str = "") -> dict[str, Any]:
    """A single YAML document that must be a mapping (a ConfigMap entry, for instance)."""
    docs = parse_yaml(text, file=file, entry=entry)
    if not docs:
        return {}
    if len(docs) > 1:
        raise _fail(f"{len(docs)} YAML documents; one mapping expected", file, entry)
    doc = docs[0]
    if not isinstance(doc, dict):
        raise _fail(f"must be a YAML mapping, not {type(doc).__name__}", file, entry)
    return doc


def read_yaml(path: str | Path, *, shown: str | None = None) -> list[Any]:
    """Every document of a YAML file (see :func:`read_text` and :func:`parse_yaml`)."""
    name = display_name(path, shown)
    return parse_yaml(read_text(path, shown=name), file=name)


# -- JSON ------------------------------------------------------------------------------------


def parse_json(text: str, *, file: str) -> Any:
    """A JSON document within the YAML limits (depth, values); :class:`FieldError` otherwise."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _fail(f"nested more than {MAX_DEPTH} levels deep (kgpu's limit)", file) from None
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        where = (
            f"line {exc.lineno}, column {exc.colno}: "
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).split(";")[0]
        raise _fail(f"{where}not valid JSON: {message}", file) from None
    _check_json(data, file)
    return data


def _check_json(data: Any, file: str) -> None:
    """Depth and size of parsed JSON, walked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise _fail(
                f"more than {MAX_NODES:,} values in one file (kgpu's limit); split it", file
            )
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise _fail(f"nested more than {MAX_DEPTH} levels deep (kgpu's limit)", file)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def read_json(path: str | Path, *, shown: str | None = None) -> Any:
    """A JSON file (see :func:`read_text` and :func:`parse_json`)."""
    name = display_name(path, shown)
    return parse_json(read_text(path, shown=name), file=name)


__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "STDIN",
    "LimitError",
    "decode",
    "display_name",
    "file_problem",
    "kind_problem",
    "open_problem",
    "parse_json",
    "parse_yaml",
    "parse_yaml_mapping",
    "read_bytes",
    "read_json",
    "read_text",
    "read_yaml",
    "shown_path",
    "yaml_error_message",
]
