"""The DRA device-selector CEL dialect: quantities, versions, devices, selectors."""

from __future__ import annotations

import copy
import math
import pickle
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modelplane.cel import (
    CelCompileError,
    Device,
    DeviceSelector,
    Quantity,
    Semver,
    compile_selector,
    is_quantity,
    is_semver,
    parse_quantity,
    parse_semver,
)
from modelplane.cel.quantity import MAX_QUANTITY

KI, MI, GI = 2**10, 2**20, 2**30

# --- quantity parsing -------------------------------------------------------------------------

VALID_QUANTITIES: list[tuple[str, Fraction | int]] = [
    ("0", 0),
    ("-0", 0),
    ("1", 1),
    ("+1", 1),
    ("-1", -1),
    ("0001", 1),
    ("1.", 1),
    (".5", Fraction(1, 2)),
    ("1.5", Fraction(3, 2)),
    ("1n", Fraction(1, 10**9)),
    ("1u", Fraction(1, 10**6)),
    ("1m", Fraction(1, 1000)),
    ("1k", 1000),
    ("1M", 10**6),
    ("1G", 10**9),
    ("1T", 10**12),
    ("1P", 10**15),
    ("1E", 10**18),
    ("1Ki", KI),
    ("1Mi", MI),
    ("1Gi", GI),
    ("1Ti", 2**40),
    ("1Pi", 2**50),
    ("1Ei", 2**60),
    ("1.5Gi", 3 * 2**29),
    ("0.1Ki", Fraction(1024, 10)),
    ("141Gi", 141 * GI),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("1e-3", Fraction(1, 1000)),
    ("1.5e3", 1500),
    ("-2.5e-1", Fraction(-1, 4)),
    # Kubernetes rounds the magnitude up to a whole nano ...
    ("0.1n", Fraction(1, 10**9)),
    ("1.5n", Fraction(2, 10**9)),
    ("-1.5n", Fraction(-2, 10**9)),
    ("1e-20", Fraction(1, 10**9)),
    # ... and caps it at 2^63-1.
    ("8Ei", MAX_QUANTITY),
    ("10E", MAX_QUANTITY),
    ("1e100", MAX_QUANTITY),
    ("-1e100", -MAX_QUANTITY),
    ("1e2147483647", MAX_QUANTITY),
]

MALFORMED_QUANTITIES = [
    "",
    " ",
    " 1",
    "1 ",
    "abc",
    "-",
    "+",
    ".",
    "+.",
    "--1",
    "+-1",
    "1.2.3",
    "1..2",
    "Gi",
    "e3",
    "1K",
    "1ki",
    "1gi",
    "1Kb",
    "1GB",
    "1e",
    "1E+",
    "1e3.5",
    "1e3Gi",
    "1Gi1",
    "0x10",
    "1_000",
    "１",
    "1,5",
    "1e2147483648",
    "1\n",
]


@pytest.mark.parametrize(("text", "value"), VALID_QUANTITIES)
def test_parse_quantity_value(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text).value == value
    assert is_quantity(text)


@pytest.mark.parametrize("text", MALFORMED_QUANTITIES)
def test_parse_quantity_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    assert not is_quantity(text)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1Gi", "1073741824"),
        ("1000m", "1"),
        ("1Ki", "1024"),
        ("1k", "1000"),
        ("1e3", "1k"),
        ("1024Mi", "1Gi"),
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("0", "0Gi"),
        ("1e-3", "1m"),
    ],
)
def test_quantity_canonical_equality(a: str, b: str) -> None:
    qa, qb = parse_quantity(a), parse_quantity(b)
    assert qa == qb and hash(qa) == hash(qb) and qa.compare(qb) == 0


def test_quantity_binary_and_decimal_differ() -> None:
    assert parse_quantity("1Ki") != parse_quantity("1k")
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1Mi").compare(parse_quantity("1M")) == 1


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("1000m", "1"),
        ("0.5", "500m"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("1.5k", "1500"),
        ("1e3", "1e3"),
        ("0", "0"),
        ("-1Gi", "-1Gi"),
        ("0.5Ki", "512"),
        ("1500Ki", "1500Ki"),
        ("1.5n", "2n"),
        ("8Ei", "9223372036854775807"),
    ],
)
def test_quantity_str(text: str, canonical: str) -> None:
    assert str(parse_quantity(text)) == canonical
    assert parse_quantity(str(parse_quantity(text))) == parse_quantity(text)


def test_quantity_methods() -> None:
    q = parse_quantity("1.5Gi")
    assert q.sign() == 1 and parse_quantity("-1m").sign() == -1 and parse_quantity("0").sign() == 0
    assert q.is_integer() and not parse_quantity("1.5").is_integer()
    assert q.as_integer() == 3 * 2**29
    with pytest.raises(ValueError):
        parse_quantity("500m").as_integer()
    assert parse_quantity("500m").as_approximate_float() == 0.5
    assert q.add(parse_quantity("512Mi")) == parse_quantity("2Gi")
    assert q.add(1).sub(1) == q and q.sub(q) == parse_quantity("0")
    with pytest.raises(TypeError):
        q.add(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quantity(1.5)  # type: ignore[arg-type]
    assert sorted([parse_quantity("1Gi"), parse_quantity("1"), parse_quantity("1m")]) == [
        parse_quantity("1m"),
        parse_quantity("1"),
        parse_quantity("1Gi"),
    ]


def test_quantity_and_semver_compare_only_with_their_own_kind() -> None:
    q, v = parse_quantity("1"), parse_semver("1.0.0")
    assert q != v and v != q and q == parse_quantity("1000m") and v == parse_semver("1.0.0+b")
    assert len({q, parse_quantity("1000m"), v, parse_semver("1.0.0+b")}) == 2
    for a, b in ((q, v), (v, q)):
        with pytest.raises(TypeError, match=f"cannot compare {type(a).__name__} with"):
            a.compare(b)
        with pytest.raises(TypeError):
            _ = a < b  # type: ignore[operator]


_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_SUFFIXES = {**_DECIMAL, **_BINARY, "e3": 10**3, "e-2": Fraction(1, 100), "E6": 10**6}
_quantities = st.tuples(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=0, max_value=3),  # digits after the decimal point
    st.sampled_from(sorted(_SUFFIXES)),
)


def _render(mantissa: int, decimals: int, suffix: str) -> tuple[str, Fraction]:
    sign = "-" if mantissa < 0 else ""
    digits = str(abs(mantissa)).rjust(decimals + 1, "0")
    text = digits[: len(digits) - decimals] + ("." + digits[-decimals:] if decimals else "")
    value = Fraction(mantissa, 10**decimals) * _SUFFIXES[suffix]
    return sign + text + suffix, value


def _kubernetes_value(value: Fraction) -> Fraction:
    """Magnitude rounded up to a whole nano, capped at 2^63-1."""
    magnitude = min(Fraction(math.ceil(abs(value) * 10**9), 10**9), Fraction(MAX_QUANTITY))
    return magnitude if value >= 0 else -magnitude


@given(_quantities, _quantities)
def test_quantity_order_agrees_with_value(a: tuple[int, int, str], b: tuple[int, int, str]) -> None:
    text_a, value_a = _render(*a)
    text_b, value_b = _render(*b)
    qa, qb = parse_quantity(text_a), parse_quantity(text_b)
    assert qa.value == _kubernetes_value(value_a) and qb.value == _kubernetes_value(value_b)
    # Ordering is monotone in the written value and exact on the parsed one.
    if value_a < value_b:
        assert qa <= qb and qa.compare(qb) <= 0
    expected = (qa.value > qb.value) - (qa.value < qb.value)
    assert qa.compare(qb) == expected == -qb.compare(qa)
    assert (
        (qa < qb) == (expected < 0) and (qa > qb) == (expected > 0) and (qa == qb) == (not expected)
    )
    if qa == qb:
        assert hash(qa) == hash(qb)
    assert parse_quantity(str(qa)) == qa


# --- semver ----------------------------------------------------------------------------------

PRECEDENCE = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.2.0",
    "1.10.0",
    "2.0.0",
]


def test_semver_precedence() -> None:
    versions = [parse_semver(v) for v in PRECEDENCE]
    assert versions == sorted(reversed(versions))
    for lower, higher in zip(versions, versions[1:], strict=False):
        assert lower < higher and lower.compare(higher) == -1 and higher.compare(lower) == 1


def test_semver_fields_and_build_metadata() -> None:
    v = parse_semver("1.2.3-rc.1+build.5")
    assert (v.major, v.minor, v.patch, v.prerelease, v.build) == (
        1,
        2,
        3,
        ("rc", 1),
        ("build", "5"),
    )
    assert str(v) == "1.2.3-rc.1+build.5"
    assert parse_semver("1.0.0+a") == parse_semver("1.0.0+b") == parse_semver("1.0.0")
    assert hash(parse_semver("1.0.0+a")) == hash(parse_semver("1.0.0"))


@pytest.mark.parametrize(
    "text",
    [
        "1.2",
        "1",
        "v1.2.3",
        "01.2.3",
        "1.02.3",
        "1.2.03",
        "1.2.3-01",
        "1.2.3-",
        "1.2.3+",
        "1.2.3.4",
        " 1.2.3",
        "1.2.3 ",
        "1.2.3\n",
        "１.2.3",
        "1.2.3-a..b",
        "18446744073709551616.0.0",
        "",
        "a.b.c",
    ],
)
def test_semver_strict_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_semver(text)
    assert not is_semver(text)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("v1.2.3", "1.2.3"),
        ("1.2", "1.2.0"),
        ("1", "1.0.0"),
        ("v1", "1.0.0"),
        ("01.02.03", "1.2.3"),
        ("1.2.3-rc.1", "1.2.3-rc.1"),
        ("1.2.0-rc", "1.2.0-rc"),
        ("1.2.03-rc", "1.2.3-rc"),
        ("00.0.0", "0.0.0"),
    ],
)
def test_semver_normalize(text: str, normalized: str) -> None:
    assert str(parse_semver(text, normalize=True)) == normalized
    assert is_semver(text, True)


@pytest.mark.parametrize("text", ["1.2-rc", "1+build", "v", "", "1.2.3.4", "x1.2.3", "V1.2.3"])
def test_semver_normalize_rejects(text: str) -> None:
    assert not is_semver(text, True)


# --- devices ---------------------------------------------------------------------------------

H200 = Device.from_class_device(
    "gpu.nvidia.com",
    attributes={
        "architecture": ("string", "Hopper"),
        "cudaComputeCapability": {"version": "9.0.0"},
        "productName": {"string": "NVIDIA H200"},
        "driverVersion": ("version", "560.35.3"),
        "mig": ("bool", False),
        "index": ("int", 3),
        "resource.kubernetes.io/pcieRoot": ("string", "pci0000:00"),
    },
    capacity={"memory": {"value": "141Gi"}, "example.com/slots": "8"},
)
EXAMPLE = Device.from_class_device(
    "dra.example.com",
    attributes={"model": ("string", "A100"), "ext.example.com/family": ("string", "ampere")},
    capacity={"modules": "4", "memory": "40Gi"},
)
NIC = Device.from_class_device("dra.net", attributes={"linkType": {"string": "efa"}})


def test_from_class_device_naming() -> None:
    assert H200.attributes["gpu.nvidia.com"]["architecture"] == "Hopper"
    assert H200.attributes["gpu.nvidia.com"]["cudaComputeCapability"] == parse_semver("9.0.0")
    assert H200.attributes["resource.kubernetes.io"]["pcieRoot"] == "pci0000:00"
    assert H200.capacity["gpu.nvidia.com"]["memory"] == parse_quantity("141Gi")
    assert H200.capacity["example.com"]["slots"] == parse_quantity("8")
    assert EXAMPLE.attributes["ext.example.com"] == {"family": "ampere"}
    assert H200.attributes["gpu.nvidia.com"]["index"] == 3
    assert H200.attributes["gpu.nvidia.com"]["mig"] is False


@pytest.mark.parametrize(
    ("attributes", "capacity"),
    [
        ({"v": ("version", "9.0")}, {}),  # strictly parsed
        ({"v": ("version", "v9.0.0")}, {}),
        ({"s": ("string", 1)}, {}),
        ({"b": ("bool", "true")}, {}),
        ({"i": ("int", True)}, {}),
        ({"i": ("int", 2**63)}, {}),
        ({"x": ("float", 1.0)}, {}),
        ({"x": {"string": "a", "int": 1}}, {}),
        ({"/x": ("string", "a")}, {}),
        ({"d.com/": ("string", "a")}, {}),
        ({"a": ("string", "x"), "gpu.nvidia.com/a": ("string", "y")}, {}),
        ({}, {"memory": "80GB"}),
        ({}, {"memory": {"val": "1"}}),
        ({}, {"memory": 1.5}),
    ],
)
def test_from_class_device_rejects(
    attributes: dict[str, object], capacity: dict[str, object]
) -> None:
    with pytest.raises((ValueError, TypeError)):
        Device.from_class_device("gpu.nvidia.com", attributes, capacity)


def test_device_and_errors_pickle() -> None:
    assert pickle.loads(pickle.dumps(H200)) == H200
    assert copy.deepcopy(EXAMPLE) == EXAMPLE
    assert pickle.loads(pickle.dumps(parse_quantity("1.5Gi"))) == parse_quantity("1536Mi")
    assert str(pickle.loads(pickle.dumps(parse_semver("1.2.3-rc.1+b")))) == "1.2.3-rc.1+b"
    error = pickle.loads(pickle.dumps(CelCompileError("x(", "syntax error", 1, 3)))
    assert (error.expression, error.reason, error.column, str(error)) == (
        "x(",
        "syntax error",
        3,
        "syntax error (column 3)",
    )


def test_device_is_hashable_by_content() -> None:
    again = Device.from_class_device(
        "dra.example.com",
        attributes={"ext.example.com/family": ("string", "ampere"), "model": ("string", "A100")},
        capacity={"memory": "40960Mi", "modules": "4"},
    )
    assert again == EXAMPLE and hash(again) == hash(EXAMPLE)
    assert Device("d", {"d": {"x": True}}) != Device("d", {"d": {"x": 1}})
    assert len({H200, EXAMPLE, again, NIC}) == 3
    with pytest.raises(TypeError):
        Device("d", {"d": {"x": 1.5}})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        Device("d", capacity={"d": {"x": "1Gi"}})  # type: ignore[dict-item]


# --- selectors -------------------------------------------------------------------------------

SELECTORS: list[tuple[str, Device, bool]] = [
    # Kubernetes DRA documentation style examples.
    ('device.driver == "dra.example.com"', EXAMPLE, True),
    ('device.driver == "gpu.nvidia.com"', EXAMPLE, False),
    ('device.attributes["dra.example.com"].model == "A100"', EXAMPLE, True),
    ('device.attributes["ext.example.com"].family == "ampere"', EXAMPLE, True),
    ('device.capacity["dra.example.com"].modules.compareTo(quantity("4")) == 0', EXAMPLE, True),
    ('device.capacity["dra.example.com"].memory.compareTo(quantity("40Gi")) >= 0', EXAMPLE, True),
    ('device.capacity["dra.example.com"].memory.compareTo(quantity("41Gi")) >= 0', EXAMPLE, False),
    (
        'device.driver == "dra.example.com" && '
        'device.attributes["dra.example.com"].model == "A100"',
        EXAMPLE,
        True,
    ),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.model == "A100")', EXAMPLE, True),
    # The design's examples.
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("140Gi")) >= 0', H200, True),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("142Gi")) >= 0', H200, False),
    (
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0',
        H200,
        True,
    ),
    (
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("10.0.0")) >= 0',
        H200,
        False,
    ),
    (
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isLessThan(semver("10.0.0"))',
        H200,
        True,
    ),
    ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == semver("9.0.0")', H200, True),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"', H200, True),
    ('device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell"]', H200, True),
    ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H")', H200, True),
    ('device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA H[0-9]+$")', H200, True),
    ('device.attributes["gpu.nvidia.com"].mig == false', H200, True),
    ('!device.attributes["gpu.nvidia.com"].mig', H200, True),
    ('device.attributes["gpu.nvidia.com"].index > 2', H200, True),
    ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', H200, True),
    ('device.capacity["example.com"].slots.asInteger() == 8', H200, True),
    ('device.attributes["dra.net"].linkType == "efa"', NIC, True),
    ('device.attributes["dra.net"].linkType == "efa"', H200, False),
    # Presence checks.
    ('"gpu.nvidia.com" in device.attributes', H200, True),
    ('"x.com" in device.attributes', H200, False),
    ('"x.com" in device.capacity', H200, False),
    ('!("x.com" in device.attributes)', H200, True),
    ('size(device.attributes["x.com"]) == 0', H200, True),
    ('device.attributes["x.com"].size() == 0', H200, True),
    ('has(device.attributes["gpu.nvidia.com"].architecture)', H200, True),
    ('has(device.attributes["gpu.nvidia.com"].nope)', H200, False),
    ('has(device.attributes["x.com"].nope)', H200, False),
    ('!has(device.attributes["x.com"].nope)', H200, True),
    ('device.attributes["gpu.nvidia.com"].exists(k, k == "mig")', H200, True),
    ('device.attributes["gpu.nvidia.com"].all(k, k.size() > 2)', H200, True),
    ('["a"].all(device, device.size() == 1)', H200, True),
    ('.device.driver == "gpu.nvidia.com"', H200, True),
    # Unknown domain, unknown id, type errors, malformed values: all non-matches.
    ('device.attributes["x.com"].foo == "bar"', H200, False),
    ('device.attributes["x.com"].foo != "bar"', H200, False),
    ('device.attributes["gpu.nvidia.com"].nope == "bar"', H200, False),
    ('device.attributes["gpu.nvidia.com"].nope != "bar"', H200, False),
    ('device.capacity["x.com"].memory.compareTo(quantity("1")) >= 0', H200, False),
    ('device.attributes["gpu.nvidia.com"].productName == 1', H200, False),
    ('device.attributes["gpu.nvidia.com"].productName > 1', H200, False),
    ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == "9.0.0"', H200, False),
    ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == quantity("9")', H200, False),
    ('device.capacity["gpu.nvidia.com"].memory == 151397597184', H200, False),
    (
        'device.capacity["gpu.nvidia.com"].memory > device.capacity["example.com"].slots',
        H200,
        False,
    ),
    (
        'device.attributes["gpu.nvidia.com"].architecture.compareTo(semver("1.0.0")) == 0',
        H200,
        False,
    ),
    ('quantity("abc").sign() == 0', H200, False),
    ('quantity("40GB").sign() == 1', H200, False),
    ('semver("1.2") == semver("1.2.0")', H200, False),
    ('semver("1.2", true) == semver("1.2.0")', H200, True),
    ("1 / 0 == 1", H200, False),
    # Errors are absorbed by || and && the CEL way.
    ('device.attributes["x.com"].foo == "bar" || device.driver == "gpu.nvidia.com"', H200, True),
    ('device.attributes["x.com"].foo == "bar" && false', H200, False),
    # Non-bool results never match.
    ("device.driver", H200, False),
    ('device.attributes["gpu.nvidia.com"].index', H200, False),
    ('device.attributes["gpu.nvidia.com"]', H200, False),
    ('quantity("1")', H200, False),
    ("1", H200, False),
    ("null", H200, False),
    ("true", H200, True),
    ("false", H200, False),
]


@pytest.mark.parametrize(("expression", "device", "expected"), SELECTORS)
def test_selector(expression: str, device: Device, expected: bool) -> None:
    assert compile_selector(expression).matches(device) is expected


QUANTITY_FUNCTIONS = [
    'quantity("1Gi").compareTo(quantity("1073741824")) == 0',
    'quantity("1Gi").compareTo(quantity("1G")) == 1',
    'quantity("1G").compareTo(quantity("1Gi")) == -1',
    'quantity("1000m") == quantity("1")',
    'quantity("1") != quantity("2")',
    'quantity("1Gi").isGreaterThan(quantity("1G"))',
    '!quantity("1G").isGreaterThan(quantity("1G"))',
    'quantity("1G").isLessThan(quantity("1Gi"))',
    'quantity("-1").sign() == -1 && quantity("0").sign() == 0 && quantity("1m").sign() == 1',
    'quantity("1k").isInteger() && !quantity("1.5").isInteger() && !quantity("1m").isInteger()',
    'quantity("1k").asInteger() == 1000',
    'quantity("1.5").asApproximateFloat() == 1.5',
    'quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")',
    'quantity("1Gi").add(1) == quantity("1073741825")',
    'quantity("1Gi").sub(quantity("512Mi")) == quantity("512Mi")',
    'quantity("1").sub(2).sign() == -1',
    'isQuantity("1Gi") && isQuantity("500m") && !isQuantity("abc") && !isQuantity("1GB")',
    'quantity("1Gi") in [quantity("1024Mi")]',
]
SEMVER_FUNCTIONS = [
    'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
    'semver("1.2.3").isLessThan(semver("1.10.0"))',
    'semver("1.2.3").compareTo(semver("1.2.3")) <= 0',
    'semver("2.0.0").isGreaterThan(semver("1.99.99"))',
    'semver("1.2.3").compareTo(semver("1.2.3-rc.1")) >= 0',
    'semver("1.2.3") != semver("1.2.4")',
    'semver("1.0.0+build.1") == semver("1.0.0")',
    'semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
    'semver("1.2.3").compareTo(semver("1.2.4")) == -1',
    'semver("1.2.3").compareTo(semver("1.2.3")) == 0',
    'semver("2.0.0").isGreaterThan(semver("1.0.0"))',
    'semver("1.0.0").isLessThan(semver("2.0.0"))',
    'isSemver("1.2.3") && !isSemver("1.2") && !isSemver("v1.2.3")',
    'isSemver("1.2", true) && isSemver("v1.2.3", true) && !isSemver("1.2-rc", true)',
    'isSemver("1.2.3", false)',
    'semver("v1.2.3", true).major() == 1',
    'semver("01.02.03", true) == semver("1.2.3")',
    'semver("1", true) == semver("1.0.0")',
]


@pytest.mark.parametrize("expression", QUANTITY_FUNCTIONS + SEMVER_FUNCTIONS)
def test_library_functions(expression: str) -> None:
    assert compile_selector(expression).matches(NIC) is True


RUNTIME_ERRORS = [
    # Kubernetes has no ordering overloads on Semver (nor on Quantity): compareTo instead.
    'semver("1.2.3") < semver("1.10.0")',
    'semver("2.0.0") >= semver("1.0.0")',
    'quantity("1.5").asInteger() == 1',
    'quantity("8Ei").add(quantity("8Ei")).asInteger() > 0',
    "quantity(1).sign() == 1",
    'quantity("1").add(true) == quantity("2")',
    'quantity("1").add(1.5) == quantity("2")',
    'quantity("1").add("1") == quantity("2")',
    'quantity("1").compareTo(1) == 0',
    'quantity("1").compareTo(semver("1.0.0")) == 0',
    'semver("1.2").major() == 1',
    'semver("1.2", "yes").major() == 1',
    "semver(1).major() == 1",
    'semver("1.0.0").sign() == 1',
    'quantity("1").major() == 1',
    "isSemver(1)",
    "isQuantity(1)",
    'semver("1.2.3") == "1.2.3"',
    'semver("1.2.3") == quantity("1")',
    'quantity("1") == 1',
]


@pytest.mark.parametrize("expression", RUNTIME_ERRORS)
def test_runtime_errors_are_non_matches(expression: str) -> None:
    selector = compile_selector(expression)
    assert selector.matches(NIC) is False
    assert compile_selector(f"!({expression})").matches(NIC) is False


COMPILE_ERRORS = [
    ("", "empty"),
    ("   ", "empty"),
    ("device.driver ==", "syntax error"),
    ('device.driver == "x" @', "syntax error"),
    ('"unterminated', "syntax error"),
    ("a +* b", "syntax error"),
    ("foo(1)", "unknown function 'foo'"),
    ('quantity("1").frobnicate()', "unknown function 'frobnicate'"),
    ('device.attributes["a"].x.lowerAscii() == "a"', "unknown function 'lowerAscii'"),
    ('compareTo(quantity("1"), quantity("2")) == 0', "unknown function 'compareTo'"),
    ("[1, 2].reduce(r, i, 0, r + i) == 3", "unknown function 'reduce'"),
    ("cel.foo(1)", "unknown function 'cel.foo'"),
    ('other.driver == "x"', "undeclared reference to 'other'"),
    ('.other == "x"', "undeclared reference to '.other'"),
    ("x", "undeclared reference to 'x'"),
    ('device.model == "A100"', "device has no field 'model'"),
    ("device.allowMultipleAllocations", "device has no field 'allowMultipleAllocations'"),
    ("[1].all(x, y > 0)", "undeclared reference to 'y'"),
    ("quantity()", "quantity() takes 1 argument(s), got 0"),
    ('quantity("1", "2")', "quantity() takes 1 argument(s), got 2"),
    ('semver("1", true, 1)', "semver() takes 1 or 2 argument(s), got 3"),
    ('quantity("1").sign(1) == 1', "sign() takes 0 argument(s), got 1"),
    ('semver("1.0.0").compareTo() == 0', "compareTo() takes 1 argument(s), got 0"),
    ("[1].all(1, true)", "all() takes a variable name and an expression"),
    ("[1].exists(x)", "exists() takes a variable name and an expression"),
    ("cel.bind(1, 2, true)", "cel.bind() takes a variable name"),
    ("has(device)", "has() needs a field selection"),
    ('quantity("1") < quantity("2")', "quantities cannot be ordered"),
    ('device.capacity["a"].m >= quantity("2")', "quantities cannot be ordered"),
    ('quantity("1").add(1) > device.capacity["a"].m', "quantities cannot be ordered"),
    ("Foo{a: 1}", "message construction"),
    ("device.driver == 'x' && " * 500 + "true", "longer than"),
]


@pytest.mark.parametrize(("expression", "reason"), COMPILE_ERRORS)
def test_compile_errors(expression: str, reason: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.expression == expression


def test_compile_error_positions() -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector('quantity("1").frobnicate()')
    assert (info.value.line, info.value.column) == (1, 15)
    assert str(info.value) == "unknown function 'frobnicate' (column 15)"
    with pytest.raises(CelCompileError) as info:
        compile_selector('device.driver == "a" &&\n  bad(1)')
    assert (info.value.line, info.value.column) == (2, 3)
    assert "line 2, column 3" in str(info.value)
    with pytest.raises(CelCompileError) as info:
        compile_selector("device.driver ==")
    assert "unexpected end of expression" in str(info.value)
    assert (info.value.line, info.value.column) == (1, 17)


def test_compile_is_cached_and_matches_never_raise() -> None:
    selector = compile_selector('device.driver == "dra.net"')
    assert isinstance(selector, DeviceSelector)
    assert compile_selector('device.driver == "dra.net"') is selector
    assert selector.matches(NIC) and not selector.matches(H200)
    assert selector.matches(NIC)  # memoised
    deep = compile_selector("(" * 60 + "true" + ")" * 60)
    assert deep.matches(NIC)


def test_semver_and_quantity_values_in_cel_are_the_python_types() -> None:
    device = Device(
        "d",
        attributes={"d": {"v": Semver(1, 2, 3), "s": "x", "b": True, "i": 7}},
        capacity={"d": {"q": Quantity(5)}},
    )
    assert compile_selector(
        'device.attributes["d"].v == semver("1.2.3") && device.attributes["d"].s == "x" && '
        'device.attributes["d"].b && device.attributes["d"].i == 7 && '
        'device.capacity["d"].q == quantity("5")'
    ).matches(device)
