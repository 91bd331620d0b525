"""CEL selector semantics as Kubernetes evaluates them for DRA devices."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kgpu.dra import cel
from kgpu.dra.cel import (
    CelCompileError,
    CelRuntimeError,
    compile_selector,
    device_view,
    parse_quantity,
    rewrite_bind,
)

DEVICE = device_view(
    "gpu.nvidia.com",
    {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": 0},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "driverVersion": {"version": "570.124.6"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "migCapable": {"bool": True},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    },
)


def ev(expr: str) -> bool:
    return compile_selector(expr).evaluate(DEVICE)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("device.driver == 'gpu.nvidia.com'", True),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')", True),
        ("device.attributes['gpu.nvidia.com'].migCapable", True),
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'", True),
        # versions: typed, compared semantically
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.54.15'))",
            True,
        ),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('570.124.10'))",
            True,
        ),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('570.124.6')) == 0",
            True,
        ),
        ("device.attributes['gpu.nvidia.com'].driverVersion == semver('570.124.6')", True),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() >= 9", True),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        ("semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))", True),
        ("semver('v1.2', true) == semver('1.2.0')", True),
        ("isSemver('1.2') || isSemver('01.2.3')", False),
        # quantities: typed, compared by value
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0", True),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('81920Mi')", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40G'))", True),
        ("quantity('1.5Gi').isInteger() && quantity('500m').isLessThan(quantity('1'))", True),
        ("quantity('1Gi').add(1).asInteger() == 1073741825", True),
        ("quantity('2k').sub(quantity('500')).asInteger() == 1500", True),
        ("quantity('-3').sign() == -1 && isQuantity('10Ki') && !isQuantity('10 Ki')", True),
        # a domain with no attributes is an empty map; presence tests work on it
        ("'productName' in device.attributes['other.example.com']", False),
        ("has(device.attributes['gpu.nvidia.com'].uuid)", False),
        ("'index' in device.attributes['gpu.nvidia.com']", True),
        # no conversions between types
        ("device.attributes['gpu.nvidia.com'].index == '0'", False),
        ("device.attributes['gpu.nvidia.com'].index == 0", True),
        # cel.bind, as Kubernetes enables it
        (
            "cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu' && g.index == 0)",
            True,
        ),
        # errors on the right of || are absorbed by true, as in cel-go
        ("device.attributes['gpu.nvidia.com'].nope == 1 || true", True),
        ("device.driver == 'other' && device.attributes['gpu.nvidia.com'].nope == 1", False),
    ],
)
def test_kubernetes_cel_semantics(expr: str, want: bool) -> None:
    assert ev(expr) is want


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        # a missing attribute is an error for that device, never a silent false
        ("device.attributes['gpu.nvidia.com'].uuid == 'GPU-1'", "no such key: uuid"),
        ("device.attributes['other.example.com'].type == 'gpu'", "no such key: type"),
        # ordering across types has no overload
        ("device.attributes['gpu.nvidia.com'].index > 'a'", "No such overload"),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(quantity('1'))",
            "no such overload",
        ),
        ("semver('1.2') == semver('1.2.0')", "No Major.Minor.Patch elements found"),
        ("quantity('12 apples').sign() == 1", "quantities must match"),
        ("device.attributes['gpu.nvidia.com'].index", "could not be converted to bool"),
    ],
)
def test_runtime_errors(expr: str, message: str) -> None:
    with pytest.raises(CelRuntimeError) as err:
        ev(expr)
    assert message in str(err.value)


def test_missing_key_error_has_kubernetes_hint() -> None:
    with pytest.raises(CelRuntimeError, match="Consider using CEL optional chaining"):
        ev("device.attributes['gpu.nvidia.com'].uuid == 'x'")


def test_compile_error_and_cache() -> None:
    with pytest.raises(CelCompileError, match="Syntax error"):
        compile_selector("device.driver ==")
    a = compile_selector("device.driver == 'x'")
    assert compile_selector("device.driver == 'x'") is a  # compiled once


def test_signature_keeps_only_names_the_expression_reads() -> None:
    sel = compile_selector("device.attributes['gpu.nvidia.com'].productName == 'A'")
    one = device_view(
        "gpu.nvidia.com",
        {"attributes": {"productName": {"string": "A"}, "uuid": {"string": "GPU-1"}}},
    )
    two = device_view(
        "gpu.nvidia.com",
        {"attributes": {"productName": {"string": "A"}, "uuid": {"string": "GPU-2"}}},
    )
    other = device_view("gpu.nvidia.com", {"attributes": {"productName": {"string": "B"}}})
    assert sel.signature(one) == sel.signature(two)
    assert sel.signature(one) != sel.signature(other)
    # a selector that iterates over a map may read anything: whole-device signature
    dyn = compile_selector("device.attributes['gpu.nvidia.com'].exists(k, k == 'uuid')")
    assert dyn.dynamic
    assert dyn.signature(one) != dyn.signature(two)


def test_raw_signature_reads_published_devices_without_a_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cel, "_RAW_RESULTS", {})
    sel = compile_selector("device.attributes['gpu.nvidia.com'].productName == 'A'")
    one = {"attributes": {"productName": {"string": "A"}, "uuid": {"string": "GPU-1"}}}
    two = {"attributes": {"uuid": {"string": "GPU-2"}, "productName": {"string": "A"}}}
    qualified = {"attributes": {"gpu.nvidia.com/productName": {"string": "A"}}}
    other = {"attributes": {"productName": {"string": "B"}}}
    typed = {"attributes": {"productName": {"version": "1.0.0"}}}
    sig = sel.raw_signature
    assert sig("gpu.nvidia.com", one) == sig("gpu.nvidia.com", {**one, "name": "gpu-9"})
    assert sig("gpu.nvidia.com", one) != sig("gpu.nvidia.com", other)
    assert sig("gpu.nvidia.com", one) != sig("gpu.nvidia.com", typed)
    assert sig("gpu.nvidia.com", one) != sig("other.example.com", one)
    # the same content listed in another order or spelled qualified only misses the cache
    assert sel.raw_signature("gpu.nvidia.com", two) is not None
    assert sel.raw_signature("gpu.nvidia.com", qualified) is not None
    views: list[str] = []

    def view_of(driver: str, dev: dict) -> Callable[[], dict]:
        def build() -> dict:
            views.append(driver)
            return device_view(driver, dev)

        return build

    results = [
        sel.evaluate_raw("gpu.nvidia.com", d, view_of("gpu.nvidia.com", d))
        for d in (one, dict(one), other, qualified)
    ]
    assert results == [True, True, False, True]
    assert len(views) == 3  # the second device reused the first one's answer
    assert (
        compile_selector("device.attributes['gpu.nvidia.com'].exists(k, k == 'x')").raw_signature(
            "gpu.nvidia.com", one
        )
        is None
    )  # iterating selectors use the whole view


def test_bind_rewrite_respects_strings_and_nesting() -> None:
    src = "cel.bind(x, 'a,b', cel.bind(y, x + ')', y.size() > 3))"
    out = rewrite_bind(src)
    assert "cel.bind" not in out
    assert compile_selector(src).evaluate(DEVICE) is True


def test_quantity_parsing() -> None:
    assert parse_quantity("80Gi") == 80 * 2**30
    assert parse_quantity("1.5k") == 1500
    assert parse_quantity("100m") * 10 == 1
    assert parse_quantity("1e3") == 1000


@pytest.mark.parametrize(
    ("expr", "dynamic"),
    [
        ("device.attributes['gpu.nvidia.com'].productName in ['A', 'B']", False),
        ("'uuid' in device.attributes['gpu.nvidia.com']", False),
        # keys the expression computes: it may read any attribute
        ("device.attributes['gpu.nvidia.com']['product' + 'Name'] == 'A'", True),
        ("device.attributes[device.driver].productName == 'A'", True),
        ("device.attributes['gpu.nvidia.com'].exists(k, k == 'uuid')", True),
    ],
)
def test_which_selectors_can_share_results(expr: str, dynamic: bool) -> None:
    sel = compile_selector(expr)
    assert sel.dynamic is dynamic
    a = device_view("gpu.nvidia.com", {"attributes": {"productName": {"string": "A"}}})
    b = device_view("gpu.nvidia.com", {"attributes": {"productName": {"string": "B"}}})
    if dynamic:  # never share a result between devices that differ anywhere
        assert sel.signature(a) != sel.signature(b)
