"""Pod-spec rules the API server applies beyond the schema, on inputs the schema never sees
(``kgpu.manifests.podspec`` runs with or without ``kubernetes-validate``)."""

from __future__ import annotations

from kgpu.manifests import validate_pod_spec


def test_extended_requests_must_equal_limits() -> None:
    spec = {
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
            }
        ]
    }
    problems = validate_pod_spec(spec, "spec")
    assert [p.path for p in problems] == ["spec.containers[0].resources.requests.nvidia.com/gpu"]
    only_request = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 1}}}]}
    assert "cannot be overcommitted" in validate_pod_spec(only_request, "spec")[0].message
    fractional = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}
    assert "whole number" in validate_pod_spec(fractional, "spec")[0].message


def test_shapes_the_schema_would_refuse_are_reported_not_raised() -> None:
    for spec in (
        None,
        {"containers": "c"},
        {"containers": [7], "tolerations": {"a": 1}, "affinity": []},
        {"containers": [{"name": "c", "resources": {"limits": [1]}}], "nodeSelector": {"a": 1}},
    ):
        assert validate_pod_spec(spec, "spec")  # problems, never an exception
