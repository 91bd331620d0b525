"""Kubernetes' own kinds checked against the official OpenAPI schemas, strictly.

The schemas come from the ``kubernetes-validate`` package (the ``-strict`` variants: an unknown
field is an error, as ``kubectl apply --validate=strict`` makes it). The package is optional
(``pip install kgpu[test]`` or ``kubernetes-validate``): without it :func:`schema_problems`
returns None and the API server's rules in :mod:`kgpu.manifests.rules` are all that is checked,
for ``kgpu validate`` and ``kgpu sim`` alike. Every error in a document is reported, not only
the first (``kubernetes-validate``'s own API stops at one).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from kgpu.errors import join_path

#: Core kinds known when ``kubernetes-validate`` is not installed (checked by the rules only).
FALLBACK_KINDS = frozenset(
    {
        ("v1", "Pod"),
        ("v1", "ConfigMap"),
        ("v1", "Service"),
        ("v1", "Namespace"),
        ("v1", "ServiceAccount"),
        ("v1", "Secret"),
        ("v1", "PodTemplate"),
        ("v1", "ReplicationController"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "ReplicaSet"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        *(
            (f"resource.k8s.io/{version}", kind)
            for version in ("v1", "v1beta1", "v1beta2")
            for kind in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
        ),
    }
)


class NoSchema(Exception):
    """The schemas have no such kind."""


def available() -> bool:
    """Whether the official schemas are installed."""
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        return False
    return True


def has_kind(api_version: str, kind: str) -> bool:
    """Whether Kubernetes (or, without the schemas, kgpu's fallback list) knows this kind."""
    if not available():
        return (api_version, kind) in FALLBACK_KINDS
    try:
        _validator(api_version, kind)
    except NoSchema:
        return False
    return True


def schema_problems(doc: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(path, message) for every schema violation; None when the schemas are not installed.
    Raises :class:`NoSchema` for a kind they do not have."""
    if not available():
        return None
    validator = _validator(str(doc["apiVersion"]), str(doc["kind"]))
    out = []
    try:
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))
    except (KeyError, TypeError) as exc:  # shapes the validator itself trips on
        return [("", f"cannot be checked against the Kubernetes schema: {exc}")]
    for error in errors:
        path = [p for p in error.path if isinstance(p, str | int)]
        out.append((join_path(*path), _message(error)))
    return out


#: The API's integer formats and their ranges: the API server decodes an ``int32`` field into
#: Go's int32 and refuses ``replicas: 1000000000000``.
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
#: The longest schema message kept whole (jsonschema quotes the whole offending value).
MAX_MESSAGE = 300


def _int_formats() -> Any:
    """A format checker for the API's integer types only: the schemas say ``format: int32``
    and jsonschema ignores formats unless asked (other formats, such as ``date-time``, stay
    unchecked, as the API server's decoding checks them rather than the schema)."""
    import jsonschema  # type: ignore[import-untyped]

    checker = jsonschema.FormatChecker(formats=())
    for name, (low, high) in INT_RANGES.items():

        def fits(value: object, low: int = low, high: int = high) -> bool:
            return not isinstance(value, int) or isinstance(value, bool) or low <= value <= high

        checker.checks(name)(fits)
    return checker


def _message(error: Any) -> str:
    """The schema's message, short: jsonschema quotes the whole offending value, which may be
    a large (or alias-shared) structure; the path already says where it is."""
    if error.validator == "format" and error.validator_value in INT_RANGES:
        low, high = INT_RANGES[error.validator_value]
        return (
            f"{error.instance} is out of range: the API stores this field as "
            f"{error.validator_value} ({low} to {high})"
        )
    message = str(error.message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "... (cut)"


@functools.cache
def _validator(api_version: str, kind: str) -> Any:
    """The strict schema of one kind, built once: the shared definitions file is 1.8 MB of
    JSON, too much to parse again for every document (and every pod template) checked."""
    import jsonschema  # ships with kubernetes-validate
    from kubernetes_validate import utils as kv
    from referencing import Registry, Resource

    version = kv.latest_version()
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"v{version}-local-strict"
    if not re.fullmatch(r"[A-Za-z0-9]{1,63}", kind) or not re.fullmatch(
        r"[A-Za-z0-9.-]{1,253}", group
    ):
        raise NoSchema()  # never a file name built from arbitrary text (kind: ../../x)
    try:
        schema = kv.schema_contents(
            f"kubernetes-json-schema/{folder}/{kind.lower()}-{group}.json", version
        )
    except FileNotFoundError:
        raise NoSchema() from None
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_definitions(folder, version)) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=_int_formats())


@functools.cache
def _definitions(folder: str, version: str) -> Any:
    from kubernetes_validate import utils as kv

    return kv.schema_contents(f"kubernetes-json-schema/{folder}/_definitions.json", version)


__all__ = ["FALLBACK_KINDS", "NoSchema", "available", "has_kind", "schema_problems"]
