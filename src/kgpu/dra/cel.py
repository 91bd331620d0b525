"""CEL device selectors with Kubernetes' semantics on top of the ``cel`` (Rust) library.

kube-scheduler evaluates a DeviceClass's or a request's selector against one device at a time,
with one variable, ``device``: ``device.driver`` (string), ``device.attributes[domain]`` and
``device.capacity[domain]`` (maps keyed by the qualified name's domain; an attribute without a
domain belongs to the driver's domain). Kubernetes' CEL environment adds libraries the ``cel``
package does not ship; they are registered here as Python functions:

* semver: ``semver(s)``, ``semver(s, normalize)``, ``isSemver``, ``major()``/``minor()``/
  ``patch()``, ``compareTo``, ``isGreaterThan``/``isLessThan``. Version attributes arrive as
  semver values, as in Kubernetes.
* quantity: ``quantity(s)``, ``isQuantity``, ``sign()``, ``isInteger()``, ``asInteger()``,
  ``asApproximateFloat()``, ``add``/``sub``, ``compareTo``, ``isGreaterThan``/``isLessThan``.
  Capacities arrive as quantity values.
* ``cel.bind(name, init, body)`` (Kubernetes enables cel-go's bindings extension), rewritten to
  a one-element comprehension before compiling.

Semantics pinned by tests and relied upon by the allocator:

* A missing attribute is a runtime error for that device ("no such key: <name>"), never a
  silent false; a domain with no attributes at all is an empty map, as in Kubernetes.
* No heterogeneous conversions: ``"8" == 8`` is false, ordering across types is "no such
  overload".
* semver and quantity values are tagged maps inside the evaluator (the library cannot carry
  foreign objects), normalised so ``==`` compares them semantically like Kubernetes does
  (``quantity("1Gi") == quantity("1024Mi")``). Known gap: comparing one with a plain string
  yields false where cel-go reports "no such overload".

Each expression compiles once (:func:`compile_selector` caches), and :class:`Selector` knows
which attribute and capacity names it can read, so the allocator can share one result between
devices that agree on those names (:meth:`Selector.signature`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Any

import cel

from kgpu.errors import KgpuError
from kgpu.quantity import parse_quantity as parse_quantity  # re-exported for the allocator

# The library logs every failing Python function call (pyo3-log, logger "cel") before raising;
# kgpu reports those errors itself, with context, so the log lines would only be noise on
# stderr (and around ``-o json`` output).
_CEL_LOG = logging.getLogger("cel")
_CEL_LOG.addHandler(logging.NullHandler())
_CEL_LOG.propagate = False

TYPE_KEY = "@kgpu.type"


class CelCompileError(KgpuError):
    """The expression does not parse (kube-scheduler: "CEL compile error")."""


class CelRuntimeError(KgpuError):
    """Evaluating the expression against one device failed (kube-scheduler: "CEL runtime
    error"): a missing attribute, a type mismatch, a bad argument to a library function."""


# -- semver ------------------------------------------------------------------------------------

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def parse_semver(text: str, normalize: bool = False) -> tuple[int, int, int, str]:
    """(major, minor, patch, prerelease) of a strict semver 2.0 string. With ``normalize``
    (Kubernetes' ``semver(s, true)``): a leading "v", missing minor/patch and leading zeros are
    accepted. Build metadata is dropped: it does not take part in comparisons."""
    s = text
    if normalize:
        s = s.removeprefix("v")
        m = re.match(r"^(\d+(?:\.\d+){0,2})(.*)$", s)
        if m:
            parts = [str(int(p)) for p in m.group(1).split(".")]
            s = ".".join(parts + ["0"] * (3 - len(parts))) + m.group(2)
    m = _SEMVER.match(s)
    if not m:
        if len(s.split("-")[0].split("+")[0].split(".")) < 3:
            raise ValueError("No Major.Minor.Patch elements found")  # blang/semver's words
        raise ValueError(f"invalid semantic version {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or ""


def semver_value(text: str, normalize: bool = False) -> dict[str, Any]:
    major, minor, patch, pre = parse_semver(text, normalize)
    return {TYPE_KEY: "semver", "major": major, "minor": minor, "patch": patch, "pre": pre}


def _pre_key(pre: str) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    if not pre:
        return (1, ())  # a release sorts after all of its prereleases
    idents = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (0, idents)


def _semver_key(v: Mapping[str, Any]) -> tuple[Any, ...]:
    return (v["major"], v["minor"], v["patch"], _pre_key(v["pre"]))


# -- quantity ----------------------------------------------------------------------------------
# Parsing is kgpu.quantity's (the API server's grammar and wording); ``parse_quantity`` stays
# importable from here for the allocator.


def _canonical(d: Decimal) -> str:
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def quantity_value(value: str | int | Decimal) -> dict[str, Any]:
    d = parse_quantity(value) if isinstance(value, str) else Decimal(value)
    return {TYPE_KEY: "quantity", "value": _canonical(d)}


def _q(v: Mapping[str, Any]) -> Decimal:
    return Decimal(v["value"])


# -- library functions -------------------------------------------------------------------------


def _kind(v: Any) -> str:
    return str(v.get(TYPE_KEY)) if isinstance(v, dict) else type(v).__name__


def _need(v: Any, *kinds: str) -> str:
    kind = _kind(v)
    if kind not in kinds:
        raise TypeError(f"no such overload: {'|'.join(kinds)} expected, got {kind}")
    return kind


def _compare(a: Any, b: Any) -> int:
    kind = _need(a, "semver", "quantity")
    _need(b, kind)
    if kind == "semver":
        ka, kb = _semver_key(a), _semver_key(b)
    else:
        ka, kb = _q(a), _q(b)  # type: ignore[assignment]
    return (ka > kb) - (ka < kb)


def _overload(name: str, *args: Any) -> TypeError:
    kinds = ", ".join(_kind(a) for a in args)
    return TypeError(f"found no matching overload for '{name}' applied to '({kinds})'")


def _semver_args(name: str, text: Any, normalize: Any) -> bool:
    if not isinstance(text, str) or not isinstance(normalize, bool | None):
        raise _overload(name, *((text,) if normalize is None else (text, normalize)))
    return bool(normalize)


def _semver_fn(text: Any, normalize: Any = None) -> dict[str, Any]:
    return semver_value(text, _semver_args("semver", text, normalize))


def _is_semver(text: Any, normalize: Any = None) -> bool:
    flag = _semver_args("isSemver", text, normalize)
    try:
        parse_semver(text, flag)
    except ValueError:
        return False
    return True


#: the API server's looser first check (resource.ParseQuantity): what passes it and still
#: fails has a bad suffix
_QUANTITY_SHAPE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")


def _quantity_fn(text: Any) -> dict[str, Any]:
    if not isinstance(text, str):
        raise _overload("quantity", text)
    try:
        return quantity_value(text)
    except ValueError:
        if _QUANTITY_SHAPE.match(text):
            raise ValueError("unable to parse quantity's suffix") from None
        raise


def _is_quantity(text: Any) -> bool:
    if not isinstance(text, str):
        raise _overload("isQuantity", text)
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _as_quantity(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise TypeError("no such overload: quantity or int expected, got bool")
    if isinstance(v, int):
        return Decimal(v)
    _need(v, "quantity")
    return _q(v)


def _add(a: Any, b: Any) -> dict[str, Any]:
    _need(a, "quantity")
    return quantity_value(_q(a) + _as_quantity(b))


def _sub(a: Any, b: Any) -> dict[str, Any]:
    _need(a, "quantity")
    return quantity_value(_q(a) - _as_quantity(b))


def _int_arg(name: str, a: Any, b: Any) -> int:
    if isinstance(b, bool) or not isinstance(b, int):
        raise _overload(name, a, b)
    return b


def _mul(a: Any, b: Any) -> dict[str, Any]:
    _need(a, "quantity")
    return quantity_value(_q(a) * _int_arg("mul", a, b))


def _div(a: Any, b: Any) -> dict[str, Any]:
    _need(a, "quantity")
    n = _int_arg("div", a, b)
    if n == 0:
        raise ValueError("division by zero")
    return quantity_value((_q(a) / n).quantize(Decimal("1e-9")))


def _div_int(a: Any, b: Any) -> dict[str, Any]:
    _need(a, "quantity")
    n = _int_arg("divInt", a, b)
    if n == 0:
        raise ValueError("division by zero")
    return quantity_value((_q(a) / n).to_integral_value(rounding=ROUND_DOWN))


def _as_integer(a: Any) -> int:
    _need(a, "quantity")
    d = _q(a)
    if d != d.to_integral_value() or abs(d) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return int(d)


def _is_integer(a: Any) -> bool:
    _need(a, "quantity")
    d = _q(a)
    return bool(d == d.to_integral_value() and abs(d) < 2**63)


def _sign(a: Any) -> int:
    _need(a, "quantity")
    d = _q(a)
    return (d > 0) - (d < 0)


def _approx(a: Any) -> float:
    _need(a, "quantity")
    return float(_q(a))


def _semver_part(name: str) -> Callable[[Any], int]:
    def part(v: Any) -> int:
        _need(v, "semver")
        return int(v[name])

    return part


#: Functions Kubernetes' CEL environment has and the ``cel`` package lacks.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "semver": _semver_fn,
    "isSemver": _is_semver,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    "quantity": _quantity_fn,
    "isQuantity": _is_quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "divInt": _div_int,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda a: _approx(a),
}


def _stdlib_functions() -> dict[str, Callable[..., Any]]:
    """String/list helpers Kubernetes also has (lowerAscii, split, join...)."""
    from cel import stdlib

    ctx = cel.Context()
    stdlib.add_stdlib_to_context(ctx)
    return dict(ctx.functions)


# -- cel.bind ----------------------------------------------------------------------------------


def _split_call(src: str, open_at: int) -> tuple[list[str], int]:
    """Top-level comma-separated arguments of the call whose "(" is at ``open_at``, and the
    index just past its ")"."""
    depth, args, start, i, quote = 0, [], open_at + 1, open_at, ""
    while i < len(src):
        ch = src[i]
        if quote:
            if ch == "\\":
                i += 1
            elif src.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif ch in "\"'":
            quote = src[i : i + 3] if src[i : i + 3] in ('"""', "'''") else ch
            i += len(quote) - 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(src[start:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(src[start:i])
            start = i + 1
        i += 1
    raise CelCompileError(f"unbalanced parentheses in {src!r}")


_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(")


def rewrite_bind(src: str) -> str:
    """``cel.bind(x, init, body)`` -> ``[init].map(x, body)[0]`` (same value, same scoping)."""
    while True:
        m = _BIND.search(src)
        if not m:
            return src
        args, end = _split_call(src, m.end() - 1)
        if len(args) != 3:
            raise CelCompileError("cel.bind takes exactly three arguments")
        var, init, body = (a.strip() for a in args)
        src = f"{src[: m.start()]}[{init}].map({var}, {body})[0]{src[end:]}"


# -- compiled selectors ------------------------------------------------------------------------

_TOKENS = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[A-Za-z_][A-Za-z0-9_]*")
#: Identifiers that can read attributes or capacities not named in the expression.
_DYNAMIC = {"exists", "all", "exists_one", "map", "filter", "size", "keys", "values", "in"}
_DOMAIN_INDEX = re.compile(
    r"\b(?:attributes|capacity)\s*\[\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
)


def _unquote(tok: str) -> str:
    return tok[1:-1]


@dataclass(frozen=True)
class Selector:
    """One compiled selector expression.

    ``names`` are the identifiers and string literals it mentions (the only attribute and
    capacity names it can read, unless ``dynamic``); ``domains`` are the literal domains it
    indexes, which must exist as (possibly empty) maps when it runs.
    """

    expression: str
    program: Any
    names: frozenset[str]
    domains: frozenset[str]
    dynamic: bool

    def evaluate(self, device: Mapping[str, Any]) -> bool:
        """Run against one device view (see :func:`device_view`); :class:`CelRuntimeError`
        when evaluation fails or yields a non-bool."""
        result = self.value(device)
        if not isinstance(result, bool):
            raise CelRuntimeError(
                f"CEL result of type {_type_name(result)} could not be converted to bool"
            )
        return result

    def value(self, device: Mapping[str, Any] | None = None) -> Any:
        """The expression's value (semver and quantity values as tagged maps)."""
        variables: dict[str, Any] = {}
        if device is not None:
            attrs = device["attributes"]
            caps = device["capacity"]
            if any(d not in attrs or d not in caps for d in self.domains):
                attrs = {**{d: {} for d in self.domains}, **attrs}
                caps = {**{d: {} for d in self.domains}, **caps}
            variables["device"] = {
                "driver": device["driver"],
                "attributes": attrs,
                "capacity": caps,
                "allowMultipleAllocations": device.get("allowMultipleAllocations", False),
            }
        return self.run(variables)

    def run(self, variables: Mapping[str, Any]) -> Any:
        """The expression's value with ``variables`` bound (``device`` for a selector; the
        admission variables for :func:`compile_admission`); :class:`CelRuntimeError` on
        failure, with cel-go's wording."""
        variables = {**variables, **_ALL_FUNCTIONS}
        try:
            return self.program.execute(variables)
        except KeyError as exc:
            raise CelRuntimeError(
                f"no such key: {exc.args[0] if exc.args else ''}. Consider using CEL optional "
                "chaining (?), has() macro, or orValue() for optional fields"
            ) from None
        except ZeroDivisionError as exc:  # cel-go's wording: an evaluation error, no panic
            modulus = "modulo" in str(exc) or "modulus" in str(exc)
            raise CelRuntimeError("modulus by zero" if modulus else "division by zero") from None
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
            raise CelRuntimeError(_clean(str(exc))) from None

    def evaluate_cached(self, device: Mapping[str, Any]) -> bool:
        """:meth:`evaluate`, with the result (or the runtime error) shared by every device
        with the same :meth:`signature`: identical GPUs cost one evaluation."""
        key = (self.expression, self.signature(device))
        hit = _RESULTS.get(key)
        if hit is None:
            try:
                hit = self.evaluate(device)
            except CelRuntimeError as exc:
                hit = str(exc)
            if len(_RESULTS) > 1_000_000:
                _RESULTS.clear()
            _RESULTS[key] = hit
        if isinstance(hit, str):
            raise CelRuntimeError(hit)
        return hit

    def signature(self, device: Mapping[str, Any]) -> Any:
        """A hashable key such that two device views with equal keys get the same result from
        this expression: the driver plus the attributes and capacities whose names it mentions
        and the domains it mentions that are present (everything if it iterates over maps)."""
        if self.dynamic:
            return device["_signature"]
        names = self.names
        parts: list[Any] = [device["driver"]]
        if "allowMultipleAllocations" in names:
            parts.append(device.get("allowMultipleAllocations", False))
        for section in ("attributes", "capacity"):
            for domain, values in sorted(device[section].items()):
                picked = tuple(sorted((k, _hashable(v)) for k, v in values.items() if k in names))
                if picked or domain in names:
                    parts.append((section, domain, picked))
        return tuple(parts)

    def raw_signature(self, driver: str, raw: Mapping[str, Any]) -> Any:
        """Like :meth:`signature`, from a v1 Device as published (no view built): None when
        the expression iterates over maps. Attribute order is kept, so two identical devices
        listed in a different order only miss the cache."""
        if self.dynamic:
            return None
        names = self.names
        parts: list[Any] = [driver, bool(raw.get("allowMultipleAllocations"))]
        domains: set[str] = set()
        for section in ("attributes", "capacity"):
            values = raw.get(section)
            if not values:
                parts.append(None)
                continue
            picked = []
            for qualified, value in values.items():
                domain, sep, ident = qualified.partition("/")
                if not sep:
                    domain, ident = driver, qualified
                if domain in names:
                    domains.add(domain)
                if ident in names:
                    picked.append((qualified, _hashable(value)))
            parts.append(tuple(picked))
        parts.append(tuple(sorted(domains)))
        return tuple(parts)

    def evaluate_raw(self, driver: str, raw: Mapping[str, Any], view: Callable[[], Any]) -> bool:
        """:meth:`evaluate_cached` for a published device; ``view`` builds its CEL view, only
        when no device with the same :meth:`raw_signature` was evaluated before."""
        sig = self.raw_signature(driver, raw)
        if sig is None:
            return self.evaluate_cached(view())
        key = (self.expression, sig)
        hit = _RAW_RESULTS.get(key)
        if hit is None:
            try:
                hit = self.evaluate(view())
            except CelRuntimeError as exc:
                hit = str(exc)
            if len(_RAW_RESULTS) > 1_000_000:
                _RAW_RESULTS.clear()
            _RAW_RESULTS[key] = hit
        if isinstance(hit, str):
            raise CelRuntimeError(hit)
        return hit


def _type_name(value: Any) -> str:
    """A CEL type name for a Python value (tagged maps are semver and quantity)."""
    if isinstance(value, dict) and TYPE_KEY in value:
        return str(value[TYPE_KEY])
    return {
        bool: "bool",
        int: "int",
        float: "double",
        str: "string",
        bytes: "bytes",
        list: "list",
        dict: "map",
    }.get(type(value), type(value).__name__)


_WRAPPED = re.compile(
    r"^Function '[^']*' error: Python function call failed: [A-Za-z]*(?:Error|Exception): "
)


def _clean(message: str) -> str:
    """The library wraps our functions' errors and appends advice meant for Python callers;
    keep the CEL part."""
    message = _WRAPPED.sub("", message)
    message = message.split(". CEL does not coerce")[0]
    message = message.split(". Check function arguments")[0]
    return message


def _hashable(v: Any) -> Any:
    """``v`` as a cache key: maps and lists (a capacity's ``requestPolicy.validValues``) too."""
    if isinstance(v, dict):
        return tuple(sorted((str(k), _hashable(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("[]", *(_hashable(x) for x in v))
    return v


_ALL_FUNCTIONS: dict[str, Callable[..., Any]] = {}
_CACHE: dict[str, Selector | CelCompileError] = {}
_RESULTS: dict[tuple[str, Any], bool | str] = {}
_RAW_RESULTS: dict[tuple[str, Any], bool | str] = {}
_LOCK = threading.Lock()

#: resourceapi.CELSelectorExpressionMaxLength: the API server refuses longer selectors
MAX_EXPRESSION_LENGTH = 10 * 1024
#: resourceapi.CELSelectorExpressionMaxCost: the API server's budget for one selector
MAX_COST = 1_000_000
#: how many entries kgpu assumes a comprehension iterates (v1 allows 32 attributes and
#: capacities per device), for the cost estimate
_COMPREHENSION_SIZE = 32
_MACROS = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


def compile_selector(expression: str) -> Selector:
    """Compile once per distinct expression text; :class:`CelCompileError` if it does not
    compile: too long or too costly for the API server's limits (checked before the library
    sees the text, which crashes on some very long ones), an undeclared variable, bad syntax,
    or (for an expression that reads no device) a wrong type."""
    cached = _CACHE.get(expression)
    if cached is not None:
        if isinstance(cached, CelCompileError):
            raise cached
        return cached
    with _LOCK:
        try:
            selector = _compile(expression, require_bool=True)
        except CelCompileError as exc:
            if len(_CACHE) < 100_000:
                _CACHE[expression] = exc
            raise
        if len(_CACHE) < 100_000:
            _CACHE[expression] = selector
        return selector


def compile_expression(expression: str) -> Selector:
    """Compile any expression of Kubernetes' DRA CEL environment (not cached, result of any
    type): for tools and tests of the library functions."""
    with _LOCK:
        return _compile(expression, require_bool=False)


#: The variables the API server declares for a ValidatingAdmissionPolicy's expressions.
ADMISSION_VARIABLES = frozenset(
    {"object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer"}
)


def compile_admission(expression: str) -> Selector:
    """Compile an expression of a ValidatingAdmissionPolicy (variables ``object``,
    ``oldObject``, ``request``, ``variables``...; run it with :meth:`Selector.run`), so kgpu's
    chart policies are checked with the same library functions (quantity, cel.bind) as its
    selectors. The selector limits (length, estimated cost per device) do not apply: the API
    server bounds a policy by its runtime cost budget instead."""
    with _LOCK:
        return _compile(expression, require_bool=False, declared=ADMISSION_VARIABLES)


def _compile(
    expression: str, require_bool: bool, declared: frozenset[str] | None = None
) -> Selector:
    if not _ALL_FUNCTIONS:
        _ALL_FUNCTIONS.update(_stdlib_functions())
        _ALL_FUNCTIONS.update(FUNCTIONS)
    if declared is not None:
        return _compile_checked(expression, require_bool, declared)
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"expression is {len(expression)} characters long; Kubernetes allows at most "
            f"{MAX_EXPRESSION_LENGTH} (CELSelectorExpressionMaxLength)"
        )
    cost = estimated_cost(expression)
    if cost > MAX_COST:
        raise CelCompileError(
            f"estimated cost {cost} exceeds the budget of {MAX_COST} for one selector "
            "(CELSelectorExpressionMaxCost): nested comprehensions over device attributes "
            "multiply the work per device"
        )
    return _compile_checked(expression, require_bool, frozenset({"device"}))


def _compile_checked(expression: str, require_bool: bool, declared: frozenset[str]) -> Selector:
    rewritten = rewrite_bind(expression)
    try:
        program = cel.compile(rewritten)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the library panics (PanicException) on some inputs
        text = re.sub(r"^Failed to parse expression '.*?': ", "", _clean(str(exc)), flags=re.S)
        if "Syntax error" not in text:
            text = f"Syntax error: {text}"
        raise CelCompileError(text) from None
    _check_references(expression, rewritten, program, declared)
    if not (set(program.variables()) - {m.group(2) for m in _MACROS.finditer(rewritten)}):
        _check_constant(expression, program, require_bool)
    tokens = _TOKENS.findall(expression)
    names = frozenset(_unquote(t) if t[0] in "\"'" else t for t in tokens)
    domains = frozenset(_unquote(m) for m in _DOMAIN_INDEX.findall(expression))
    dynamic = (bool(names & _DYNAMIC) and not _only_literal_in(expression)) or (
        _computed_index(expression)
    )
    return Selector(expression, program, names, domains, dynamic)


def _check_constant(expression: str, program: Any, require_bool: bool) -> None:
    """An expression that reads no variable has one value: evaluate it now, so that what
    cel-go's type checker refuses at compile time (a function applied to the wrong types, a
    selector that is not a bool) is refused at compile time here too."""
    variables: dict[str, Any] = dict(_ALL_FUNCTIONS)
    try:
        result = program.execute(variables)
    except Exception as exc:  # runtime errors stay runtime errors, as in cel-go ...
        text = _clean(str(exc))
        if "no matching overload" in text:  # ... but a type error is found by the checker
            raise CelCompileError(f"ERROR: <input>:1:1: {text}") from None
        return
    if require_bool and not isinstance(result, bool):
        raise CelCompileError(
            f"must evaluate to bool or the unknown type, not {_type_name(result)}"
        )


def _check_references(
    expression: str, rewritten: str, program: Any, declared: frozenset[str]
) -> None:
    """cel-go refuses unknown variables at compile time ("undeclared reference"); the library
    would only fail when evaluating. ``declared`` are the variables Kubernetes declares
    (``device`` for a selector), the rest must be bound by a macro."""
    bound = {m.group(2) for m in _MACROS.finditer(rewritten)}
    known = {"cel"} | declared | bound
    for var in program.variables():
        if var in known:
            continue
        at = re.search(rf"(?<![\w.]){re.escape(var)}\b", expression)
        column = at.start() + 1 if at else 1
        raise CelCompileError(
            f"ERROR: <input>:1:{column}: undeclared reference to '{var}' (in container '')"
        )


def estimated_cost(expression: str) -> int:
    """A conservative stand-in for cel-go's static cost estimate: every token costs 1 times
    the sizes of the comprehensions it runs in (32 entries for a map or list read from the
    device, the literal's length for a list literal). Plain comparisons stay in the hundreds;
    four nested comprehensions over device maps exceed the budget, as in Kubernetes."""
    masked = _mask_strings(expression)
    cost = 0
    stack: list[int] = [1]  # multiplier per open bracket
    i = 0
    while i < len(masked):
        ch = masked[i]
        if ch in "([{":
            factor = 1
            m = re.search(r"\.\s*(all|exists|exists_one|map|filter)\s*$", masked[:i])
            if ch == "(" and m:
                factor = _receiver_size(masked[: m.start()])
            stack.append(stack[-1] * factor)
        elif ch in ")]}":
            if len(stack) > 1:
                stack.pop()
        elif not ch.isspace():
            cost += stack[-1]
            j = i
            while j + 1 < len(masked) and (masked[j + 1].isalnum() or masked[j + 1] == "_"):
                j += 1
            i = j
        i += 1
    return cost


def _receiver_size(before: str) -> int:
    """Entries a comprehension iterates: a list literal's length, else 32."""
    text = before.rstrip()
    if text.endswith("]"):
        depth = 0
        for k in range(len(text) - 1, -1, -1):
            if text[k] == "]":
                depth += 1
            elif text[k] == "[":
                depth -= 1
                if depth == 0:
                    prev = text[:k].rstrip()
                    if prev and (prev[-1].isalnum() or prev[-1] in "_)]"):
                        return _COMPREHENSION_SIZE  # an index, not a literal
                    inner = text[k + 1 : -1]
                    return max(1, inner.count(",") + 1) if inner.strip() else 1
    return _COMPREHENSION_SIZE


def _only_literal_in(expression: str) -> bool:
    """``'type' in device.attributes[...]`` reads one named key: still static. Any other use of
    the dynamic identifiers is not."""
    tokens = {t for t in _TOKENS.findall(expression) if t[0] not in "\"'"}
    if tokens & (_DYNAMIC - {"in"}):
        return False
    masked = _mask_strings(expression)
    for m in re.finditer(r"\bin\b", masked):
        if re.match(r"\s*\[", masked[m.end() :]):
            continue  # x in [list literal]: reads no map
        if re.search(r"(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')\s*$", expression[: m.start()]):
            continue  # 'key' in map: reads that one key
        return False
    return True


_INDEX = re.compile(r"[\w\)\]]\s*\[")
_LITERAL_INDEX = re.compile(r"\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')\s*\]")


def _computed_index(expression: str) -> bool:
    """An index that is not one string literal (``m['a' + b]``, ``m[k]``) can read any key."""
    masked = _mask_strings(expression)
    return any(
        not _LITERAL_INDEX.match(expression, m.end())
        and not re.search(r"\bin$", masked[: m.start() + 1])  # "x in [...]" is a list literal
        for m in _INDEX.finditer(masked)
    )


def _mask_strings(expression: str) -> str:
    """The expression with string contents blanked (same length), so brackets inside strings
    are not mistaken for indexes."""
    return re.sub(
        r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'",
        lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1],
        expression,
    )


# -- device views ------------------------------------------------------------------------------


def split_qualified(name: str, driver: str) -> tuple[str, str]:
    """``gpu.nvidia.com/productName`` -> (gpu.nvidia.com, productName); a bare name belongs
    to the driver's domain."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def attribute_value(attr: Mapping[str, Any]) -> Any:
    """The CEL value of a v1 DeviceAttribute (exactly one of int, bool, string, version)."""
    if "int" in attr:
        return int(attr["int"])
    if "bool" in attr:
        return bool(attr["bool"])
    if "string" in attr:
        return str(attr["string"])
    if "version" in attr:
        return semver_value(str(attr["version"]))
    raise ValueError("unsupported attribute value")


def device_view(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """The ``device`` variable for one v1 Device, as Kubernetes builds it."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, attr in (device.get("attributes") or {}).items():
        domain, ident = split_qualified(name, driver)
        attrs.setdefault(domain, {})[ident] = attribute_value(attr)
    caps: dict[str, dict[str, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = split_qualified(name, driver)
        caps.setdefault(domain, {})[ident] = quantity_value(str(cap.get("value", "0")))
    multi = bool(device.get("allowMultipleAllocations"))
    view: dict[str, Any] = {
        "driver": driver,
        "attributes": attrs,
        "capacity": caps,
        "allowMultipleAllocations": multi,
    }
    view["_signature"] = _hashable({"d": driver, "a": attrs, "c": caps, "m": multi})
    return view
