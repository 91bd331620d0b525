"""``kgpu allocate FILE``: the DRA allocator alone, on one file of resource.k8s.io objects.

The file (YAML or JSON) has the keys ``node`` (``{name, labels}``), ``classes``, ``slices``,
``allocated`` (claims whose ``status.allocation`` holds devices already in use), ``claims``
(allocated together, in order, as kube-scheduler allocates the claims of one pod), optionally
``deviceTaintRules`` and ``featureGates`` (``{DRAPrioritizedList: false}``). Each object may be
``resource.k8s.io/v1``, ``v1beta2`` or ``v1beta1`` (DeviceTaintRules ``v1``, ``v1beta2`` or
``v1alpha3``); they are converted to one internal form (:mod:`kgpu.dra.versions`).
``--kubernetes-version`` (default: the newest release, 1.37) picks the release whose gate
defaults apply (:mod:`kgpu.releases`); ``featureGates`` then ``--feature-gates`` override them
as kube-scheduler's flag does.

A shared device's results (``allowMultipleAllocations``) carry ``shareID`` and
``consumedCapacity`` as the API has them; the table shows them in a CONSUMED column, and a note
for each capacity request the allocator rounded up to the device's minimum or step (the JSON keeps
the API's fields only: the rounding shows there as a ``consumedCapacity`` above the request).

Exit status: 0 allocated, 2 unsatisfiable (``unsatisfiable`` says why), 3 broken input found by
the allocator (``error``: a CEL runtime error, an invalid pool...), 1 when the file or a flag is
wrong (every problem named with its path).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard

import typer

from kgpu.cli.output import output_option
from kgpu.cli.plain import add_row, cell
from kgpu.dra.api import RESOURCE_API
from kgpu.errors import FieldError, FieldProblem

if TYPE_CHECKING:
    from kgpu.dra.features import Features

KINDS = {
    "classes": "DeviceClass",
    "slices": "ResourceSlice",
    "allocated": "ResourceClaim",
    "claims": "ResourceClaim",
    "deviceTaintRules": "DeviceTaintRule",
}
KEYS = ("node", *KINDS, "featureGates")
_KEYS_TEXT = ", ".join(KEYS)
#: exit status per outcome
EXIT_ALLOCATED, EXIT_BAD_INPUT, EXIT_UNSATISFIABLE, EXIT_ERROR = 0, 1, 2, 3


def load_input(path: Path) -> dict[str, Any]:
    """Read and check the file; :class:`FieldError` names the entry and field at fault.

    The allocator trusts its input the way kube-scheduler trusts objects the API server has
    validated, so everything the API server would refuse is refused here first: wrong shapes and
    types (against the official schema when kubernetes-validate is installed, and by the
    structural checks below in any case), counts below 1 and CEL that does not compile.
    """
    from kgpu.userfiles import display_name, parse_json, parse_yaml, read_text

    file = display_name(path)
    if path.is_dir():
        raise FieldError(FieldProblem("is a directory; kgpu allocate reads one file", file=file))
    text = read_text(path, shown=file)  # regular files or - (stdin), bounded, UTF-8
    if path.suffix == ".json":
        data = parse_json(text, file=file)
    else:
        docs = parse_yaml(text, file=file)
        if len(docs) > 1:
            raise FieldError(
                FieldProblem(
                    f"{len(docs)} YAML documents; kgpu allocate reads one mapping with keys "
                    f"{_KEYS_TEXT}",
                    file=file,
                )
            )
        data = docs[0] if docs else None
    return check_input(data, file)


def check_input(data: Any, file: str) -> dict[str, Any]:
    """:func:`load_input`'s checks on a document already read (``kgpu validate`` reads it
    once, standard input included)."""
    problems: list[FieldProblem] = []
    if not isinstance(data, dict):
        raise FieldError(
            FieldProblem(
                f"must be a mapping with keys {_KEYS_TEXT} (see examples/dra/allocate-gb200.yaml)",
                file=file,
            )
        )
    if isinstance(data.get("kind"), str) and "apiVersion" in data:
        raise FieldError(
            FieldProblem(
                f"this is a single {data['kind']} manifest; kgpu allocate reads one mapping with "
                f"keys {_KEYS_TEXT}, each a list of objects (see examples/dra/allocate-gb200.yaml)",
                file=file,
            )
        )
    if {"nodes", "apply", "steps"} & set(data) and "node" not in data:
        raise FieldError(
            FieldProblem(
                "this is a kgpu sim scenario (nodes/apply/steps): run it with kgpu sim FILE; "
                f"kgpu allocate reads {_KEYS_TEXT}",
                file=file,
            )
        )
    unknown = sorted(set(data) - set(KEYS), key=str)  # keys may be numbers, null...
    for key in unknown:
        problems.append(FieldProblem(f"unknown key; allowed: {_KEYS_TEXT}", str(key), file))
    gates = data.get("featureGates")
    if gates is not None:
        from kgpu.dra.features import DEFAULT, FeatureGateError

        if not isinstance(gates, dict):
            problems.append(
                FieldProblem(
                    "must be a mapping such as {DRAPrioritizedList: false}", "featureGates", file
                )
            )
        else:
            for name, value in gates.items():
                try:
                    DEFAULT.with_gates({name: value})
                except FeatureGateError as exc:
                    problems.append(FieldProblem(str(exc), f"featureGates.{name}", file))
    node = data.get("node")
    if not isinstance(node, dict) or not isinstance(node.get("name"), str) or not node["name"]:
        problems.append(FieldProblem("must be a mapping with a non-empty name", "node.name", file))
    elif not isinstance(node.get("labels") or {}, dict):
        problems.append(FieldProblem("must be a mapping of label to value", "node.labels", file))
    converted: dict[str, Any] = {"node": node, "featureGates": gates or {}}
    for key, kind in KINDS.items():
        items = data.get(key) or []
        if not isinstance(items, list):
            problems.append(FieldProblem(f"must be a list of {kind} objects", key, file))
            continue
        converted[key] = []
        for i, obj in enumerate(items):
            found, v1 = _check_object(key, kind, obj, f"{key}[{i}]", file)
            problems += found
            converted[key].append(v1)
    if problems:
        raise FieldError(problems)
    return converted


def _check_object(
    key: str, kind: str, obj: Any, where: str, file: str
) -> tuple[list[FieldProblem], Any]:
    """(problems, the object in v1 form)."""
    from kgpu.dra.versions import GROUP, TAINT_RULE_VERSIONS, VERSIONS, VersionError, to_v1

    if not isinstance(obj, dict):
        return [FieldProblem(f"must be a {kind} object", where, file)], obj
    problems: list[FieldProblem] = []
    if obj.get("kind", kind) != kind:
        problems.append(
            FieldProblem(f"kind {obj.get('kind')!r}, expected {kind}", f"{where}.kind", file)
        )
    versions = TAINT_RULE_VERSIONS if kind == "DeviceTaintRule" else VERSIONS
    api = obj.get("apiVersion", f"{GROUP}/{versions[0]}")
    if not isinstance(api, str) or not any(api == f"{GROUP}/{v}" for v in versions):
        problems.append(
            FieldProblem(
                f"apiVersion {api!r}; kgpu allocate reads "
                + ", ".join(f"{GROUP}/{v}" for v in versions),
                f"{where}.apiVersion",
                file,
            )
        )
    if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
        problems.append(FieldProblem("required", f"{where}.metadata.name", file))
    if not isinstance(obj.get("spec"), dict):
        problems.append(FieldProblem("required (a mapping)", f"{where}.spec", file))
    if problems:
        return problems, obj
    original = {"apiVersion": api, "kind": kind, **obj}
    try:
        v1 = to_v1(original)
    except VersionError as exc:  # pragma: no cover - the apiVersion was checked above
        return [FieldProblem(str(exc), f"{where}.apiVersion", file)], obj
    beta1 = api.endswith("/v1beta1")
    shape = _Shape(where, file, beta1)
    spec = v1["spec"]
    if key == "classes":
        shape.selectors(spec.get("selectors"), "spec.selectors")
    elif key == "slices":
        shape.slice_spec(spec)
    elif key in ("claims", "allocated"):
        shape.claim_spec(spec, require_requests=key == "claims")
        if key == "allocated":
            shape.allocation(v1.get("status"))
    # the schema's wording is rawer; it speaks only when the structural checks found nothing
    problems = shape.problems or _schema_problems(original, kind, where, file)
    if not problems and key == "slices":  # the API server's rules the schema lacks
        from kgpu.dra.slices import slice_problems
        from kgpu.dra.versions import slice_path

        version = api.rpartition("/")[2]
        problems = [
            FieldProblem(p.message, f"{where}.{slice_path(p.path, version)}", file)
            for p in slice_problems(v1)
        ]
    return problems, v1


def _schema_problems(obj: dict[str, Any], kind: str, where: str, file: str) -> list[FieldProblem]:
    """What the API server says: its rules and the official schema (when installed)."""
    from kgpu.manifests import validate_manifest

    full = {"apiVersion": RESOURCE_API, "kind": kind, **obj}
    if kind == "DeviceTaintRule" and "apiVersion" not in obj:
        full["apiVersion"] = "resource.k8s.io/v1beta2"
    return [
        FieldProblem(p.message, f"{where}.{p.path}" if p.path else where, file)
        for p in validate_manifest(full)
    ]


class _Shape:
    """Structural checks of the fields the allocator reads, with the API server's limits.

    Checks run on the v1 form; for a v1beta1 object the paths are given in its own shape
    (``requests[0].count`` rather than ``requests[0].exactly.count``)."""

    def __init__(self, where: str, file: str, beta1: bool = False) -> None:
        self.where = where
        self.file = file
        self.beta1 = beta1
        self.problems: list[FieldProblem] = []

    def bad(self, path: str, message: str) -> None:
        if self.beta1:
            path = path.replace(".exactly.", ".").removesuffix(".exactly")
            path = re.sub(r"(spec\.devices\[\d+\])\.(?!name)", r"\1.basic.", path)
        self.problems.append(FieldProblem(message, f"{self.where}.{path}", self.file))

    def is_(
        self, value: Any, want: type, path: str, what: str, required: bool = False
    ) -> TypeGuard[Any]:
        if value is None:
            if required:
                self.bad(path, f"required ({what})")
            return False
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            self.bad(path, f"must be {what}, not {type(value).__name__}: {value!r}")
            return False
        return True

    def selectors(self, value: Any, path: str) -> None:
        from kgpu.dra.checks import selector_problems

        if not self.is_(value, list, path, "a list of {cel: {expression: ...}}"):
            return
        for i, sel in enumerate(value):
            at = f"{path}[{i}]"
            if not self.is_(sel, dict, at, "a mapping with cel.expression", True):
                continue
            if not self.is_(sel.get("cel"), dict, f"{at}.cel", "a mapping with expression", True):
                continue
            expr = sel["cel"].get("expression")
            self.is_(expr, str, f"{at}.cel.expression", "a CEL expression string", True)
        for problem in selector_problems(value, path):
            self.bad(problem.path, problem.message)

    def slice_spec(self, spec: dict[str, Any]) -> None:
        self.is_(spec.get("driver"), str, "spec.driver", "a driver name", True)
        if self.is_(spec.get("pool"), dict, "spec.pool", "a mapping with name", True):
            pool = spec["pool"]
            self.is_(pool.get("name"), str, "spec.pool.name", "a string", True)
            for f in ("generation", "resourceSliceCount"):
                self.is_(pool.get(f), int, f"spec.pool.{f}", "an integer")
        devices = spec.get("devices")
        if not self.is_(devices, list, "spec.devices", "a list of devices"):
            return
        for i, dev in enumerate(devices):
            at = f"spec.devices[{i}]"
            if not self.is_(dev, dict, at, "a device mapping", True):
                continue
            self.is_(dev.get("name"), str, f"{at}.name", "a string", True)
            for f in ("attributes", "capacity"):
                entries = dev.get(f)
                if self.is_(entries, dict, f"{at}.{f}", "a mapping"):
                    for name, v in entries.items():
                        self.is_(v, dict, f"{at}.{f}.{name}", "a mapping such as {int: 1}")
            consumes = dev.get("consumesCounters")
            if self.is_(consumes, list, f"{at}.consumesCounters", "a list"):
                for j, c in enumerate(consumes):
                    cat = f"{at}.consumesCounters[{j}]"
                    if self.is_(c, dict, cat, "a mapping with counterSet, counters", True):
                        self.is_(c.get("counters"), dict, f"{cat}.counters", "a mapping")

    def claim_spec(self, spec: dict[str, Any], require_requests: bool) -> None:
        devices = spec.get("devices")
        if not self.is_(devices, dict, "spec.devices", "a mapping with requests", require_requests):
            return
        requests = devices.get("requests")
        if not self.is_(requests, list, "spec.devices.requests", "a list of requests"):
            if require_requests and requests is None:
                self.bad("spec.devices.requests", "at least one request is required")
            return
        if require_requests and not requests:
            self.bad("spec.devices.requests", "at least one request is required")
        for j, req in enumerate(requests):
            at = f"spec.devices.requests[{j}]"
            if not self.is_(req, dict, at, "a request mapping", True):
                continue
            self.is_(req.get("name"), str, f"{at}.name", "a string", True)
            exactly, first = req.get("exactly"), req.get("firstAvailable")
            if bool(exactly) == bool(first):
                self.bad(at, "exactly one of exactly, firstAvailable is required")
            elif exactly is not None:
                self.request(exactly, f"{at}.exactly")
            elif self.is_(first, list, f"{at}.firstAvailable", "a list of subrequests"):
                for k, sub in enumerate(first):
                    sat = f"{at}.firstAvailable[{k}]"
                    if self.is_(sub, dict, sat, "a subrequest mapping", True):
                        self.is_(sub.get("name"), str, f"{sat}.name", "a string", True)
                        self.request(sub, sat)
        for key in ("constraints", "config"):
            items = devices.get(key)
            if self.is_(items, list, f"spec.devices.{key}", "a list"):
                for k, item in enumerate(items):
                    ok = self.is_(item, dict, f"spec.devices.{key}[{k}]", "a mapping", True)
                    if ok and key == "config":
                        self.opaque(item.get("opaque"), f"spec.devices.config[{k}].opaque")

    def opaque(self, opaque: Any, at: str) -> None:
        from kgpu.dra.checks import opaque_problems

        for problem in opaque_problems(opaque, at):
            self.bad(problem.path, problem.message)

    def request(self, req: Any, at: str) -> None:
        if not self.is_(req, dict, at, "a mapping with deviceClassName", True):
            return
        self.is_(req.get("deviceClassName"), str, f"{at}.deviceClassName", "a string", True)
        mode = req.get("allocationMode", "ExactCount")
        if mode not in ("ExactCount", "All"):
            self.bad(f"{at}.allocationMode", f"{mode!r}; allowed: ExactCount, All")
        count = req.get("count")
        if self.is_(count, int, f"{at}.count", "an integer") and count < 1:
            self.bad(f"{at}.count", f"must be at least 1, not {count}")
        self.selectors(req.get("selectors"), f"{at}.selectors")

    def allocation(self, status: Any) -> None:
        if not self.is_(status, dict, "status", "a mapping with allocation", True):
            return
        alloc = status.get("allocation")
        if not self.is_(alloc, dict, "status.allocation", "a mapping with devices.results", True):
            return
        devices = alloc.get("devices")
        if not self.is_(devices, dict, "status.allocation.devices", "a mapping with results"):
            return
        results = devices.get("results")
        if self.is_(results, list, "status.allocation.devices.results", "a list"):
            for k, res in enumerate(results):
                at = f"status.allocation.devices.results[{k}]"
                if self.is_(res, dict, at, "a mapping with driver, pool, device", True):
                    for f in ("driver", "pool", "device"):
                        self.is_(res.get(f), str, f"{at}.{f}", "a string", True)


def features_for(
    data: dict[str, Any], flag: str | None = None, minor: int | None = None
) -> Features:
    """The feature gates: release ``1.<minor>``'s defaults (newest when None), the file's
    ``featureGates``, then ``--feature-gates``; :class:`~kgpu.dra.features.FeatureGateError`
    for a gate the release lacks or a locked one set against its lock."""
    from kgpu.dra.features import Features, parse_gate_list
    from kgpu.releases import NEWEST

    release = NEWEST if minor is None else minor
    gates = dict(data.get("featureGates") or {})
    if flag:
        gates.update(parse_gate_list(flag))
    return Features.for_release(release, gates)


def run(data: dict[str, Any], features: Features | None = None) -> dict[str, Any]:
    """The JSON answer for v1 input (see :func:`load_input`): ``{"allocations": [...],
    "error": None}``, ``{"allocations": None, "error": None, "unsatisfiable": why}``, or
    ``{"allocations": None, "error": what is broken}``."""
    from kgpu.dra.allocator import AllocationError, build

    features = features or features_for(data)
    claims = data.get("claims") or []
    try:
        alloc = build(
            classes=data.get("classes") or [],
            slices=data.get("slices") or [],
            allocated=data.get("allocated") or [],
            features=features,
            taint_rules=data.get("deviceTaintRules") or [],
        )
        results, why = alloc.allocate_explained(data["node"], claims)
    except AllocationError as exc:
        return {"allocations": None, "error": str(exc)}
    if results is None:
        return {"allocations": None, "error": None, "unsatisfiable": why}
    out = []
    for claim, result in zip(claims, results, strict=True):
        meta = claim.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        entry: dict[str, Any] = {
            # namespace and name as every kgpu JSON names an object; claim: both, for older
            # scripts
            "namespace": namespace,
            "name": meta.get("name"),
            "claim": f"{namespace}/{meta.get('name')}",
            "results": result["devices"]["results"],
            "nodeSelector": result.get("nodeSelector"),
        }
        if result["devices"].get("config"):
            entry["config"] = result["devices"]["config"]
        out.append(entry)
    return {"allocations": out, "error": None}


def _capacity_requests(claim: dict[str, Any], request: str) -> dict[str, Any]:
    """The ``capacity.requests`` of ``request`` (``name`` or ``name/subrequest``) in ``claim``."""
    name, _, sub = request.partition("/")
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if req.get("name") != name:
            continue
        found: dict[str, Any]
        if sub:
            found = next((a for a in req.get("firstAvailable") or [] if a.get("name") == sub), {})
        else:
            found = req.get("exactly") or req
        return dict((found.get("capacity") or {}).get("requests") or {})
    return {}


def rounding_notes(data: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """A line per capacity request the allocator rounded up (below the device's minimum or off
    its step: kube-scheduler consumes the next valid amount, ``consumedCapacity`` says which),
    for the table; the JSON answer keeps the API's fields only."""
    from kgpu.quantity import parse_quantity

    notes: list[str] = []
    for claim, entry in zip(
        data.get("claims") or [], answer.get("allocations") or [], strict=False
    ):
        for res in entry["results"]:
            consumed = res.get("consumedCapacity") or {}
            for name, asked in sorted(_capacity_requests(claim, res["request"]).items()):
                got = consumed.get(name)
                if got is None or parse_quantity(str(asked)) == parse_quantity(str(got)):
                    continue
                notes.append(
                    f"{entry['claim']}, request {res['request']}: {name} {asked} rounded up to "
                    f"{got} on {res['device']} (its requestPolicy's minimum and step, as "
                    "kube-scheduler rounds)"
                )
    return notes


def exit_code(answer: dict[str, Any]) -> int:
    if answer.get("allocations") is not None:
        return EXIT_ALLOCATED
    return EXIT_ERROR if answer.get("error") else EXIT_UNSATISFIABLE


def register(app: typer.Typer) -> None:
    @app.command("allocate")
    def allocate_cmd(
        file: Annotated[
            Path,
            typer.Argument(
                metavar="FILE",
                help="YAML/JSON with node, classes, slices, allocated, claims "
                "(resource.k8s.io v1, v1beta2 or v1beta1 objects), deviceTaintRules, featureGates",
            ),
        ],
        output: Annotated[str, output_option()] = "table",
        feature_gates: Annotated[
            str | None,
            typer.Option(
                "--feature-gates",
                help="kube-scheduler style Name=true|false,...: DRAPrioritizedList, "
                "DRADeviceTaints, DRAPartitionableDevices, DRAConsumableCapacity... "
                "(defaults: those of --kubernetes-version)",
            ),
        ] = None,
        kubernetes_version: Annotated[
            str | None,
            typer.Option(
                "--kubernetes-version",
                help="the kube-scheduler release whose feature-gate defaults apply, 1.32 to "
                "1.37 (default: 1.37, the newest)",
            ),
        ] = None,
    ) -> None:
        """Run the DRA allocator (kube-scheduler semantics) on one file.

        Exit status: 0 allocated, 2 unsatisfiable, 3 allocator error (broken input such as a
        CEL runtime error), 1 bad file or flag."""
        from kgpu.cli.output import check_output, is_data, print_data, table_console
        from kgpu.cli.plain import fail
        from kgpu.dra.features import FeatureGateError
        from kgpu.releases import parse_modelled

        check_output(output)
        minor = None
        if kubernetes_version is not None:
            try:
                minor = parse_modelled(kubernetes_version)
            except ValueError as exc:
                fail(f"--kubernetes-version: {exc}")
        try:
            data = load_input(file)
        except FieldError as exc:
            fail(exc)
        try:
            features_for(data, None, minor)
        except FeatureGateError as exc:
            fail(FieldError(FieldProblem(str(exc), "featureGates", str(file))))
        try:
            features = features_for(data, feature_gates, minor)
        except FeatureGateError as exc:
            fail(f"--feature-gates: {exc}")
        answer = run(data, features)
        if is_data(output):
            print_data(answer, output)
        else:
            _print_table(table_console(output), file, answer, rounding_notes(data, answer))
        code = exit_code(answer)
        if code:
            raise typer.Exit(code)


def _consumed(res: dict[str, Any]) -> str:
    """A shared device's result: its share and what it consumes (empty for exclusive ones)."""
    consumed = res.get("consumedCapacity") or {}
    amounts = ", ".join(f"{k} {v}" for k, v in sorted(consumed.items()))
    share = res.get("shareID")
    return f"share {share[:8]}: {amounts}" if share else amounts


def _print_table(
    console: Any, file: Path, answer: dict[str, Any], notes: list[str] | None = None
) -> None:
    from rich.table import Table

    from kgpu.cli.output import header

    allocations = answer["allocations"]
    header(
        console,
        str(file),
        "claims not allocated" if allocations is None else f"{len(allocations)} claim(s) allocated",
    )

    if answer["allocations"] is None:
        if answer.get("error"):
            console.print(f"[red]error:[/red] {cell(answer['error'])}", highlight=False)
        else:
            console.print(
                f"[yellow]unsatisfiable:[/yellow] {cell(answer['unsatisfiable'])}",
                highlight=False,
                soft_wrap=True,
            )
        return
    if not answer["allocations"]:
        console.print("nothing to allocate: the file has no claims", highlight=False)
        return
    # nothing is cut with an ellipsis: at 80 columns long pool and device names fold instead
    rows: list[tuple[str, str, str, str]] = []
    consumed: list[str] = []
    where: list[str] = []
    for entry in answer["allocations"]:
        sel = entry.get("nodeSelector")
        where.append(f"{entry['claim']}: " + (_describe_selector(sel) if sel else "any node"))
        for i, res in enumerate(entry["results"]):
            admin = " (admin)" if res.get("adminAccess") else ""
            device = f"{res['pool']}/{res['device']}{admin}"
            rows.append((entry["claim"] if i == 0 else "", res["request"], device, res["driver"]))
            consumed.append(_consumed(res))
    shared = any(consumed)  # a CONSUMED column only when a device is shared
    table = Table(title="Allocation")
    wide = console.width >= 100  # narrower: the driver goes under the device, in one column
    widest = max((len(r[2]) for r in rows), default=0)
    table.add_column("CLAIM", overflow="fold")
    table.add_column("REQUEST", overflow="fold")
    device_header = "DEVICE (POOL/DEVICE)" if wide else "DEVICE (POOL/DEVICE, DRIVER)"
    table.add_column(device_header, overflow="fold", min_width=min(widest, 40))
    if wide:
        table.add_column("DRIVER", overflow="fold")
    if shared:
        table.add_column("CONSUMED (SHARE)", overflow="fold")
    for (claim, request, device, driver), used in zip(rows, consumed, strict=True):
        cells = (
            [claim, request, device, driver] if wide else [claim, request, f"{device}\n{driver}"]
        )
        add_row(table, *cells, *([used] if shared else []))
    console.print(table)
    console.print("Node selectors:", highlight=False)
    for line in where:
        console.print(f"  {cell(line)}", highlight=False, soft_wrap=True)
    for note in notes or []:
        console.print(f"[yellow]note:[/yellow] {cell(note)}", highlight=False, soft_wrap=True)


def _describe_selector(sel: dict[str, Any]) -> str:
    parts = []
    for term in sel.get("nodeSelectorTerms") or []:
        for r in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            values = ",".join(r.get("values") or [])
            parts.append(f"{r.get('key')} {r.get('operator')} {values}".strip())
    return "; ".join(parts)
