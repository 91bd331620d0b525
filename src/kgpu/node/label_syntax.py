"""Node labels a user types: ``--label k=v`` arguments and the label maps of a scenario.

A label given by hand selects device-plugin and MIG configs exactly as the Node's own labels
would, so it must be one the API server would accept on a Node (:func:`kgpu.node.labels.
is_valid_label_key` / ``is_valid_label_value``). One parser and one wording for every command
(``plan``, ``agent``, the simulator's scenarios).
"""

from __future__ import annotations

from collections.abc import Iterable

from kgpu.errors import FieldError, FieldProblem
from kgpu.node.labels import is_valid_label_key, is_valid_label_value


def label_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a label key, or None."""
    if isinstance(key, str) and is_valid_label_key(key):
        return None
    return (
        f"{key!r} is not a valid label key ([prefix/]name: an optional DNS subdomain prefix, "
        "a name of at most 63 letters, digits, '-', '_', '.', starting and ending alphanumeric)"
    )


def label_value_problem(key: str, value: str) -> str | None:
    """Why ``value`` cannot be the value of label ``key``, or None."""
    if is_valid_label_value(value):
        return None
    return (
        f"{value!r} is not a valid label value for {key} (at most 63 letters, digits, '-', '_', "
        "'.', starting and ending alphanumeric, or empty)"
    )


def parse_label_args(items: Iterable[str], option: str = "--label") -> dict[str, str]:
    """``["k=v", ...]`` -> mapping; FieldError naming the bad item (``--label[1]``)."""
    out: dict[str, str] = {}
    for i, item in enumerate(items):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        path = f"{option}[{i}]"
        if not sep or not key:
            raise FieldError(FieldProblem(f"{item!r} is not key=value", path=path))
        problem = label_key_problem(key) or label_value_problem(key, value)
        if problem:
            raise FieldError(FieldProblem(problem, path=path))
        out[key] = value
    return out


__all__ = ["label_key_problem", "label_value_problem", "parse_label_args"]
