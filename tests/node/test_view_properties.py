"""Properties over random machines and configs: ids unique and short, counts add up, labels
valid Kubernetes labels."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgpu.config import load_config_strings
from kgpu.drivers.migpreview import machine_after_mig
from kgpu.errors import FieldError
from kgpu.hardware.profiles import load_machine, profile_names
from kgpu.node.labels import is_valid_label_key, is_valid_label_value
from kgpu.node.view import build_node_view

MIG_CONFIGS = ["all-disabled", "all-balanced", "all-1g.10gb", "all-3g.40gb", "all-enabled", None]


@st.composite
def plugin_configs(draw: st.DrawFn) -> tuple[str, dict[str, int]]:
    """A random device-plugin config and, per base resource name, the replicas it asks for."""
    strategy = draw(st.sampled_from(["none", "single", "mixed"]))
    kind = draw(st.sampled_from(["timeSlicing", "mps", "both", None]))
    if kind in ("mps", "both") and strategy == "mixed":
        kind = "timeSlicing"
    lines = [f"flags: {{migStrategy: {strategy}}}"]
    wanted: dict[str, int] = {}
    if kind == "both":
        # Per-GPU strategies (beyond upstream): disjoint GPU index sets.
        split = draw(st.integers(min_value=0, max_value=8))
        ts_devices = list(range(split)) or [0]
        mps_devices = list(range(split, 8)) or [7]
        ts, mps = draw(st.integers(2, 16)), draw(st.integers(2, 16))
        lines.append(
            "sharing:\n"
            f"  timeSlicing: {{resources: [{{name: gpu, rename: nvidia.com/gpu.ts, "
            f"devices: {ts_devices}, replicas: {ts}}}]}}\n"
            f"  mps: {{resources: [{{name: gpu, rename: nvidia.com/gpu.mps, "
            f"devices: {mps_devices}, replicas: {mps}}}]}}"
        )
    elif kind:
        names = ["nvidia.com/gpu"]
        if kind == "timeSlicing":
            names += ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb"]
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        rename = draw(st.booleans())
        lines.append(
            f"sharing:\n  {kind}:\n    renameByDefault: {str(rename).lower()}\n    resources:"
        )
        for name in chosen:
            replicas = draw(st.integers(min_value=2, max_value=16))
            wanted[name] = replicas
            devices = draw(st.sampled_from(["all", "1", "[0]", "[1, 3]", "2"]))
            if devices != "all":
                wanted.pop(name)  # only some devices shared: no per-device expectation
            lines.append(f"    - {{name: {name}, devices: {devices}, replicas: {replicas}}}")
    return "\n".join(lines) + "\n", wanted


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(profile_names()),
    host=st.text(alphabet="abcdefghij0123456789-", min_size=1, max_size=20),
    mig=st.sampled_from(MIG_CONFIGS),
    config=plugin_configs(),
)
def test_ids_unique_counts_add_up_labels_valid(
    profile: str, host: str, mig: str | None, config: tuple[str, dict[str, int]]
) -> None:
    text, wanted = config
    machine = load_machine(profile, hostname=host)
    labels = {"nvidia.com/mig.config": mig} if mig else {}
    configs = load_config_strings({"p.yaml": text})
    try:
        # the GPUs as the MIG manager leaves them: the view itself applies no layout
        machine = machine_after_mig(machine, configs, labels)
        view = build_node_view(machine, configs, labels)
    except FieldError as exc:
        # Only the rejections upstream has: impossible layouts, single with several profiles or
        # empty MIG GPUs, MPS limits. They must say why.
        assert str(exc)
        return
    ids = [d.id for r in view.resources for d in r.devices]
    assert len(ids) == len(set(ids))
    assert all(len(i) <= 63 for i in ids)
    # Every advertised device maps back to exactly one physical GPU or MIG device, and the
    # number of ids per backing device is its replica count (1 when not shared).
    per_backing: dict[str, int] = {}
    for r in view.resources:
        for d in r.devices:
            per_backing[d.backing_uuid] = per_backing.get(d.backing_uuid, 0) + 1
            if d.replica is None:
                assert d.id == d.backing_uuid
            else:
                assert d.id == f"{d.backing_uuid}::{d.replica}"
    for r in view.resources:
        expected = 0
        backing = {d.backing_uuid for d in r.devices}
        for uuid in backing:
            expected += per_backing[uuid]
        assert r.count == expected
    whole = [d for r in view.resources for d in r.devices if d.mig_uuid is None]
    for plan in view.gpus:
        on_gpu = [d for d in whole if d.gpu_index == plan.index]
        if on_gpu:  # advertised whole: its plan's replica count is its number of ids
            assert len(on_gpu) == plan.replicas
    # Every GPU's ids add up to its replicas times its backing devices, and nothing is lost:
    # each physical GPU either shows up in some resource or is MIG-enabled with no devices.
    for plan in view.gpus:
        ids_on_gpu = sum(1 for r in view.resources for d in r.devices if d.gpu_index == plan.index)
        backing_on_gpu = {
            d.backing_uuid for r in view.resources for d in r.devices if d.gpu_index == plan.index
        }
        assert ids_on_gpu == sum(per_backing[b] for b in backing_on_gpu)
        assert ids_on_gpu <= max(plan.replicas, 1) * max(len(backing_on_gpu), 1)
    for d in whole:
        if d.replica is None:
            assert per_backing[d.backing_uuid] == 1
        elif "nvidia.com/gpu" in wanted:
            assert per_backing[d.backing_uuid] == wanted["nvidia.com/gpu"]
    for key, value in view.labels.items():
        assert is_valid_label_key(key), key
        assert is_valid_label_value(value), (key, value)


@settings(max_examples=30, deadline=None)
@given(name=st.text(min_size=0, max_size=120))
def test_label_sanitizer_always_yields_valid_values(name: str) -> None:
    from kgpu.node.labels import sanitize_value

    assert is_valid_label_value(sanitize_value(name))
