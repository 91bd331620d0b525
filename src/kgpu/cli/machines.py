"""``kgpu machines [MACHINE]``: the built-in simulated machines, or one machine's GPUs.

Without an argument it lists the profiles ``--machine`` accepts everywhere; with one (a profile,
a recorded ``.json`` snapshot, or ``nvml`` for this node's real GPUs) it shows that machine's
GPUs and the MIG profiles they offer, which is what a user checks before writing a mig-parted
layout. On a real node's snapshot the MIG profiles are the ones its NVML reported (recorded in the
snapshot), with any difference from kgpu's built-in table listed.

``--save FILE`` records the machine's snapshot (``kgpu machines nvml --save node.json`` on a
GPU node): GPUs, MIG devices and geometry as NVML reports them, and the host facts labels and
DRA attributes need (DMI product name, PCI class, PCIe root, addressing mode), so
``--machine node.json`` reproduces the node in ``kgpu plan``, ``kgpu sim`` and bug reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kgpu.cli.output import as_argument, header, output_option
from kgpu.cli.plain import add_row, cell


def machine_report(spec: str, hostname: str = "", save: Path | None = None) -> dict[str, Any]:
    """One machine's snapshot plus the MIG geometry of each distinct product on it (as its
    NVML measured it when the snapshot recorded that, else kgpu's table); ``save`` writes the
    snapshot there first."""
    from kgpu.hardware import read_machine
    from kgpu.hardware.mig import geometry_differences, geometry_for, geometry_from_table
    from kgpu.hardware.serialize import dump_snapshot, machine_to_dict

    machine = read_machine(spec, hostname=hostname)
    if save is not None:
        dump_snapshot(machine, save)
    geometries: dict[str, Any] = {}
    for gpu in machine.gpus:
        table = geometry_for(gpu)
        raw = machine.host_fact("mig_geometry", gpu.index)
        geometry = geometry_from_table(gpu.product_name, raw) if raw else table
        if geometry is None or gpu.product_name in geometries:
            continue
        geometries[gpu.product_name] = {
            "source": "nvml" if raw else "table",
            "differsFromTable": (
                geometry_differences(table, geometry) if raw and table is not None else []
            ),
            "computeSlices": geometry.compute_slices,
            "memorySlices": geometry.memory_slices,
            "profiles": [
                {
                    "name": p.name,
                    "computeSlices": p.compute_slices,
                    "memorySlices": p.memory_slices,
                    "memoryMiB": p.memory_mib,
                    "maxCount": p.max_count,
                    "placements": list(p.placements),
                }
                for p in geometry.profiles.values()
            ],
        }
    data = machine_to_dict(machine)
    data["migGeometry"] = geometries
    return data


def register(app: typer.Typer) -> None:
    @app.command("machines")
    def machines_cmd(
        machine: Annotated[
            str | None,
            typer.Argument(
                metavar="MACHINE",
                help="show one machine: a profile name, a snapshot .json, or nvml",
            ),
        ] = None,
        hostname: Annotated[
            str, typer.Option("--hostname", help="node name (simulated UUIDs derive from it)")
        ] = "",
        output: Annotated[str, output_option()] = "table",
        save: Annotated[
            Path | None,
            typer.Option(
                "--save",
                metavar="FILE",
                help="also write MACHINE's snapshot to FILE (nvml: this node's, for bug reports "
                "and --machine FILE)",
            ),
        ] = None,
    ) -> None:
        """List the built-in simulated machines (or show one machine's GPUs and MIG profiles)."""
        from kgpu.cli.output import check_output, is_data, print_data, table_console
        from kgpu.cli.plain import fail
        from kgpu.errors import FieldError, KgpuError
        from kgpu.hardware.backend import BackendError
        from kgpu.hardware.profiles import describe_profiles

        check_output(output)
        if machine is None and save is not None:
            fail("--save needs a MACHINE to record (kgpu machines nvml --save FILE)")
        if machine is None:
            rows = describe_profiles()
            if is_data(output):
                print_data(rows, output)
            else:
                _profiles_table(table_console(output), rows)
            return
        try:
            report = machine_report(machine, hostname, save)
        except OSError as exc:
            fail(f"--save {save}: cannot write the snapshot: {exc.strerror or exc}")
        except FieldError as exc:
            # the machine is this command's argument, not the --machine other commands take
            fail(as_argument(exc, "--machine", "MACHINE"))
        except KgpuError as exc:
            fail(exc)
        except BackendError as exc:
            fail(str(exc))
        if is_data(output):
            print_data(report, output)
        else:
            _machine_tables(table_console(output), report)


def _profiles_table(console: Any, rows: list[dict[str, object]]) -> None:
    from rich.table import Table

    # below 110 columns the compute capability and driver (`kgpu machines NAME`, -o json) go,
    # so what remains reads without folding; the name, what the user types next, never folds
    wide = console.width >= 110
    header(console, "Simulated machines", "(use with --machine NAME)")
    table = Table(title="Machines")
    table.add_column("NAME", no_wrap=True, min_width=max(len(str(r["name"])) for r in rows))
    columns = ["GPUS", "PRODUCT", "MEMORY", "CC", "MIG", "INTERCONNECT", "DRIVER"]
    if not wide:
        columns = [c for c in columns if c not in ("CC", "DRIVER")]
    for column in columns:
        table.add_column(
            column, justify="right" if column in ("GPUS", "MEMORY") else "left", overflow="fold"
        )
    for row in rows:
        cells = {
            "GPUS": str(row["gpus"]),
            "PRODUCT": str(row["product"]),
            "MEMORY": f"{row['memoryMiB']} MiB",
            "CC": str(row["computeCapability"]),
            "MIG": "yes" if row["migCapable"] else "no",
            "INTERCONNECT": str(row["interconnect"]),
            "DRIVER": f"{row['driverVersion']} / CUDA {row['cudaVersion']}",
        }
        add_row(table, str(row["name"]), *(cells[c] for c in columns))
    console.print(table)
    if not wide:
        console.print(
            "(compute capability and driver: -o wide, kgpu machines NAME, or a wider terminal)",
            highlight=False,
        )


def _machine_tables(console: Any, report: dict[str, Any]) -> None:
    from rich.table import Table

    # below 120 columns the UUID shares a cell with the product and PCI/NUMA/CC/memory go
    # (-o json has them), so a 40-character UUID stays on one line
    wide = console.width >= 120
    title = f"{report['profile']}" + (f" ({report['hostname']})" if report["hostname"] else "")
    cuda = ".".join(str(v) for v in report["cuda_driver_version"])
    header(console, title, f"driver {report['driver_version']}, CUDA {cuda}")
    table = Table(title="GPUs")
    columns = ["GPU", "UUID", "PRODUCT", "MEMORY", "CC", "PCI", "NUMA", "NVLINK", "MIG"]
    if not wide:
        columns = ["GPU", "UUID / PRODUCT", "NVLINK", "MIG"]
    for column in columns:
        if column.startswith("UUID"):
            table.add_column(column, no_wrap=True, min_width=40)
        else:
            table.add_column(column, overflow="fold")
    for gpu in report["gpus"]:
        links = gpu["nvlinks"]
        nvlink = ", ".join(
            f"{'NVSwitch' if link['peer_index'] < 0 else 'GPU ' + str(link['peer_index'])}"
            f" x{link['links']}"
            for link in links
        )
        if gpu["fabric"]:
            fabric = gpu["fabric"]
            nvlink += f" (clique {fabric['cluster_uuid']}.{fabric['clique_id']})"
        mig = "no"
        if gpu["mig_capable"]:
            mig = "enabled" if gpu["mig_enabled"] else "capable"
            if gpu["mig_devices"]:
                mig += ": " + ", ".join(d["profile"] for d in gpu["mig_devices"])
        cells = {
            "GPU": str(gpu["index"]),
            "UUID": gpu["uuid"],
            "UUID / PRODUCT": f"{gpu['uuid']}\n{gpu['product_name']}, {gpu['memory_mib']} MiB",
            "PRODUCT": gpu["product_name"],
            "MEMORY": f"{gpu['memory_mib']} MiB",
            "CC": ".".join(str(v) for v in gpu["compute_capability"]),
            "PCI": gpu["pci_bus_id"],
            "NUMA": "-" if gpu["numa_node"] is None else str(gpu["numa_node"]),
            "NVLINK": nvlink or "-",
            "MIG": mig,
        }
        add_row(table, *(cells[c] for c in columns))
    console.print(table)
    for product, geometry in report["migGeometry"].items():
        mig_table = Table(
            title=cell(
                f"MIG profiles on {product} ({geometry['computeSlices']} compute / "
                f"{geometry['memorySlices']} memory slices)"
            )
        )
        for column in ("PROFILE", "COMPUTE", "MEMORY SLICES", "MEMORY", "MAX", "STARTS"):
            mig_table.add_column(column)
        for p in geometry["profiles"]:
            add_row(
                mig_table,
                p["name"],
                str(p["computeSlices"]),
                str(p["memorySlices"]),
                f"{p['memoryMiB']} MiB",
                str(p["maxCount"]),
                ", ".join(str(s) for s in p["placements"]),
            )
        console.print(mig_table)
