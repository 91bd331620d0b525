"""Manifests for tests and benchmarks: the plain objects a user would ``kubectl apply``.

Tests and benches of the simulator, the scheduler and the autoscalers all need "a Deployment
of N pods asking for these limits"; one builder keeps them from each writing its own, subtly
different copy. The objects are what the API server accepts (``apps/v1`` schema), so a test
that passes one also passes it to a real cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def deployment(
    name: str,
    replicas: int = 1,
    limits: Mapping[str, Any] | None = None,
    *,
    container: str = "c",
    image: str = "i",
    **pod_spec: Any,
) -> dict[str, Any]:
    """An ``apps/v1`` Deployment ``name`` of ``replicas`` pods labelled ``app: <name>``.

    Each pod has one container (``container``, running ``image``) with ``limits`` as its resource
    limits (none when ``None``), e.g. ``{"nvidia.com/gpu": 1}``. ``pod_spec`` adds fields to the
    pod template's spec beside ``containers``: ``nodeSelector=...``, ``affinity=...``,
    ``topologySpreadConstraints=[...]``.
    """
    main: dict[str, Any] = {"name": container, "image": image}
    if limits is not None:
        main["resources"] = {"limits": dict(limits)}
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [main], **pod_spec},
            },
        },
    }
