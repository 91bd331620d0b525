"""``kgpu mig apply``: the MIG manager alone, like ``nvidia-mig-parted apply``.

It reads the mig-parted config (a bare file, a ConfigMap or GPU Operator Helm values), plans
the change for the machine's GPUs and, unless ``--dry-run``, applies it with the same code the
agent's MIG manager runs: GPUs with processes on them wait up to ``--wait`` seconds and then
fail, a mode change that needs a reset fails with what to do. No node labels are written and no
pods are evicted: that is the agent's job (``--mig-manager``).

On a built-in or recorded machine the change lives only in this command (it shows what would
happen, GPU by GPU). On ``--machine nvml`` it changes this host's GPUs and needs ``--yes``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kgpu.cli.output import output_option
from kgpu.cli.plain import add_row, warn

if TYPE_CHECKING:
    from kgpu.drivers.migmanager import Attempt
    from kgpu.hardware.migplan import MigPlan
    from kgpu.hardware.model import Machine


def plan_rows(plan: MigPlan) -> list[dict[str, Any]]:
    """One row per changed GPU: from, to, and its steps (``kgpu plan`` shows the same)."""
    from kgpu.hardware.migplan import describe_counts

    return [
        {
            "gpu": change.index,
            "uuid": change.uuid,
            "from": describe_counts(change.current),
            "to": describe_counts(change.desired),
            "steps": [
                {"step": str(step.kind), "description": step.describe()} for step in change.steps
            ],
        }
        for change in plan.changes
    ]


def _devices(machine: Machine, indices: set[int]) -> list[dict[str, Any]]:
    return [
        {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "migEnabled": gpu.mig_enabled,
            "migDevices": [
                {
                    "uuid": m.uuid,
                    "profile": m.profile,
                    "gpuInstance": m.gi_id,
                    "computeInstance": m.ci_id,
                    "placement": [m.placement_start, m.placement_size],
                }
                for m in gpu.mig_devices
            ],
        }
        for gpu in machine.gpus
        if gpu.index in indices
    ]


def report(
    machine_spec: str,
    config: str,
    plan: MigPlan,
    warnings: list[str],
    attempt: Attempt | None,
    after: Machine | None,
) -> dict[str, Any]:
    """The ``-o json`` document."""
    out: dict[str, Any] = {
        "machine": machine_spec,
        "config": config,
        "dryRun": attempt is None,
        "plan": plan_rows(plan),
        "unchanged": list(plan.unchanged),
        "warnings": warnings,
    }
    if attempt is not None:
        out["state"] = attempt.state
        out["reason"] = attempt.reason
        out["gpus"] = [
            {"index": r.index, "uuid": r.uuid, "outcome": r.outcome, "reason": r.reason}
            for r in attempt.gpus
        ]
    if after is not None:
        out["after"] = _devices(after, {c.index for c in plan.changes})
    return out


def _print(data: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    from kgpu.cli.output import header
    from kgpu.cli.plain import cell

    mode = "dry run" if data["dryRun"] else "apply"
    header(console, f"mig config {data['config']}", f"on {data['machine']} ({mode})")
    if not data["plan"]:
        console.print(cell(f"mig config {data['config']} is already applied: nothing to do"))
    else:
        steps = Table(title="Plan")
        for col in ("GPU", "FROM", "TO", "STEPS"):
            steps.add_column(col, overflow="fold")
        for row in data["plan"]:
            lines = "\n".join(
                f"{n}. {s['description']}" for n, s in enumerate(row["steps"], start=1)
            )
            add_row(steps, row["gpu"], row["from"], row["to"], lines)
        console.print(steps)
        if data["unchanged"]:
            console.print(f"unchanged: GPU {', '.join(map(str, data['unchanged']))}")
    if data.get("gpus"):
        result = Table(title=cell(f"Result: {data['state']}"))
        for col in ("GPU", "OUTCOME", "REASON"):
            result.add_column(col, overflow="fold")
        for g in data["gpus"]:
            add_row(result, g["index"], g["outcome"], g["reason"])
        console.print(result)
    for gpu in data.get("after", []):
        profiles = ", ".join(m["profile"] for m in gpu["migDevices"]) or (
            "MIG enabled, no MIG devices" if gpu["migEnabled"] else "MIG disabled"
        )
        console.print(cell(f"GPU {gpu['index']} now: {profiles}"), highlight=False)
    if "after" in data and data["machine"] != "nvml":
        console.print("(a simulated machine: the change lives only in this command)")
    for w in data["warnings"]:
        warn(console, w)
    if data.get("state") == "failed":
        warn(console, data["reason"])


def register(app: typer.Typer) -> None:
    from kgpu.cli.commands import KgpuTyper

    mig = KgpuTyper(
        name="mig",
        help="Apply mig-parted layouts to GPUs (the MIG manager alone).",
        no_args_is_help=True,
    )
    app.add_typer(mig, name="mig")

    @mig.command("apply")
    def apply(
        machine: Annotated[
            str,
            typer.Option(
                "--machine",
                "-m",
                help="Machine profile (see `kgpu machines`), a recorded snapshot .json, or "
                "nvml for this host's GPUs (changes them: needs --yes).",
            ),
        ],
        file: Annotated[
            list[Path] | None,
            typer.Option(
                "--config-file",
                "-f",
                help="mig-parted config, ConfigMap or GPU Operator Helm values (repeatable).",
            ),
        ] = None,
        config_file: Annotated[
            list[str] | None,
            typer.Option(
                "--config",
                "-c",
                help="Same as --config-file, as in plan and agent (repeatable). A value that "
                "is no file but a config name is still taken as --selected-config, with a "
                "warning: that older meaning of -c goes in a later release.",
            ),
        ] = None,
        config: Annotated[
            str | None,
            typer.Option(
                "--selected-config",
                "-s",
                help="The mig-parted config to apply (default: Helm values' "
                "migManager.config.default). The GPU Operator's defaults are built in.",
            ),
        ] = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Print the plan and change nothing.")
        ] = False,
        yes: Annotated[
            bool, typer.Option("--yes", help="Really change this host's GPUs (--machine nvml).")
        ] = False,
        wait: Annotated[
            float,
            typer.Option("--wait", help="Seconds to wait for processes to leave busy GPUs."),
        ] = 0.0,
        hostname: Annotated[str, typer.Option("--hostname", help="Node name.")] = "",
        output: Annotated[str, output_option()] = "table",
    ) -> None:
        """Plan a mig-parted layout for a machine's GPUs and apply it."""
        from kgpu.cli.output import check_output, is_data, print_data, table_console
        from kgpu.cli.plain import fail
        from kgpu.config.loader import load_config_files, select_mig_config
        from kgpu.drivers.migmanager import (
            MigManager,
            MigManagerOptions,
            plan_for,
            read_mig_states,
        )
        from kgpu.errors import FieldError, FieldProblem, KgpuError
        from kgpu.hardware import open_backend
        from kgpu.hardware.backend import MigBackend

        check_output(output)
        files, config = _config_files(file or [], config_file or [], config)
        if machine == "nvml" and not dry_run and not yes:
            fail(
                "--machine nvml changes the MIG layout of this host's GPUs: add --yes to do it, "
                "or --dry-run to see the plan"
            )
        if wait < 0:
            fail("--wait must be >= 0")
        try:
            configs = load_config_files(files)
            selected = select_mig_config(configs, {}, config)
            if selected is None:
                raise FieldError(
                    FieldProblem(
                        "no mig-parted config selected: name one with --selected-config (the "
                        "files set no migManager.config.default)",
                        path="--selected-config",
                    )
                )
            backend = open_backend(machine, hostname=hostname)
        except KgpuError as exc:
            fail(exc)
        try:
            if not isinstance(backend, MigBackend):
                fail(f"{machine}: this backend cannot change MIG layouts")
            before = backend.snapshot()
            plan, warnings = plan_for(selected, before, read_mig_states(backend, before))
            attempt = None
            after = None
            if not dry_run:
                manager = MigManager(
                    backend,
                    lambda: (configs, {}),
                    options=MigManagerOptions(
                        default_config=selected.name, drain_timeout_s=wait, poll_interval_s=0.5
                    ),
                )
                attempt = manager.reconcile()
                while attempt.stage == "draining":
                    time.sleep(attempt.again_s)
                    attempt = manager.reconcile()
                after = backend.snapshot()
        except KgpuError as exc:
            fail(exc)
        finally:
            backend.close()
        data = report(machine, selected.name, plan, warnings, attempt, after)
        if is_data(output):
            print_data(data, output)
        else:
            _print(data, table_console(output))
        if attempt is not None and attempt.state == "failed":
            raise typer.Exit(1)


def _config_files(
    files: list[Path], values: list[str], selected: str | None
) -> tuple[list[Path], str | None]:
    """``-f`` and ``-c`` files together, and the selected config. ``-c`` meant the config
    name here (and a file in plan and agent); a ``-c`` value that is no file and looks like a
    name (no ``/``, no .yaml/.yml/.json) is still read that way, with a warning, once."""
    from kgpu.cli.output import err_console
    from kgpu.cli.plain import fail, warn

    out = list(files)
    for value in values:
        path = Path(value)
        looks_like_name = "/" not in value and path.suffix not in (".yaml", ".yml", ".json")
        if value != "-" and not path.exists() and looks_like_name and selected is None:
            warn(
                err_console,
                f"-c {value}: -c names a config file now, as in plan and agent; taking "
                f"{value!r} as the config name this time (write --selected-config {value})",
            )
            selected = value
            continue
        out.append(path)
    if not out:
        fail("name a mig-parted config, ConfigMap or Helm values file with -f/--config-file FILE")
    return out, selected
