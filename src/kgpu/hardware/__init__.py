"""What a node has: GPU snapshots, machine profiles, MIG geometry and the backends that read them.

Modules: ``model`` (the frozen snapshot types: Machine, Gpu, MigDevice), ``profiles`` (the
built-in machines, as YAML data), ``mig`` (MIG geometry and layouts), ``backend`` (the Backend
protocol, XID events), ``simulated`` and ``nvml`` (the two backends), ``serialize`` (snapshots
as JSON).

:func:`open_backend` is the one place that turns a user's ``--machine`` value into a backend, so
every command (``plan``, ``machines``, ``agent``, ``metrics``) accepts the same spellings and
refuses the same mistakes; :func:`read_machine` is it for commands that need one snapshot.
"""

from __future__ import annotations

from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.backend import Backend, BackendError, XidEvent
from kgpu.hardware.model import Gpu, Machine, MigDevice


def open_backend(spec: str, hostname: str = "", clique: str | None = None) -> Backend:
    """``"nvml"`` reads the real GPUs; a path ending ``.json`` replays a recorded snapshot; any
    other value names a built-in machine profile (``kgpu machines`` lists them).

    ``hostname`` makes simulated UUIDs unique per node; for a snapshot it replaces the recorded
    hostname when given. ``clique`` (``<clusterUUID>.<cliqueId>``) puts a built-in profile's
    GPUs in an NVLink fabric clique, as the fabric manager does on a real tray; real GPUs and
    snapshots report their own.
    """
    if clique is not None and (spec == "nvml" or spec.endswith(".json")):
        raise FieldError(
            FieldProblem(
                "applies to built-in profiles only: real GPUs and snapshots report their own "
                "fabric clique",
                path="--clique",
            )
        )
    if spec == "nvml":
        from kgpu.hardware.nvml import NvmlBackend

        return NvmlBackend()
    from kgpu.hardware.simulated import SimulatedBackend

    if spec.endswith(".json"):
        from dataclasses import replace

        from kgpu.hardware.serialize import load_snapshot

        machine = load_snapshot(spec)
        if hostname:
            machine = replace(machine, hostname=hostname)
        return SimulatedBackend(machine)
    from kgpu.hardware.profiles import load_machine

    try:
        return SimulatedBackend(load_machine(spec, hostname=hostname, clique=clique))
    except FieldError as exc:  # name the option the user typed, not the profile's field
        raise FieldError(
            [
                FieldProblem(p.message, "--clique" if p.path == "clique" else p.path, p.file)
                for p in exc.problems
            ]
        ) from None


def read_machine(spec: str, hostname: str = "", clique: str | None = None) -> Machine:
    """One snapshot of the machine ``--machine`` names (see :func:`open_backend`); the backend
    is closed again. Raises FieldError for a bad value, BackendError when NVML fails."""
    backend = open_backend(spec, hostname=hostname, clique=clique)
    try:
        machine = backend.snapshot()
    finally:
        backend.close()
    if hostname and spec == "nvml":
        from dataclasses import replace

        machine = replace(machine, hostname=hostname)
    return machine


__all__ = [
    "Backend",
    "BackendError",
    "Gpu",
    "Machine",
    "MigDevice",
    "XidEvent",
    "open_backend",
    "read_machine",
]
