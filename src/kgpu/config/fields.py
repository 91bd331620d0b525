"""Turning pydantic's view of a bad document into problems a user can act on.

Upstream parses these files with Go's ``encoding/json`` (through ``sigs.k8s.io/yaml``): a wrong
type is an error, an unknown key is silently dropped. kgpu keeps both behaviours but says more:
every error names the field path and what is allowed, and every dropped key becomes a warning
that names it, so a typo such as ``replica: 4`` no longer vanishes without a trace.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.userfiles import parse_yaml, parse_yaml_mapping
from kgpu.userfiles import yaml_error_message as yaml_error_message  # re-exported


class StrictModel(BaseModel):
    """Base for upstream file formats: exact types, unknown keys kept aside for warnings."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True, frozen=True)


_MESSAGES = {
    "missing": "is required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


def _message(error: Any) -> str:
    kind = error.get("type", "")
    if kind in _MESSAGES:
        return str(_MESSAGES[kind])
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"must be one of {expected}"
    msg = str(error.get("msg", "is invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


def _did_you_mean(error: Any) -> str:
    """For a missing field, the misspelt key the user probably meant (``replica`` for
    ``replicas``): upstream would drop the typo silently and then complain about the field."""
    loc = tuple(error.get("loc", ()))
    given = error.get("input")
    if error.get("type") != "missing" or not loc or not isinstance(given, dict):
        return ""
    wanted = str(loc[-1])
    close = difflib.get_close_matches(wanted, [str(k) for k in given], n=1, cutoff=0.6)
    return f" (found {close[0]!r}: did you mean {wanted!r}?)" if close else ""


def _loc_path(prefix: str, loc: tuple[Any, ...]) -> str:
    parts: list[str | int] = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts.append(item)
        elif isinstance(item, str):
            # pydantic names union members and tagged choices in loc; they are not user fields
            if item.startswith(("function-", "literal[", "list[", "dict[", "union[")) or item in {
                "str",
                "int",
                "bool",
            }:
                continue
            parts.append(item)
    return join_path(*parts)


def problems_from(exc: ValidationError, *, file: str, entry: str, prefix: str = "") -> FieldError:
    """One :class:`FieldProblem` per pydantic error, at the user's field path."""
    problems: list[FieldProblem] = []
    seen: set[tuple[str, str]] = set()
    for error in exc.errors():
        path = _loc_path(prefix, tuple(error.get("loc", ())))
        message = _message(error) + _did_you_mean(error)
        if (path, message) in seen:
            continue
        seen.add((path, message))
        problems.append(FieldProblem(message, path, file, entry))
    return FieldError(problems)


def unknown_fields(model: BaseModel, path: str = "") -> Iterator[str]:
    """Paths of keys the model does not know, recursively (what upstream silently drops)."""
    extra = model.model_extra or {}
    for key in extra:
        yield join_path(path, key) if path else key
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = field.alias or name
        sub = join_path(path, key) if path else key
        yield from _unknown_in(value, sub)


def _unknown_in(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, BaseModel):
        yield from unknown_fields(value, path)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _unknown_in(item, join_path(path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _unknown_in(item, join_path(path, str(key)))


def unknown_warnings(model: BaseModel, *, file: str, entry: str, prefix: str = "") -> list[str]:
    return [
        str(
            FieldProblem(
                "unknown field, ignored (upstream ignores it too)",
                join_path(prefix, path) if prefix else path,
                file,
                entry,
            )
        )
        for path in unknown_fields(model)
    ]


def read_problem(exc: OSError, path: str | object) -> str:
    """Why a file could not be read, with the fix for the common case of a directory."""
    if isinstance(exc, IsADirectoryError):
        return f"is a directory; pass the files in it (for example {path}/*.yaml)"
    return f"cannot read: {exc.strerror or exc}"


def load_yaml_documents(text: str, *, file: str) -> list[Any]:
    """Every document in a YAML stream (empty ones dropped), or a FieldError with the line
    (:func:`kgpu.userfiles.parse_yaml`: duplicate keys, depth, size and alias limits)."""
    return parse_yaml(text, file=file)


def load_yaml_mapping(text: str, *, file: str, entry: str = "") -> dict[str, Any]:
    """A single YAML document that must be a mapping (a ConfigMap entry, for instance)."""
    return parse_yaml_mapping(text, file=file, entry=entry)


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def is_dns_subdomain(name: str) -> bool:
    """What the API server accepts as the name of most kinds (RFC 1123 subdomain)."""
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


def dns_subdomain_problem(name: object) -> str:
    """The message for a name the API server would refuse."""
    return f"must be a DNS subdomain (lowercase letters, digits, '-', '.'), got {name!r}"
