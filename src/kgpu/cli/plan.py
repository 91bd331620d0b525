"""``kgpu plan``: what one node would advertise, from a machine profile and the user's configs.

The node view advertises the MIG devices the GPUs have. When the desired mig-parted layout
differs, the plan also says what the MIG manager would do -- its steps per GPU, run on a
simulated copy of the GPUs (:func:`kgpu.drivers.migpreview.preview_mig`) -- and what the node
advertises after it, labelled as such: the GPUs are not pretended to have it already.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kgpu import releases
from kgpu.cli.output import output_option
from kgpu.cli.plain import add_row, cell, warn
from kgpu.dra.shares import DISABLED_POLICY, SHARES, SharePolicy, is_shared
from kgpu.node import ownership

#: the label the MIG manager writes once a layout is applied
MIG_STATE_LABEL = "nvidia.com/mig.config.state"


def shares_gate_note() -> str:
    """Under the shares table: what the cluster must serve for shared GPUs, from the release
    table (:mod:`kgpu.releases`)."""
    gate = releases.GATES["DRAConsumableCapacity"]
    on = [m for m in releases.MODELLED if (state := gate.at(m)) is not None and state.default]
    off = [m for m in releases.SUPPORTED if gate.at(m) is not None and m not in on]
    parts = []
    if on:
        first = gate.at(on[0])
        assert first is not None
        parts.append(f"{first.stage}, on by default from Kubernetes 1.{on[0]}")
    if off:
        stage = gate.at(off[0])
        assert stage is not None
        span = f"1.{off[0]}" if len(off) == 1 else f"1.{off[0]}-1.{off[-1]}"
        parts.append(
            f"{stage.stage} and off in {span}, where the API server drops "
            "allowMultipleAllocations and each GPU stays exclusive"
        )
    return f"shared GPUs need {gate.name} on kube-apiserver and kube-scheduler ({'; '.join(parts)})"


if TYPE_CHECKING:
    from kgpu.drivers.migpreview import MigPreview
    from kgpu.node.model import NodeView


def plan_json(
    view: NodeView,
    slices: list[Any] | None = None,
    preview: MigPreview | None = None,
    after: NodeView | None = None,
    shares: SharePolicy | None = None,
) -> dict[str, Any]:
    """The ``-o json`` document (keys: capacity, allocatable, resources, labels, devices,
    warnings, gpus: the node as
    its GPUs are; refused when the device plugin refuses a resource; migPending when the GPUs
    lack the desired MIG layout, with migManager: the manager's plan and the same document for
    the node after it). Resources and devices are what the device plugin lists: without the
    GPUs ``gpuOwnership`` gives to DRA. With ``shares`` on (``--consumable-shares``),
    consumableShares: the policy, and on each shared GPU its device and capacities."""
    whole = view
    view = listed(view)
    devices = [
        {
            "id": d.id,
            "resource": d.resource,
            "gpu": d.gpu_index,
            "gpuUUID": d.gpu_uuid,
            "migUUID": d.mig_uuid,
            "migProfile": d.mig_profile,
            "replica": d.replica,
            "sharing": str(d.sharing),
            "healthy": d.healthy,
        }
        for r in view.resources
        for d in r.devices
    ]
    mps: dict[int, dict[str, Any]] = {}
    for r in view.resources:
        for d in r.devices:
            if d.mps is not None and d.gpu_index not in mps:
                mps[d.gpu_index] = {
                    "activeThreadPercentage": d.mps.active_thread_percentage,
                    "pinnedMemoryLimitMiB": d.mps.pinned_memory_limit_mib,
                    "pipeDirectory": d.mps.pipe_directory,
                }
    gpus = []
    offers = {o.index: o for o in ownership.offers(whole)}
    shared = shared_gpus(view, slices or [], shares) if shares is not None else {}
    for g in view.gpus:
        entry: dict[str, Any] = {
            "index": g.index,
            "uuid": g.uuid,
            "product": g.product,
            "migDevices": list(g.mig_devices),
            "resources": list(g.resources),
            "sharing": str(g.sharing),
            "replicas": g.replicas,
        }
        if g.index in offers:  # gpuOwnership: which kubelet API offers it while it is free
            entry["gpuOwnership"] = offers[g.index].mode
            entry["offeredBy"] = list(offers[g.index].offered_by)
        if g.index in mps:
            entry["mps"] = mps[g.index]
        if g.index in shared:
            entry["consumableShares"] = shared[g.index]
        gpus.append(entry)
    out: dict[str, Any] = {
        # as a Node's status has them (quantities are strings in the Kubernetes API), the
        # same keys and shapes as a node in kgpu sim -o json
        "capacity": {r.name: str(r.count) for r in view.resources},
        "allocatable": {r.name: str(sum(d.healthy for d in r.devices)) for r in view.resources},
        "resources": view.counts(),  # capacity again, as numbers (kept for older scripts)
        "labels": dict(sorted(view.labels.items())),
        "devices": devices,
        "warnings": list(view.warnings),
        "gpus": gpus,
    }
    if view.refused:
        out["refused"] = [{"resource": r.resource, "reason": r.reason} for r in view.refused]
    if view.mig_pending:
        out["migPending"] = view.mig_pending
    if slices is not None:
        out["resourceSlices"] = slices
    if shares is not None and shares.enabled:
        out["consumableShares"] = {
            "mode": shares.mode if shares.mode != SHARES else str(shares.count),
            "memoryMinimumMiB": shares.memory_minimum_mib,
            "memoryStepMiB": shares.memory_step_mib,
            "enforced": shares.enforced,
        }
    if preview is not None and after is not None:
        from kgpu.cli.migmanager import plan_rows

        out["migManager"] = {
            "config": preview.config,
            "plan": plan_rows(preview.plan),
            "unchanged": list(preview.plan.unchanged),
            "labels": {MIG_STATE_LABEL: "success"},
            "after": plan_json(after),
        }
    if slices is not None:
        out["resourceSlices"] = slices
    return out


def listed(view: NodeView) -> NodeView:
    """What the device plugin lists of ``view`` on a node where nothing is held yet."""
    return ownership.device_plugin_view(view, ownership.EMPTY, ownership.policy_of(view))


def shared_gpus(
    view: NodeView, slices: list[Any], shares: SharePolicy
) -> dict[int, dict[str, Any]]:
    """GPU index -> what its shared device publishes (``allowMultipleAllocations``): the
    device's name, the policy, whether kgpu enforces the shares, and per capacity its
    ``value`` and request policy (``default``, ``min``, ``max``, ``step``), quantities as the
    ResourceSlice has them. GPUs the slices do not share (MIG mode, withheld) are absent."""
    index = {g.uuid: g.index for g in view.machine.gpus}
    out: dict[int, dict[str, Any]] = {}
    for s in slices:
        for device in (s.get("spec") or {}).get("devices") or []:
            if not is_shared(device):
                continue
            uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
            if uuid not in index:
                continue
            capacity: dict[str, dict[str, str]] = {}
            for name, cap in sorted((device.get("capacity") or {}).items()):
                policy = cap.get("requestPolicy") or {}
                valid = policy.get("validRange") or {}
                capacity[name] = {
                    "value": str(cap.get("value", "")),
                    **{k: str(policy[k]) for k in ("default",) if k in policy},
                    **{k: str(valid[k]) for k in ("min", "max", "step") if k in valid},
                }
            out[index[uuid]] = {
                "device": device["name"],
                "policy": shares.describe(),
                "enforced": shares.enforced,
                "capacity": capacity,
            }
    return out


def describe_gpu(view: NodeView, index: int) -> str:
    """One plain sentence: what GPU ``index`` gets on this node."""
    plan = next(g for g in view.gpus if g.index == index)
    if not plan.resources:
        return "nothing advertised"
    # replicas and sharing per backing device (the GPU itself, or each MIG device)
    backing: dict[str, tuple[str | None, str, int]] = {}
    for res in view.resources:
        for d in res.devices:
            if d.gpu_index != index:
                continue
            profile, sharing, n = backing.get(d.backing_uuid, (d.mig_profile, str(d.sharing), 0))
            backing[d.backing_uuid] = (profile, sharing, n + 1)

    def how(sharing: str, replicas: int) -> str:
        return f"{sharing} x{replicas}" if replicas > 1 else "not shared"

    if not plan.mig_devices:
        _, sharing, replicas = next(iter(backing.values()))
        what = f"{sharing} x{replicas}" if replicas > 1 else "whole, not shared"
    else:
        groups: dict[tuple[str, str], int] = {}
        for profile, sharing, replicas in backing.values():
            key = (profile or "?", how(sharing, replicas))
            groups[key] = groups.get(key, 0) + 1
        what = "MIG " + ", ".join(
            f"{n} x {profile} ({mode})" for (profile, mode), n in sorted(groups.items())
        )
    return f"{what} -> {', '.join(plan.resources)}"


def _resource_table(view: NodeView, title: str) -> Any:
    from rich.table import Table

    res = Table(title=title)
    for col in ("RESOURCE", "COUNT", "SHARING", "REPLICAS PER DEVICE"):
        res.add_column(col, overflow="fold")
    for r in view.resources:
        add_row(res, r.name, str(r.count), str(r.sharing), str(r.replicas))
    return res


def _device_table(view: NodeView, title: str, wide: bool) -> Any:
    """One row per physical device (a GPU or a MIG device); its replicas are a range, so a
    time-sliced DGX is 8 readable rows instead of 32 folded ones (-o json lists every id)."""
    from rich.table import Table

    groups: dict[tuple[str, str], list[Any]] = {}
    for r in view.resources:
        for d in r.devices:
            groups.setdefault((d.resource, d.backing_uuid), []).append(d)
    devs = Table(title=title)
    # a UUID is 40 characters and stays on one line; below 120 columns the table has two
    # columns (device + ids | resource + place + health) so 80 columns still fit unfolded
    if wide:
        devs.add_column("DEVICE", no_wrap=True, min_width=40)
        for col in ("RESOURCE", "ON", "ADVERTISED IDS", "HEALTH"):
            devs.add_column(col, overflow="fold")
    else:
        devs.add_column("DEVICE / ADVERTISED IDS", no_wrap=True, min_width=40)
        devs.add_column("RESOURCE / ON / HEALTH", overflow="fold")
    for (resource, uuid), members in groups.items():
        d = members[0]
        backing = f"GPU {d.gpu_index}" + (f" MIG {d.mig_profile}" if d.mig_profile else "")
        replicas = [m.replica for m in members if m.replica is not None]
        if replicas:
            ids = f"<device>::{min(replicas)}..{max(replicas)} ({d.sharing})"
        else:
            ids = "<device>"
        healthy = sum(1 for m in members if m.healthy)
        health = "Healthy" if healthy == len(members) else f"Unhealthy ({healthy} ok)"
        if wide:
            add_row(devs, uuid, resource, backing, ids, health)
        else:
            first = f"{uuid}\n  {ids}" if replicas else uuid
            add_row(devs, first, f"{resource}\n  on {backing}\n  {health}")
    return devs


def _print_view(view: NodeView, console: Any, suffix: str = "") -> None:
    """Resources, what each GPU gets, devices and labels of one view; ``suffix`` says which
    (`` after the MIG manager applies X``)."""
    from rich.table import Table

    console.print(_resource_table(listed(view), f"Resources{suffix}"))
    gpus = Table(title=f"GPUs{suffix}")
    for col in ("GPU", "PRODUCT", "GETS", "OFFERED BY"):
        gpus.add_column(col, overflow="fold")
    offers = {o.index: o for o in ownership.offers(view)}
    for g in view.gpus:
        offer = offers.get(g.index)
        by = (
            " + ".join(ownership.API_TITLES[api] for api in offer.offered_by)
            if offer is not None
            else ""
        )
        gets = describe_gpu(view, g.index)
        if offer is not None and offer.offered_by == (ownership.DRA,):
            gets = "whole, or its MIG devices -> gpu.nvidia.com claims (DRA)"
        add_row(gpus, str(g.index), g.product, gets, by)
    console.print(gpus)
    console.print(_device_table(listed(view), f"Devices{suffix}", console.width >= 120))
    labels = Table(title=f"Labels{suffix}")
    # a label key is what users paste into nodeSelectors: whole, on one line; values fold
    longest = max((len(k) for k in view.labels), default=5)
    labels.add_column("LABEL", no_wrap=True, min_width=min(longest, 63))
    labels.add_column("VALUE", overflow="fold")
    for k, v in sorted(view.labels.items()):
        add_row(labels, k, v)
    console.print(labels)


def _print_mig_plan(preview: MigPreview, console: Any) -> None:
    """What the MIG manager would do, GPU by GPU (``kgpu mig apply --dry-run`` lists the
    steps)."""
    from rich.table import Table

    from kgpu.cli.migmanager import plan_rows

    steps = Table(title=f"MIG manager plan: {preview.config} (the GPUs do not have it yet)")
    for col in ("GPU", "FROM", "TO", "NVML STEPS"):
        steps.add_column(col, overflow="fold")
    for row in plan_rows(preview.plan):
        add_row(steps, str(row["gpu"]), row["from"], row["to"], str(len(row["steps"])))
    console.print(steps)
    if preview.plan.unchanged:
        unchanged = ", ".join(map(str, preview.plan.unchanged))
        console.print(cell(f"unchanged: GPU {unchanged}"), highlight=False)


def _share_table(view: NodeView, slices: list[Any], shares: SharePolicy) -> Any:
    from rich.table import Table

    how = (
        "enforced through the GPU's MPS daemon" if shares.enforced else "time-sliced, not enforced"
    )
    table = Table(title=f"Consumable shares: {shares.describe()}, {how}")
    for col in ("GPU", "DEVICE", "CAPACITY", "VALUE", "DEFAULT", "MIN", "STEP"):
        table.add_column(col, overflow="fold")
    for gpu, entry in sorted(shared_gpus(view, slices, shares).items()):
        for name, cap in entry["capacity"].items():
            add_row(
                table,
                str(gpu),
                entry["device"],
                name,
                cap["value"],
                cap.get("default", ""),
                cap.get("min", ""),
                cap.get("step", ""),
            )
    return table


def _print_tables(
    view: NodeView,
    slices: list[Any] | None,
    console: Any,
    preview: MigPreview | None = None,
    after: NodeView | None = None,
    shares: SharePolicy | None = None,
) -> None:
    """The node as its GPUs are; with a MIG layout they lack, only their resources, then the
    MIG manager's plan and the node in full after it, each table saying so."""
    from rich.table import Table

    from kgpu.cli.output import header

    m = view.machine
    pending = (
        f" (the MIG manager has not applied it: {MIG_STATE_LABEL}=pending on a node)"
        if view.mig_pending
        else ""
    )
    header(
        console,
        m.hostname or m.profile,
        f"({m.profile}): {len(m.gpus)} GPU(s), driver {m.driver_version}, CUDA "
        f"{m.cuda_version}; device-plugin config {view.config_name or '(defaults)'}, mig "
        f"config {view.mig_config_name or '(none)'}{pending}, migStrategy "
        f"{view.mig_strategy}",
    )
    if preview is not None and after is not None:
        console.print(_resource_table(view, "Resources now, before the MIG manager"))
        _print_mig_plan(preview, console)
        _print_view(after, console, f" after the MIG manager applies {preview.config}")
        console.print(
            cell(f"then {MIG_STATE_LABEL}=success (written by the MIG manager)"), highlight=False
        )
    else:
        _print_view(view, console)

    if slices is not None:
        st = Table(title="ResourceSlices")
        for col in ("NAME", "POOL", "DEVICES"):
            st.add_column(col, overflow="fold")
        for s in slices:
            meta = s.get("metadata", {}) if isinstance(s, dict) else {}
            spec = s.get("spec", {}) if isinstance(s, dict) else {}
            add_row(
                st,
                str(meta.get("name", "")),
                str((spec.get("pool") or {}).get("name", "")),
                str(len(spec.get("devices") or [])),
            )
        console.print(st)
        if shares is not None and shares.enabled:
            console.print(_share_table(view, slices, shares))
            console.print(cell(shares_gate_note()), highlight=False)

    if preview is None or after is None:
        for w in view.warnings:
            warn(console, w)
        return
    # a warning of one of the two views says which
    for w in view.warnings:
        common = w == view.mig_pending or w in after.warnings
        warn(console, w if common else f"now, before the MIG manager: {w}")
    for w in after.warnings:
        if w not in view.warnings:
            warn(console, f"after {preview.config}: {w}")


def _resource_slices(
    view: NodeView, node_name: str, shares: SharePolicy = DISABLED_POLICY
) -> list[Any]:
    from kgpu.dra.slices import resource_slices
    from kgpu.dra.withhold import OMIT, withhold_devices

    # without the GPUs gpuOwnership gives to the device plugin
    withheld = ownership.dra_withheld(view.machine, ownership.EMPTY, ownership.policy_of(view))
    return withhold_devices(resource_slices(view.machine, node_name, shares=shares), withheld, OMIT)


#: The machine ``kgpu plan`` plans without ``--machine`` (the seed guides' first GPU node).
DEFAULT_MACHINE = "rtx-2080ti"


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan(
        machine: Annotated[
            str,
            typer.Option(
                "--machine",
                "-m",
                help="Machine profile (see `kgpu machines`), a recorded snapshot .json, or "
                f"nvml for this host's GPUs. Without it: {DEFAULT_MACHINE}, said on stderr.",
            ),
        ] = "",
        config: Annotated[
            list[Path] | None,
            typer.Option(
                "--config",
                "-c",
                help="Device-plugin config, ConfigMap, mig-parted config or GPU Operator Helm "
                "values (repeatable).",
            ),
        ] = None,
        config_name: Annotated[
            str | None,
            typer.Option(
                "--config-name",
                help="Device-plugin config entry when the node has no "
                "nvidia.com/device-plugin.config label.",
            ),
        ] = None,
        mig_config: Annotated[
            str | None,
            typer.Option(
                "--mig-config",
                help="mig-parted config when the node has no nvidia.com/mig.config label "
                "(the GPU Operator's defaults such as all-balanced are built in).",
            ),
        ] = None,
        mig_strategy: Annotated[
            str | None,
            typer.Option(
                "--mig-strategy",
                help="none|single|mixed; overrides Helm values and the config file, as the "
                "device plugin's MIG_STRATEGY does.",
            ),
        ] = None,
        label: Annotated[
            list[str] | None, typer.Option("--label", "-l", help="Node label k=v (repeatable).")
        ] = None,
        hostname: Annotated[str, typer.Option("--hostname", help="Node name.")] = "",
        clique: Annotated[
            str | None,
            typer.Option("--clique", help="<clusterUUID>.<cliqueId> for fabric-attached GPUs."),
        ] = None,
        dra: Annotated[
            bool, typer.Option("--dra", help="Also show the node's DRA ResourceSlices.")
        ] = False,
        consumable_shares: Annotated[
            str | None,
            typer.Option(
                "--consumable-shares",
                metavar="MODE",
                help="Plan the DRA driver's shared GPUs as `kgpu agent --consumable-shares` "
                "publishes them: disabled, memory, unlimited or a share count N (implies --dra).",
            ),
        ] = None,
        share_memory_minimum_mib: Annotated[
            int,
            typer.Option(
                "--share-memory-minimum-mib", help="memory mode: the smallest share, in MiB."
            ),
        ] = DISABLED_POLICY.memory_minimum_mib,
        share_memory_step_mib: Annotated[
            int,
            typer.Option("--share-memory-step-mib", help="memory mode: the step, in MiB."),
        ] = DISABLED_POLICY.memory_step_mib,
        output: Annotated[str, output_option()] = "table",
        report: Annotated[
            Path | None,
            typer.Option(
                "--report",
                metavar="FILE.html",
                help="Also draw the node as `kgpu sim --report` draws nodes, in one HTML file.",
            ),
        ] = None,
    ) -> None:
        """What one node would advertise: resources, devices, per-GPU plan, labels, warnings;
        with a MIG layout the GPUs lack, also what the MIG manager would do and the node after."""
        from kgpu.cli.output import check_output, is_data, print_data, table_console
        from kgpu.cli.plain import fail
        from kgpu.config.loader import load_config_files, select_mig_config
        from kgpu.config.plugin import MIG_STRATEGIES
        from kgpu.dra.shares import parse_share_policy
        from kgpu.drivers.migpreview import preview_mig
        from kgpu.errors import FieldError, FieldProblem, KgpuError
        from kgpu.hardware import BackendError, read_machine
        from kgpu.node.label_syntax import parse_label_args
        from kgpu.node.view import build_node_view

        check_output(output)
        if not machine:
            machine = DEFAULT_MACHINE
            typer.echo(
                f"note: no --machine; planning the {DEFAULT_MACHINE} profile (kgpu machines "
                "lists the others)",
                err=True,
            )
        try:
            shares: SharePolicy | None = None
            if consumable_shares is not None:
                shares = parse_share_policy(
                    consumable_shares,
                    memory_minimum_mib=share_memory_minimum_mib,
                    memory_step_mib=share_memory_step_mib,
                    path="--consumable-shares",
                )
                dra = dra or shares.enabled
            labels = parse_label_args(label or [])
            if mig_strategy is not None and mig_strategy not in MIG_STRATEGIES:
                raise FieldError(
                    FieldProblem(
                        f"{mig_strategy!r}: allowed {', '.join(MIG_STRATEGIES)}",
                        path="--mig-strategy",
                    )
                )
            configs = load_config_files(config or [])
            if config_name and not configs.plugin_configs:
                raise FieldError(
                    FieldProblem(
                        f"{config_name!r} names a device-plugin config, but none was given: "
                        "add --config FILE (a config file, ConfigMap or Helm values)",
                        path="--config-name",
                    )
                )
            snapshot = read_machine(machine, hostname=hostname, clique=clique)
            view = build_node_view(
                snapshot,
                configs,
                labels,
                config_name=config_name,
                mig_config_name=mig_config,
                mig_strategy=mig_strategy,
            )
            preview: MigPreview | None = None
            after = None
            desired = select_mig_config(configs, labels, mig_config)
            if desired is not None:
                # what the MIG manager would do (an impossible layout fails here, naming the
                # file), and the node once it has
                preview = preview_mig(snapshot, desired)
                if preview.changes:
                    after = build_node_view(
                        preview.after,
                        configs,
                        labels,
                        config_name=config_name,
                        mig_config_name=mig_config,
                        mig_strategy=mig_strategy,
                    )
                else:
                    preview = None
            slices = (
                _resource_slices(view, hostname or machine, shares or DISABLED_POLICY)
                if dra
                else None
            )
        except KgpuError as exc:
            fail(exc)
        except BackendError as exc:
            fail(str(exc))
        if is_data(output):
            print_data(plan_json(view, slices, preview, after, shares), output)
        else:
            _print_tables(view, slices, table_console(output), preview, after, shares)
        if report is not None:
            from kgpu.sim.html import check_target, plan_picture, write_report

            try:
                check_target(report)
                # the node as it will serve: after the MIG manager when it would change it
                drawn = after if after is not None else view
                size = write_report(report, plan_picture(drawn, hostname or machine))
            except KgpuError as exc:
                fail(exc)
            typer.echo(f"wrote {report} ({size / 1024:.0f} KiB)", err=True)
