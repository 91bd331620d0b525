"""The ComputeDomain and ComputeDomainClique CustomResourceDefinitions, and validation of
objects against them.

The schemas carry the current upstream driver's fields, enums and defaults (so manifests written
for NVIDIA's driver validate unchanged: ``spec.numNodes`` optional with default 0 and
deprecated, ``channel.allocationMode`` ``All``|``Single``, ``status.nodes[]`` keyed by name,
ComputeDomainClique ``daemons[]`` keyed by nodeName) plus two additions of kgpu's:
``status.conditions``, where kgpu says why a domain is not Ready, and printer columns.
``deploy/helm/kgpu/crds/*.yaml`` (the Helm chart's CRDs) are these objects dumped by
``scripts/gen-chart-data.py``; a test keeps them identical.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import yaml

from kgpu.computedomain.api import CLIQUE_KIND, GROUP, KIND, VERSION
from kgpu.errors import FieldError, FieldProblem, join_path

_STR = {"type": "string"}


def _daemon(name_key: str, description: str) -> dict[str, Any]:
    """A ``status.nodes`` entry (``name``) or a clique's ``daemons`` entry (``nodeName``)."""
    return {
        "type": "object",
        "description": description,
        "required": ["cliqueID", "ipAddress", name_key],
        "properties": {
            name_key: _STR,
            "ipAddress": _STR,
            "cliqueID": _STR,
            "index": {
                "type": "integer",
                "description": "Position of the daemon within its clique, stable while it stays; "
                "it names the daemon (compute-domain-daemon-<index>) in the IMEX node lists.",
            },
            "status": {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"},
        },
    }


def _schema() -> dict[str, Any]:
    node = _daemon("name", "One node whose IMEX daemon belongs to the domain.")
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
                "required": ["channel"],
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
                ],
                "properties": {
                    "numNodes": {
                        "type": "integer",
                        "minimum": 0,
                        "default": 0,
                        "description": "Intended number of IMEX daemons (nodes) in the domain; "
                        "deprecated (upstream). Only the domain's Ready status counts it, and "
                        "kgpu's admission webhook uses it to pick a first clique with room.",
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


def _clique_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "ComputeDomainClique lists the IMEX daemons of one ComputeDomain in one "
        'NVLink clique; it lives in the driver namespace, named "<computeDomainUID>.<cliqueID>".',
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": {"type": "object"},
            "daemons": {
                "type": "array",
                "items": _daemon("nodeName", "One IMEX daemon of the domain in this clique."),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["nodeName"],
            },
        },
    }


def crd() -> dict[str, Any]:
    """The ComputeDomain CRD."""
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


def clique_crd() -> dict[str, Any]:
    """The ComputeDomainClique CRD (no status subresource: the object is its own status)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"computedomaincliques.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": CLIQUE_KIND,
                "listKind": f"{CLIQUE_KIND}List",
                "plural": "computedomaincliques",
                "singular": "computedomainclique",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _clique_schema()},
                }
            ],
        },
    }


def crds() -> list[dict[str, Any]]:
    """Every CRD of the ``resource.nvidia.com`` group kgpu serves."""
    return [crd(), clique_crd()]


def _strip_extensions(schema: Any) -> Any:
    """The schema as plain JSON Schema (Kubernetes' ``x-kubernetes-*`` keys dropped)."""
    if isinstance(schema, Mapping):
        return {k: _strip_extensions(v) for k, v in schema.items() if not k.startswith("x-")}
    if isinstance(schema, list):
        return [_strip_extensions(v) for v in schema]
    return schema


def validate_object(obj: Mapping[str, Any]) -> None:
    """Check a ComputeDomain or ComputeDomainClique against its CRD's openAPIV3Schema;
    FieldError per violation."""
    import jsonschema  # type: ignore[import-untyped]  # ships with kubernetes-validate

    source = clique_crd() if obj.get("kind") == CLIQUE_KIND else crd()
    schema = _strip_extensions(source["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    validator = jsonschema.Draft4Validator(schema)
    problems = [
        FieldProblem(error.message, join_path(*error.absolute_path))
        for error in sorted(validator.iter_errors(dict(obj)), key=lambda e: list(e.path))
    ]
    if problems:
        raise FieldError(problems)


def main() -> None:
    sys.stdout.write(yaml.safe_dump_all(crds(), sort_keys=False))


if __name__ == "__main__":
    main()
