"""Kubernetes objects as the API server checks them at ``kubectl apply``: one implementation
for ``kgpu validate``, ``kgpu sim`` and ``kgpu allocate`` (see docs/architecture.md).

Modules: ``validate`` (:func:`validate_manifest`, the entry point), ``podspec`` (a pod spec's
rules beyond the schema), ``workloads`` (Deployments, Jobs, MPIJobs...), ``crds``
(ComputeDomain, MPIJob, ScaledObject), ``schema`` (the official strict schemas, when
``kubernetes-validate`` is installed), ``files`` (``kgpu validate``'s reading of a file).

It sits at the top of the core, above ``computedomain`` and ``dra``, because a ComputeDomain is
checked by the parser its controller runs and a DRA claim by the CEL compiler its scheduler
runs.
"""

from kgpu.manifests.files import FileReport, validate_documents, validate_file, validate_text
from kgpu.manifests.podspec import is_extended_resource, validate_pod_spec
from kgpu.manifests.schema import available as schema_validation_available
from kgpu.manifests.validate import CUSTOM_KINDS, known_kind, validate_manifest

__all__ = [
    "CUSTOM_KINDS",
    "FileReport",
    "is_extended_resource",
    "known_kind",
    "schema_validation_available",
    "validate_documents",
    "validate_file",
    "validate_manifest",
    "validate_pod_spec",
    "validate_text",
]
