"""What a node has: GPU snapshots, machine profiles, MIG geometry and the backends that read them.

:func:`open_backend` is the one place that turns a user's ``--machine`` value into a backend, so
every command accepts the same spellings.
"""

from __future__ import annotations

from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.backend import Backend


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

    return SimulatedBackend(load_machine(spec, hostname=hostname, clique=clique))


__all__ = ["Backend", "open_backend"]
