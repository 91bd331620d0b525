"""Re-applying manifests behaves as ``kubectl apply`` does (issue 11): the same manifest twice
is "unchanged" (no write, no event, no crash without a namespace), a changed one is merged
three ways (what the manifest sets wins, what the previous apply set and this one drops goes,
what others wrote stays)."""

from __future__ import annotations

import copy
from typing import Any

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
DOMAIN = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "dom"},
    "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "dom-channel"}}},
}
WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}


def deployment(replicas: int | None = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
        **extra,
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec}


def run(*steps: dict[str, Any], apply: list[Any] | None = None) -> Simulation:
    scenario = scenario_from_dict(
        {
            "nodes": [
                {
                    "name": "n",
                    "machine": "gb200",
                    "clique": "c0ffee00-0000-4000-8000-0000000000aa.0",
                }
            ],
            "apply": apply or [],
            "steps": list(steps),
        }
    )
    return Simulation(scenario).run()


def test_the_same_manifests_twice_change_nothing() -> None:
    objects = [CONFIG, deployment(), DOMAIN, WIDGET]
    once = run(apply=objects)
    twice = run({"apply": copy.deepcopy(objects)}, apply=objects)
    assert [str(e) for e in twice.events] == [str(e) for e in once.events]
    assert twice.unsupported == ["Widget w (example.com/v1)"]
    for api, kind, name in (
        ("v1", "ConfigMap", "c"),
        ("apps/v1", "Deployment", "d"),
        ("resource.nvidia.com/v1beta1", "ComputeDomain", "dom"),
    ):
        first, second = (
            once.store.get(api, kind, name, "default"),
            twice.store.get(api, kind, name, "default"),
        )
        assert first == second, kind  # same status, same resourceVersion: nothing was written


def test_a_changed_manifest_is_merged_as_kubectl_apply_merges() -> None:
    sim = run(
        {"apply": [deployment(replicas=3, minReadySeconds=5)]},
        {"scale": {"kind": "Deployment", "name": "d", "replicas": 4}},
        {"apply": [deployment(replicas=None)]},  # replicas and minReadySeconds dropped
        apply=[deployment(replicas=1)],
    )
    d = sim.store.get("apps/v1", "Deployment", "d", "default")
    assert d["metadata"]["generation"] == 4  # each change of the spec bumped it
    assert "minReadySeconds" not in d["spec"]  # the last apply set it; this one does not
    # replicas were in the manifest before and are not now: removed, so the default applies
    assert "replicas" not in d["spec"]
    assert len([p for p in sim.pods.values() if not p.finished]) == 1
    assert d["status"]["replicas"] == 1


def test_what_others_wrote_survives_a_reapply() -> None:
    sim = run(apply=[deployment(replicas=None)])
    sim.store.patch(
        "apps/v1", "Deployment", "d", {"metadata": {"labels": {"team": "ml"}}}, "default"
    )
    sim.step({"scale": {"kind": "Deployment", "name": "d", "replicas": 2}})
    sim.step({"apply": [deployment(replicas=None)]})
    d = sim.store.get("apps/v1", "Deployment", "d", "default")
    assert d["metadata"]["labels"] == {"team": "ml"}
    assert d["spec"]["replicas"] == 2  # never in the manifest: the scale stands
    assert len([p for p in sim.pods.values() if not p.finished]) == 2
