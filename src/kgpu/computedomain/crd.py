"""The ComputeDomain CustomResourceDefinition, and validation of objects against it.

The schema carries upstream's fields, enums and defaults (so manifests written for NVIDIA's
driver validate unchanged) plus one optional addition, ``status.conditions``, where kgpu says
why a domain is not Ready. ``deploy/helm/kgpu/crds/computedomain.yaml`` (the Helm chart's CRD) is
this object dumped (``python -m kgpu.computedomain.crd``); a test keeps the two identical.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import yaml

from kgpu.computedomain.api import GROUP, KIND, VERSION
from kgpu.errors import FieldError, FieldProblem, join_path

_STR = {"type": "string"}


def _schema() -> dict[str, Any]:
    node = {
        "type": "object",
        "description": "One node whose IMEX daemon belongs to the domain.",
        "required": ["cliqueID", "ipAddress", "name"],
        "properties": {
            "name": _STR,
            "ipAddress": _STR,
            "cliqueID": _STR,
            "index": {
                "type": "integer",
                "description": "Position of the node within its clique; stable while it stays.",
            },
            "status": {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"},
        },
    }
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": _STR,
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": _STR,
            "message": _STR,
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "type": "object",
        "description": "ComputeDomain prepares a set of nodes to run a multi-node workload in.",
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["channel", "numNodes"],
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
                ],
                "properties": {
                    "numNodes": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Intended number of IMEX daemons (nodes) in the domain.",
                    },
                    "channel": {
                        "type": "object",
                        "required": ["resourceClaimTemplate"],
                        "properties": {
                            "resourceClaimTemplate": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": _STR},
                            },
                            "allocationMode": {
                                "type": "string",
                                "enum": ["All", "Single"],
                                "default": "Single",
                            },
                        },
                    },
                },
            },
            "status": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {
                        "type": "string",
                        "enum": ["Ready", "NotReady"],
                        "default": "NotReady",
                    },
                    "nodes": {
                        "type": "array",
                        "items": node,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                    },
                    "conditions": {
                        "type": "array",
                        "items": condition,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                    },
                },
            },
        },
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"computedomains.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": "computedomains",
                "singular": "computedomain",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Nodes", "type": "integer", "jsonPath": ".spec.numNodes"},
                        {"name": "Status", "type": "string", "jsonPath": ".status.status"},
                    ],
                }
            ],
        },
    }


def _strip_extensions(schema: Any) -> Any:
    """The schema as plain JSON Schema (Kubernetes' ``x-kubernetes-*`` keys dropped)."""
    if isinstance(schema, Mapping):
        return {k: _strip_extensions(v) for k, v in schema.items() if not k.startswith("x-")}
    if isinstance(schema, list):
        return [_strip_extensions(v) for v in schema]
    return schema


def validate_object(obj: Mapping[str, Any]) -> None:
    """Check a ComputeDomain against the CRD's openAPIV3Schema; FieldError per violation."""
    import jsonschema  # type: ignore[import-untyped]  # ships with kubernetes-validate

    schema = _strip_extensions(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    validator = jsonschema.Draft4Validator(schema)
    problems = [
        FieldProblem(error.message, join_path(*error.absolute_path))
        for error in sorted(validator.iter_errors(dict(obj)), key=lambda e: list(e.path))
    ]
    if problems:
        raise FieldError(problems)


def main() -> None:
    sys.stdout.write(yaml.safe_dump(crd(), sort_keys=False))


if __name__ == "__main__":
    main()
