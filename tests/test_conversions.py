"""dtype conversions in the core's C kernels, bit for bit against NumPy and
ml_dtypes: every pair of dtypes, every code of every type of 16 bits or
fewer, sampled values (ties, subnormals, overflow, specials) of the wider
ones, from arrays, strided views, packed sub-byte data and Python lists.

Where the oracles leave a result undefined or we decided otherwise
(docs/semantics.md, "Conversions"), the test checks our rule instead:
float to integer out of range saturates and NaN gives 0; NaN into a type
without NaN (float6, float4) is a ValueError."""

from __future__ import annotations

import math

import pytest

import dlpack_ref as dr
from dlpack_ref import _format

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")
from support import e8m0  # noqa: E402

core = dr._dlpack_ref
# bcomplex32 has its own tests below: its oracle is its two bfloat16 halves.
NAMES = [n for n in dr.DTYPES if n not in ("float4_e2m1fn_x2", "bcomplex32")]
NO_NAN = {"float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}
UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def np_dtype(name):
    if name in _format.MINIFLOATS or name == "bfloat16":
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def code_count(name):
    if name == "bool":
        return 2
    if name in _format.MINIFLOATS:
        return 1 << dr.DTYPES[name].bits if name != "float8_e8m0fnu" else 256
    return 1 << (8 * np_dtype(name).itemsize)


def sources(name):
    """Every code of a type of 16 bits or fewer; sampled values otherwise."""
    dt = np_dtype(name)
    if name in ("bool", "int8", "uint8", "int16", "uint16", "float16", "bfloat16") or name in _format.MINIFLOATS:
        codes = np.arange(code_count(name), dtype=UINT_OF_SIZE[dt.itemsize])
        return codes.view(dt) if name != "bool" else codes.astype(np.uint8).view(np.bool_)
    rng = np.random.default_rng(7)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        edge = np.array([info.min, info.max, 0, 1], dt)
        return np.concatenate([rng.integers(info.min, info.max, 500, dtype=dt, endpoint=True), edge])
    # Ties of float16 and bfloat16 and of float8, float16 subnormals, overflow.
    f16_ties = (np.arange(0x3C00, 0x3C40, dtype=np.uint32) << 13 | 0x1000).view(np.float32)
    bf16_ties = (np.arange(0x3F80, 0x3FC0, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    values = np.concatenate([
        rng.standard_normal(600) * 10.0 ** rng.integers(-10, 10, 600),
        f16_ties, bf16_ties, np.arange(-40, 40) / 16.0, np.arange(1, 40) * 2.0 ** -26,
        [0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, 1e5, 65504, 65519.99, 65520, 448, 464, 480,
         57344, 61440, 1e-8, 2.0 ** -24, 3 * 2.0 ** -26, 1e300, -1e300, 2.0 ** 127 * 1.5],
    ])
    if dt.kind == "c":
        return (values + 1j * values[::-1]).astype(dt)
    return values.astype(dt)


def oracle(src, dst_name):
    """NumPy's / ml_dtypes' result; through float32 for the minifloat pairs
    ml_dtypes has no direct cast for (exact: float32 holds every minifloat)."""
    with np.errstate(all="ignore"):
        try:
            return src.astype(np_dtype(dst_name))
        except (TypeError, ValueError):
            return src.astype(np.float32).astype(np_dtype(dst_name))


def ours(src, src_name, dst_name):
    flat = np.ascontiguousarray(src).reshape(-1)
    a = core._from_bytes(flat.view(np.uint8).tobytes(), src_name, flat.size)
    out = dr.asarray(a, dtype=dst_name)
    return np.frombuffer(out._host_bytes(), dtype=np_dtype(dst_name))


def bits(x):
    x = np.ascontiguousarray(x)
    if x.dtype.kind == "c":
        x = x.view(np.float32 if x.dtype.itemsize == 8 else np.float64)
    if x.dtype == np.bool_:
        return x.view(np.uint8)
    return x.view(UINT_OF_SIZE[x.dtype.itemsize])


def integer_rule(src, dst_name):
    """Where the oracle is undefined (float to int out of range, NaN): our
    rule, truncation with saturation and NaN -> 0; elsewhere the oracle."""
    info = np.iinfo(np.dtype(dst_name))
    with np.errstate(all="ignore"):
        real = np.real(src.astype(np.complex128) if src.dtype.kind == "c" else src.astype(np.float64))
        in_range = np.isfinite(real) & (np.trunc(real) >= info.min) & (np.trunc(real) < float(info.max) + 1)
    expected = oracle(src, dst_name)
    clipped = np.where(np.isnan(real), 0, np.clip(np.nan_to_num(real, posinf=info.max, neginf=info.min),
                                                  info.min, info.max))
    out_of_range = [int(v) if abs(v) < 2.0 ** 63 or v < 0 else info.max for v in clipped[~in_range].tolist()]
    result = expected.copy()
    result[~in_range] = np.array([min(max(v, info.min), info.max) for v in out_of_range], dtype=result.dtype)
    return result


def float_to_int(src_name, dst_name):
    return np_dtype(src_name).kind not in "iub" and np.dtype(dst_name).kind in "iu" if dst_name in (
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64") else False


@pytest.fixture(params=["wide", "baseline"])
def dense_loops(request):
    """Dense conversions between native types on the CPU's widest vector
    loops (AVX2 / AVX-512 where it has them), then on the baseline loops."""
    before = core._set_wide_dense(request.param == "wide")
    yield request.param
    core._set_wide_dense(before)


@pytest.mark.parametrize("src_name", NAMES)
@pytest.mark.parametrize("dst_name", NAMES)
def test_every_pair_bit_for_bit(src_name, dst_name, dense_loops):
    src = sources(src_name)
    if dst_name in NO_NAN and np_dtype(src_name).kind not in "iub":
        with np.errstate(invalid="ignore"):
            src = src[~np.isnan(src.astype(np.complex128).real if src.dtype.kind == "c" else src.astype(np.float64))]
    expected = integer_rule(src, dst_name) if float_to_int(src_name, dst_name) else oracle(src, dst_name)
    if dst_name == "float8_e8m0fnu" and not e8m0.ml_dtypes_rounds_by_value(ml_dtypes):
        expected = np.array(e8m0.corrected(np.real(src), expected.view(np.uint8)), np.uint8).view(expected.dtype)
    got = ours(src, src_name, dst_name)
    mismatch = np.nonzero(bits(got) != bits(expected))[0]
    assert mismatch.size == 0, [(src.reshape(-1)[i * src.size // bits(got).size], got.reshape(-1)[i * got.size // bits(got).size],
                                 expected.reshape(-1)[i * expected.size // bits(got).size]) for i in mismatch[:5]]


@pytest.mark.parametrize("dst_name", sorted(NO_NAN))
@pytest.mark.parametrize("src_name", ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "complex64"])
def test_nan_into_a_type_without_nan_is_a_value_error(src_name, dst_name):
    src = np.array([1.0, math.nan]).astype(np_dtype(src_name))
    a = core._from_bytes(src.view(np.uint8).tobytes(), src_name, 2)
    with pytest.raises(ValueError, match=f"{dst_name} has no NaN"):
        dr.asarray(a, dtype=dst_name)
    with pytest.raises(ValueError, match=f"{dst_name} has no NaN"):
        dr.asarray([1.0, math.nan], dtype=dst_name)


def test_float_to_int_saturates_and_nan_is_zero():
    a = dr.asarray([math.nan, math.inf, -math.inf, 300.7, -300.7, 2.0 ** 70, -1.5])
    assert dr.asarray(a, dtype="int8").tolist() == [0, 127, -128, 127, -128, 127, -1]
    assert dr.asarray(a, dtype="uint8").tolist() == [0, 255, 0, 255, 0, 255, 0]
    assert dr.asarray(a, dtype="int64").tolist() == [0, 2 ** 63 - 1, -2 ** 63, 300, -300, 2 ** 63 - 1, -1]
    assert dr.asarray(a, dtype="uint64").tolist() == [0, 2 ** 64 - 1, 0, 300, 0, 2 ** 64 - 1, 0]


@pytest.mark.parametrize("name", sorted(NO_NAN))
def test_packed_subbyte_source(name):
    bits_ = dr.DTYPES[name].bits
    codes = np.random.default_rng(1).integers(0, 1 << bits_, 101).tolist()
    acc = sum(c << (i * bits_) for i, c in enumerate(codes))
    packed = core._from_bytes(acc.to_bytes((len(codes) * bits_ + 7) // 8, "little"), name, len(codes), False)
    assert not packed.subbyte_padded
    theirs = np.array(codes, np.uint8).view(np_dtype(name)).astype(np.float32)
    got = dr.asarray(packed, dtype="float32")
    assert np.array_equal(np.asarray(got).view(np.uint32), theirs.view(np.uint32))
    assert packed.tolist() == theirs.astype(np.float64).tolist()


@pytest.mark.parametrize("view", [lambda x: x.T, lambda x: x[::-1, ::2], lambda x: x[:, 1::3], lambda x: x[::2, ::-1].T])
@pytest.mark.parametrize("pair", [("float64", "float32"), ("float32", "float16"), ("float32", "bfloat16"),
                                  ("int64", "float8_e4m3fn"), ("float16", "int32"), ("uint8", "complex128")])
def test_strided_sources(view, pair):
    src_name, dst_name = pair
    base = (np.arange(37 * 41) % 97 - 40).reshape(37, 41).astype(np_dtype(src_name))
    v = view(base)
    ref = dr.from_dlpack(base) if src_name != "bfloat16" else None
    got = dr.asarray(view(ref), dtype=dst_name)
    expected = oracle(v, dst_name)
    assert got.shape == v.shape and got.strides == tuple(s // expected.itemsize for s in np.ascontiguousarray(expected).strides)
    assert np.array_equal(bits(np.frombuffer(got._host_bytes(), np_dtype(dst_name)).reshape(v.shape)), bits(expected))


@pytest.mark.parametrize("dst_name", NAMES)
def test_lists_bit_for_bit(dst_name):
    kind = np_dtype(dst_name).kind
    if kind in "iu":
        info = np.iinfo(np_dtype(dst_name))
        values = [int(info.min), int(info.max), 0, 1, 2, -1 if info.min < 0 else 3]
    elif kind == "b":
        values = [True, False, True]
    else:
        values = [float(v) for v in sources("float64") if not (dst_name in NO_NAN and math.isnan(v))]
    expected = oracle(np.array(values, dtype=np.float64 if kind not in "iub" else np_dtype(dst_name)), dst_name)
    got = dr.asarray(values, dtype=dst_name)
    assert np.array_equal(bits(np.frombuffer(got._host_bytes(), np_dtype(dst_name))), bits(expected))


def test_float16_overflow_is_inf_as_numpy():
    assert dr.asarray([1e5], dtype="float16").tolist() == [math.inf]
    assert dr.asarray([-1e5, 65519.99, 65520.0], dtype="float16").tolist() == [-math.inf, 65504.0, math.inf]
    assert dr.asarray(np.array([1e5]), dtype="float16").tolist() == [math.inf]


def test_list_integer_range_and_loss():
    with pytest.raises(OverflowError, match=r"300 is out of range for int8 \[-128, 127\]"):
        dr.asarray([1, 300], dtype="int8")
    with pytest.raises(OverflowError, match=r"-1 is out of range for uint64"):
        dr.asarray([-1], dtype="uint64")
    assert dr.asarray([2 ** 64 - 1], dtype="uint64").tolist() == [2 ** 64 - 1]
    with pytest.raises(TypeError, match=r"cannot store 1.5 in an integer Array \(int32\)"):
        dr.asarray([1.5], dtype="int32")
    with pytest.raises(TypeError, match="cannot store complex"):
        dr.asarray([1j], dtype="float32")


def test_inferred_dtypes_and_shapes():
    cases = [([True, False], "bool"), ([1, True], "int64"), ([1, 2.5], "float64"), ([1, 2j], "complex128"),
             ([], "float64"), (3, "int64"), (2.5, "float64"), (((1,), (2,)), "int64")]
    for obj, name in cases:
        a = dr.asarray(obj)
        n = np.asarray(obj)
        assert a.dtype.name == name and a.shape == n.shape and a.tolist() == n.tolist()
    assert dr.asarray([np.float32(1.5), np.int8(2)]).tolist() == [1.5, 2.0]


def test_deep_and_self_containing_lists_are_value_errors():
    deep = 0.0
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ValueError, match="more than 64 levels deep"):
        dr.asarray(deep)
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contain itself"):
        dr.asarray(loop)
    sixty_four = 1.0
    for _ in range(64):
        sixty_four = [sixty_four]
    assert dr.asarray(sixty_four).ndim == 64


def test_ragged_names_the_shapes():
    with pytest.raises(ValueError, match=r"sub-shapes \(2, 1\) and \(3, 1\) differ"):
        dr.asarray([[[1], [2]], [[1], [2], [3]]])
    with pytest.raises(ValueError, match="ragged"):
        dr.asarray([[1, 2], 3])
    with pytest.raises(ValueError, match="ragged"):
        dr.asarray([1, [2]])


def test_lanes_from_lists():
    a = dr.asarray([[0.5, 1.0], [-6.0, 2.0]], dtype="float4_e2m1fn_x2")
    assert a.shape == (2,) and a.tolist() == [(0.5, 1.0), (-6.0, 2.0)]
    assert a._host_bytes() == bytes([0x1 | 0x2 << 4, 0xF | 0x4 << 4])
    with pytest.raises(ValueError, match="one per lane"):
        dr.asarray([1.0, 2.0, 3.0], dtype="float4_e2m1fn_x2")
    with pytest.raises(TypeError, match="one per lane"):
        dr.asarray(a, dtype="float32")


@pytest.mark.parametrize("dst_name", ["float32", "int16", "float8_e5m2", "bfloat16", "complex64", "bool"])
def test_assignment_between_dtypes(dst_name):
    src = (np.arange(24).reshape(4, 6) - 11.25).astype(np.float64)
    dst = dr.zeros((6, 4), dtype=dst_name)
    dst[1:5, ::-1] = dr.asarray(src.T[1:5])
    expected = np.zeros((6, 4), np_dtype(dst_name))
    expected[1:5, ::-1] = oracle(src.T[1:5], dst_name) if dst_name != "int16" else integer_rule(src.T[1:5], "int16")
    assert np.array_equal(bits(np.frombuffer(dst._host_bytes(), np_dtype(dst_name)).reshape(6, 4)), bits(expected))
    dst[0] = [1, 2, 3, 4] if dst_name != "bool" else [True, False, True, False]
    dst[5] = np.arange(4, dtype=np.int8)
    assert dst[5].tolist() == oracle(np.arange(4, dtype=np.int8), dst_name).tolist()


def test_assignment_of_nan_into_a_type_without_nan_changes_nothing():
    dst = dr.asarray([1.0, 2.0], dtype="float4_e2m1fn")
    with pytest.raises(ValueError, match="has no NaN"):
        dst[:] = dr.asarray([3.0, math.nan])
    assert dst.tolist() == [1.0, 2.0]


def test_scalar_reads():
    a = dr.asarray(np.arange(12.0).reshape(3, 4).astype(np.float32))
    assert float(a[1, 2]) == 6.0 and float(a[-1, -1]) == 11.0 and int(a[2, 0]) == 8
    assert complex(dr.asarray([1 + 2j])[0]) == 1 + 2j and bool(dr.asarray([[True]])[0, 0]) is True
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
        a[0, 4]
    with pytest.raises(IndexError, match="out of bounds"):
        a[0, 2 ** 70]
    assert dr.asarray([2.5], dtype="float8_e4m3fn")[0].tolist() == 2.5
    assert float(dr.asarray([0.375], dtype="bfloat16")[0]) == 0.375


# --- one rounding into every narrower float -----------------------------------
#
# A conversion into a narrower float is one rounding of the source's exact
# value (docs/semantics.md, "Conversions"). Two roundings (say float64 ->
# float32 -> bfloat16) differ from one only next to a tie of the narrow
# format: where the first rounding lands on the tie, or moves off it. So the
# values below sit just above and just below every tie of every format (and
# its overflow threshold), in float64, float32 and integer sources, and the
# results are compared bit for bit with ml_dtypes, NumPy and CPython's struct.

from fractions import Fraction  # noqa: E402
import struct  # noqa: E402

NARROW = ["float16", "bfloat16", *(n for n in _format.MINIFLOATS if n != "float4_e2m1fn_x2")]

# ml_dtypes is the oracle of one rounding only where it rounds once itself:
# 0.5 converts float64 and wide integers through float32 (twice), and rounds
# float8_e8m0fnu by the top mantissa bit before 0.7 (tests/support/e8m0.py).
# The lanes with ml_dtypes 0.7 run these tests; the 3.13t lane, whose only
# ml_dtypes wheel is 0.5.4, skips them with this reason.
ONE_ROUNDING_ORACLE = (float(ml_dtypes.bfloat16(1 + 2 ** -8 + 2 ** -40)) == 1.0078125
                       and e8m0.ml_dtypes_rounds_by_value(ml_dtypes))
needs_one_rounding_oracle = pytest.mark.skipif(
    not ONE_ROUNDING_ORACLE,
    reason=f"ml_dtypes {ml_dtypes.__version__} rounds twice (through float32), so it is no oracle of one rounding")
# Python ints for the list path beyond int64: the ties of float32 and bfloat16 up there.
HUGE_SCALES = [2 ** 64, 2 ** 80, 2 ** 100]


def _positive_values(name):
    """The format's finite values above zero, sorted, decoded by ml_dtypes / NumPy."""
    codes = np.arange(code_count(name), dtype=UINT_OF_SIZE[np_dtype(name).itemsize])
    with np.errstate(all="ignore"):
        values = codes.view(np_dtype(name)).astype(np.float64)
    return np.unique(values[np.isfinite(values) & (values > 0)])


def ties(name):
    """Every positive tie of the format: the midpoints of neighbouring values
    (from zero up: 1.5 * 2**e for float8_e8m0fnu, whose rule rounds it up),
    and the overflow threshold, halfway from the largest value to the next
    one the format would have with a wider exponent. All exact in float64."""
    v = _positive_values(name)
    above_max = 2 * v[-1] if name == "float8_e8m0fnu" else 2 * v[-1] - v[-2]
    points = np.concatenate([[0.0] if name != "float8_e8m0fnu" else [], v, [above_max]])
    return (points[1:] + points[:-1]) / 2


def around_ties_f64(name):
    """float64 values on both sides of each tie, of both signs: one float64
    step away; just inside and just outside the band of half a float32 step
    (where rounding through float32 lands on the tie); one float32 step away;
    and specials (zero, tiny, huge, inf, NaN)."""
    t = ties(name)
    half32 = np.spacing(t.astype(np.float32)).astype(np.float64) / 2
    near = [t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf)]
    for k in (1, -1):
        edge = t + k * half32
        near += [edge, np.nextafter(edge, t), np.nextafter(edge, np.inf * k), t + k * half32 / 3, t + 2 * k * half32]
    specials = [0.0, 5e-324, 1e-300, 2.0 ** -150, 1e300, 3.5e38, math.inf, math.nan]
    values = np.concatenate(near + [specials])
    values = np.concatenate([values, -values])
    if name in NO_NAN:
        values = values[~np.isnan(values)]
    return values


def around_ties_f32(name):
    t32 = ties(name).astype(np.float32)
    assert np.array_equal(t32.astype(np.float64), ties(name)), "every tie is a float32"
    values = np.concatenate([t32, np.nextafter(t32, np.float32(np.inf)), np.nextafter(t32, np.float32(-np.inf)),
                             np.float32([0.0, 1e-45, 3e38, np.inf, np.nan])])
    values = np.concatenate([values, -values])
    return values[~np.isnan(values)] if name in NO_NAN else values


def around_ties_int(name, lo, hi):
    """Integers in [lo, hi] around the integer ties (and the overflow
    threshold) of the format: one away, and around half a float32 step and
    half a float64 step, where rounding through either would land on the tie."""
    out = set()
    for t in ties(name).tolist():
        if t < 1 or t != int(t) or t > hi:
            continue
        t = int(t)
        half32 = int(np.spacing(np.float32(t))) // 2 if t < 2 ** 127 else 0
        half64 = int(np.spacing(float(t))) // 2
        for d in {0, 1, half32 - 1, half32, half32 + 1, half64 - 1, half64, half64 + 1}:
            for v in (t - d, t + d, -t - d, -t + d):
                if lo <= v <= hi:
                    out.add(v)
    return sorted(out)


def oracle_from_f64(values, name):
    """ml_dtypes (NumPy for float16) from float64: one rounding."""
    with np.errstate(all="ignore"):
        expected = values.astype(np_dtype(name))
    if name == "float8_e8m0fnu" and not e8m0.ml_dtypes_rounds_by_value(ml_dtypes):
        expected = np.array(e8m0.corrected(values, expected.view(np.uint8)), np.uint8).view(expected.dtype)
    return expected


def struct_e(values):
    """CPython's float16 packing (round half to even from the double), NaN and overflow aside."""
    out = []
    for v in values.tolist():
        try:
            out.append(struct.unpack("<H", struct.pack("<e", v))[0])
        except OverflowError:
            out.append(0x7C00 | (0x8000 if v < 0 else 0))
    return np.array(out, np.uint16)


def with_imaginary(values, dtype):
    """values + 0.5j with each real part as it is (adding 0.5j would make -0 into +0)."""
    out = np.empty(values.shape, dtype)
    out.real, out.imag = values, 0.5
    return out


def ours_bits(result, name):
    return bits(np.frombuffer(result._host_bytes(), np_dtype(name)))


def assert_same_bits(values, got, expected):
    bad = np.nonzero(got != expected)[0]
    assert bad.size == 0, (f"{bad.size} of {got.size} differ", [(float(values[i]) if np.ndim(values) else None,
                           int(got[i]), int(expected[i])) for i in bad[:6]])


@needs_one_rounding_oracle
@pytest.mark.parametrize("name", NARROW)
def test_float64_rounds_once_around_every_tie(name):
    values = around_ties_f64(name)
    expected = bits(oracle_from_f64(values, name))
    assert_same_bits(values, ours_bits(dr.asarray(values, dtype=name), name), expected)
    assert_same_bits(values, ours_bits(dr.asarray(dr.asarray(values), dtype=name), name), expected)
    assert_same_bits(values, ours_bits(dr.asarray(values.tolist(), dtype=name), name), expected)
    # Strided, and the real part of complex128: the other loops into the same rounding.
    assert_same_bits(values[::3], ours_bits(dr.asarray(dr.asarray(values)[::3], dtype=name), name), expected[::3])
    assert_same_bits(values, ours_bits(dr.asarray(with_imaginary(values, np.complex128), dtype=name), name), expected)
    if name == "float16":
        finite = ~np.isnan(values)
        assert_same_bits(values[finite], ours_bits(dr.asarray(values, dtype=name), name)[finite], struct_e(values[finite]))


@needs_one_rounding_oracle
@pytest.mark.parametrize("name", NARROW)
def test_float32_rounds_once_around_every_tie(name):
    values = around_ties_f32(name)
    expected = bits(oracle_from_f64(values.astype(np.float64), name))
    with np.errstate(all="ignore"):
        assert np.array_equal(bits(values.astype(np_dtype(name))), expected)
    assert_same_bits(values, ours_bits(dr.asarray(values, dtype=name), name), expected)
    assert_same_bits(values, ours_bits(dr.asarray(with_imaginary(values, np.complex64), dtype=name), name), expected)


INT_TYPES = ["int8", "int16", "int32", "uint32", "int64", "uint64"]


@needs_one_rounding_oracle
@pytest.mark.parametrize("name", NARROW)
@pytest.mark.parametrize("src_name", INT_TYPES)
def test_integers_round_once_around_every_tie(src_name, name):
    info = np.iinfo(src_name)
    values = around_ties_int(name, int(info.min), int(info.max))
    if not values:
        pytest.skip(f"no tie of {name} is an integer in {src_name}")
    src = np.array(values, dtype=src_name)
    with np.errstate(all="ignore"):
        expected = bits(src.astype(np_dtype(name)))
    if name == "float8_e8m0fnu" and not e8m0.ml_dtypes_rounds_by_value(ml_dtypes):
        expected = np.array(e8m0.corrected(src, expected.view(np.uint8)), np.uint8)
    assert_same_bits(src, ours_bits(dr.asarray(src, dtype=name), name), expected)
    assert_same_bits(src, ours_bits(dr.asarray(values, dtype=name), name), expected)


def exact_float32(v):
    """float32 of an integer: np.longdouble holds every int64 and uint64 exactly on
    the platforms CI runs (x86-64 extended, aarch64 quad), so its cast rounds once."""
    return np.array(v, dtype=np.longdouble).astype(np.float32)


@pytest.mark.parametrize("src_name", ["int32", "uint32", "int64", "uint64"])
def test_integers_into_float32_and_complex64_round_once(src_name):
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("long double does not hold an int64 here")
    info = np.iinfo(src_name)
    values = around_ties_int("bfloat16", int(info.min), int(info.max))
    # float32's own ties are bfloat16's ties' neighbours scaled: take the band around them too.
    values += [(1 << k) + (1 << (k - 24)) + d for k in range(25, 64) for d in (-1, 0, 1, (1 << (k - 53)) if k > 53 else 2)]
    values = [v for v in values if info.min <= v <= info.max]
    src = np.array(values, dtype=src_name)
    expected = bits(np.array([exact_float32(v) for v in values], np.float32))
    assert_same_bits(src, ours_bits(dr.asarray(src, dtype="float32"), "float32"), expected)
    assert_same_bits(src, ours_bits(dr.asarray(src, dtype="complex64"), "complex64")[::2], expected)
    assert_same_bits(src, ours_bits(dr.asarray(values, dtype="float32"), "float32"), expected)
    assert_same_bits(src, ours_bits(dr.asarray(values, dtype="complex64"), "complex64")[::2], expected)
    # NumPy's own array casts round once as well (its list intake does not: through a double).
    assert_same_bits(src, bits(src.astype(np.float32)), expected)


def _nearest_even_holds(v, got, below, above, even):
    """The definition of rounding to nearest, ties to even, in exact arithmetic."""
    d, d_below, d_above = abs(Fraction(v) - Fraction(got)), abs(Fraction(v) - Fraction(below)), abs(Fraction(v) - Fraction(above))
    return d <= d_below and d <= d_above and (d not in (d_below, d_above) or even)


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_python_ints_beyond_int64_round_once(name):
    dt = np.float32 if name == "float32" else np_dtype(name)
    values = []
    for scale in HUGE_SCALES:
        step = scale >> (23 if name == "float32" else 7)   # the spacing at scale (24 and 8 significand bits)
        for k in range(1, 6):
            tie = scale + k * step + step // 2
            values += [tie - 1, tie, tie + 1, tie - step // 4, tie + step // 4, -tie - 1, -tie + 1]
    got = np.frombuffer(dr.asarray(values, dtype=name)._host_bytes(), dt)
    inf = np.array(np.inf, dt)
    for v, r in zip(values, got):
        below, above = np.nextafter(r, -inf), np.nextafter(r, inf)
        even = int(np.array(r, dt).view(np.uint32 if name == "float32" else np.uint16)) % 2 == 0
        assert _nearest_even_holds(v, float(r), float(below), float(above), even), (v, float(r))
    with pytest.raises(OverflowError, match="too large"):
        dr.asarray([2 ** 1100], dtype=name)


@needs_one_rounding_oracle
@pytest.mark.parametrize("name", NARROW)
def test_overflow_nan_inf_and_signed_zero_from_every_source(name):
    """The format's own rule for what lies beyond it, the same from float64,
    float32, integers and lists: inf (ieee), NaN (fn, fnuz, e8m0), the
    largest finite (float6, float4); NaN keeps its sign where the format has
    one; -0 stays -0 except in fnuz formats (+0)."""
    v = _positive_values(name)
    over = ties(name)[-1]
    values = np.array([over, np.nextafter(over, np.inf), np.nextafter(over, 0), 2 * over, v[-1], 1e300, math.inf,
                       0.0, v[0] / 4, np.nextafter(v[0] / 2, np.inf), v[0] / 2] + ([] if name in NO_NAN else [math.nan]))
    values = np.concatenate([values, -values])
    expected = bits(oracle_from_f64(values, name))
    assert_same_bits(values, ours_bits(dr.asarray(values, dtype=name), name), expected)
    assert_same_bits(values, ours_bits(dr.asarray(values.tolist(), dtype=name), name), expected)
    with np.errstate(all="ignore"):
        f32 = values.astype(np.float32)
    exact32 = f32.astype(np.float64) == values
    assert_same_bits(f32[exact32], ours_bits(dr.asarray(f32[exact32], dtype=name), name), expected[exact32])
    if name in NO_NAN:
        top = expected[0]
        assert (expected[:7] == top).all(), "float6/float4 saturate to the largest finite value"
    elif _format.MINIFLOATS.get(name, (0, 0, 0, "ieee"))[3] in ("fnuz",):
        assert expected[7 + len(values) // 2] == 0, "fnuz: -0 is +0"


# --- bcomplex32: two bfloat16, real part then imaginary part (kDLBcomplex) ------
#
# The oracle is each part as a bfloat16 of ml_dtypes (which has no bcomplex32
# before 0.7): from bcomplex32, the complex64 whose parts are those bfloat16
# widened by ml_dtypes; into it, each part converted to bfloat16 by ml_dtypes.

BF16 = ml_dtypes.bfloat16
ALL_BF16 = np.arange(1 << 16, dtype=np.uint16)
# Every bfloat16 code in each part (NaNs of every payload and sign, infinities,
# subnormals, signed zeros), each paired with another code.
BC32_CODES = np.stack([ALL_BF16, ALL_BF16[::-1]], axis=1)


def bc32_as_complex64(pairs):
    """The complex64 of (real, imaginary) bfloat16 code pairs, part by part by ml_dtypes."""
    return np.ascontiguousarray(pairs.view(BF16).astype(np.float32)).view(np.complex64).reshape(-1)


def bc32_oracle(src):
    """(real, imaginary) bfloat16 codes of any source, each part by ml_dtypes.
    A bfloat16 source goes through float32 (exact), so that its NaNs become
    the quiet NaN of their sign, as every conversion into bfloat16 makes
    them (and ml_dtypes' own bcomplex32 does)."""
    if src.dtype == BF16:
        src = src.astype(np.float32)
    if src.dtype.kind == "c":
        re, im = np.ascontiguousarray(src.real), np.ascontiguousarray(src.imag)
    else:
        re, im = src, np.zeros(src.shape, np.float32)
    return np.stack([bits(oracle(re, "bfloat16")), bits(oracle(im, "bfloat16"))], axis=-1).reshape(-1, 2)


def bc32_array(pairs):
    return core._from_bytes(np.ascontiguousarray(pairs, np.uint16).tobytes(), "bcomplex32", pairs.shape[0])


def test_a_bcomplex32_capsule_converts_to_complex64_exactly(factory):
    """A CPU kDLBcomplex capsule imports zero-copy (bits 32: two bfloat16,
    real part first) and becomes complex64 by the bits, NaN payloads kept."""
    cap = factory.make(shape=(BC32_CODES.shape[0],), dtype=(18, 32, 1), fill=BC32_CODES.tobytes())
    a = dr.from_dlpack(cap)
    assert a.dtype is dr.bcomplex32 and a.data_ptr == factory.last_data and a.shape == (1 << 16,)
    got = dr.asarray(a, dtype="complex64")
    assert np.array_equal(bits(np.frombuffer(got._host_bytes(), np.complex64)), bits(bc32_as_complex64(BC32_CODES)))
    # Strided and reversed views: the same loop.
    view = a[::-3]
    assert np.array_equal(bits(np.frombuffer(dr.asarray(view, dtype="complex64")._host_bytes(), np.complex64)),
                          bits(bc32_as_complex64(BC32_CODES[::-3])))
    # Python values: each part widened exactly.
    finite = np.array([[0x0000, 0x8000], [0x3F80, 0xBFC0], [0x0001, 0x7F7F], [0xC2F7, 0x4049]], np.uint16)
    assert dr.asarray(bc32_array(finite)).tolist() == bc32_as_complex64(finite).tolist()
    del a, got, view
    import gc
    gc.collect()
    assert factory.deleter_calls == 1


def _quiet(src):
    """src without signaling NaNs: a conversion through double quiets them,
    as NumPy's casts of complex64 do (docs/semantics.md keeps only a NaN's sign)."""
    parts = bits(src).reshape(-1)
    quiet = (parts & 0x7FC00000 == 0x7FC00000) | (parts & 0x7F800000 != 0x7F800000) | (parts & 0x7FFFFF == 0)
    return src[quiet.reshape(src.shape[0], -1).all(axis=1)]


@pytest.mark.parametrize("dst_name", NAMES)
def test_bcomplex32_converts_into_every_dtype_as_its_complex64_value(dst_name):
    values = _quiet(bc32_as_complex64(BC32_CODES))
    pairs = np.ascontiguousarray(values).view(np.uint32).reshape(-1, 2) >> 16
    pairs = pairs.astype(np.uint16)
    if dst_name in NO_NAN:
        keep = ~np.isnan(values.real)
        values, pairs = values[keep], pairs[keep]
    expected = integer_rule(values, dst_name) if dst_name in INT_TYPES + ["int16", "uint8", "uint16"] \
        else oracle(values, dst_name)
    if dst_name == "float8_e8m0fnu" and not e8m0.ml_dtypes_rounds_by_value(ml_dtypes):
        expected = np.array(e8m0.corrected(np.real(values), expected.view(np.uint8)), np.uint8).view(expected.dtype)
    got = np.frombuffer(dr.asarray(bc32_array(pairs), dtype=dst_name)._host_bytes(), np_dtype(dst_name))
    bad = np.nonzero(bits(got) != bits(expected))[0]
    assert bad.size == 0, [(values[i], got[i], expected[i]) for i in bad[:5]]


@pytest.mark.parametrize("src_name", NAMES)
def test_every_dtype_converts_into_bcomplex32_a_part_at_a_time(src_name):
    src = sources(src_name)
    got = np.frombuffer(ours_bytes(src, src_name, "bcomplex32"), np.uint16).reshape(-1, 2)
    expected = bc32_oracle(src)
    bad = np.nonzero((got != expected).any(axis=1))[0]
    assert bad.size == 0, [(src[i], got[i], expected[i]) for i in bad[:5]]


def ours_bytes(src, src_name, dst_name):
    flat = np.ascontiguousarray(src).reshape(-1)
    a = core._from_bytes(flat.view(np.uint8).tobytes(), src_name, flat.size)
    return dr.asarray(a, dtype=dst_name)._host_bytes()


def test_python_values_into_bcomplex32_round_each_part_once():
    values = [complex(v, -w) for v, w in zip(sources("float64").tolist(), sources("float64")[::-1].tolist())]
    got = np.frombuffer(dr.asarray(values, dtype="bcomplex32")._host_bytes(), np.uint16).reshape(-1, 2)
    assert np.array_equal(got, bc32_oracle(np.array(values, np.complex128)))
    assert dr.asarray([1, 2.5, True, 1 - 3j], dtype="bcomplex32").tolist() == [1, 2.5, 1, 1 - 3j]
    with pytest.raises(TypeError, match="cannot read an object of type str"):
        dr.asarray(["x"], dtype="bcomplex32")


def test_ml_dtypes_bcomplex32_agrees_where_it_exists():
    if not hasattr(ml_dtypes, "bcomplex32"):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no bcomplex32")
    src = sources("complex64")
    got = np.frombuffer(ours_bytes(src, "complex64", "bcomplex32"), np.uint16).reshape(-1, 2)
    assert np.array_equal(got, src.astype(ml_dtypes.bcomplex32).view(np.uint16).reshape(-1, 2))
    back = np.frombuffer(dr.asarray(bc32_array(got), dtype="complex64")._host_bytes(), np.complex64)
    assert np.array_equal(bits(back), bits(got.reshape(-1).view(ml_dtypes.bcomplex32).astype(np.complex64)))
