"""Property-based tests of the Array surface against NumPy as the oracle.

For any shape, strides, dtype and basic index expression (integers, slices
with steps of any Python int size, negative steps, None, Ellipsis), a
dlpack-ref Array must give what NumPy gives: the same shape and values for
indexing, the same result for assignment between views that overlap in any
way, independent copies, the same ``tolist()``, the same values from
``asarray`` of buffers (NumPy's and hand-built ones) and of nested
sequences, and ``to_device("cpu")`` unchanged. Where NumPy raises IndexError
or ValueError, dlpack-ref raises the same type. Where the two differ on
purpose, docs/semantics.md says why (the tests below skip those cases
explicitly, never silently).

CI runs a fixed budget: DLPACK_REF_PROPERTY_EXAMPLES examples per property
(default 150). ``python tools/fuzz_long.py --properties -n 20000`` runs the
same properties for longer.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import dlpack_ref as dr

from support.hostile_buffer import HostileBuffer

EXAMPLES = int(os.environ.get("DLPACK_REF_PROPERTY_EXAMPLES", "150"))
property_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

DTYPES = ["float64", "float32", "int64", "int32", "int16", "uint8", "bool", "complex128"]

# Mostly small integers, sometimes bounds far outside any extent and
# steps of any size (beyond int64 too), which NumPy clamps.
huge_ints = st.sampled_from([2**31, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, 10**30])
bounds = st.one_of(st.none(), st.integers(-7, 7), huge_ints, huge_ints.map(lambda v: -v))
steps = st.one_of(st.none(), st.integers(-4, 4).filter(bool), huge_ints, huge_ints.map(lambda v: -v))


@st.composite
def arrays(draw, min_ndim=0, max_ndim=4, max_side=5, dtypes=DTYPES):
    """A NumPy array of random values, possibly a strided or reversed view."""
    dtype = draw(st.sampled_from(dtypes))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_ndim, max_size=max_ndim)))
    size = int(np.prod(shape)) if shape else 1
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.integers(-100, 100, size=size)
    n = values.astype(dtype).reshape(shape)
    if dtype == "complex128":
        n = np.asarray(n + 1j * rng.integers(-9, 9, size=size).reshape(shape))
    if n.ndim and draw(st.booleans()):
        # A non-contiguous source: every other element along a doubled axis.
        axis = draw(st.integers(0, n.ndim - 1))
        n = np.repeat(n, 2, axis=axis)[(slice(None),) * axis + (slice(None, None, 2),)]
    if n.ndim and draw(st.booleans()):
        n = n[(slice(None, None, -1),) * n.ndim]
    return n


@st.composite
def index_keys(draw, ndim):
    """A basic index: at most ndim integers/slices, any Nones, one Ellipsis at most."""
    items = []
    for _ in range(draw(st.integers(0, ndim))):
        items.append(draw(st.one_of(
            st.builds(slice, bounds, bounds, steps),
            st.integers(-6, 6),
            huge_ints,
        )))
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def to_dr(n):
    """The same array as a dlpack-ref Array, by DLPack (zero-copy)."""
    return dr.from_dlpack(n)


def outcome(fn):
    try:
        return "ok", fn()
    except OverflowError as exc:
        # NumPy: an integer index beyond int64 is an OverflowError; dlpack-ref
        # calls it what it is, an IndexError (docs/semantics.md).
        return IndexError, str(exc)
    except (IndexError, ValueError, TypeError) as exc:
        return type(exc), str(exc)


# --- indexing --------------------------------------------------------------------

@property_settings
@given(data=st.data())
def test_indexing_gives_numpys_view(data):
    n = data.draw(arrays(min_ndim=0, max_ndim=4))
    a = to_dr(n)
    key = data.draw(index_keys(n.ndim))
    note(f"shape={n.shape} strides={n.strides} key={key!r}")
    expected, ours = outcome(lambda: n[key]), outcome(lambda: a[key])
    if expected[0] != "ok":
        assert ours[0] is expected[0], (expected, ours)
        return
    assert ours[0] == "ok", (expected, ours)
    v, w = expected[1], ours[1]
    if not isinstance(v, np.ndarray):  # NumPy gives a scalar for all-integer keys
        assert w.shape == () and w.tolist() == v.item()
        return
    assert w.shape == v.shape and w.tolist() == v.tolist()
    # A view, never a copy; exports again as it is.
    if v.size:
        assert w.data_ptr == v.ctypes.data
    back = np.from_dlpack(w)
    assert back.shape == v.shape and back.tolist() == v.tolist()


@property_settings
@given(data=st.data())
def test_indexing_twice_composes_like_numpy(data):
    n = data.draw(arrays(min_ndim=1, max_ndim=3, max_side=7))
    a = to_dr(n)
    k1 = data.draw(index_keys(n.ndim))
    assume(outcome(lambda: n[k1])[0] == "ok" and isinstance(n[k1], np.ndarray))
    k2 = data.draw(index_keys(n[k1].ndim))
    expected, ours = outcome(lambda: n[k1][k2]), outcome(lambda: a[k1][k2])
    assert ours[0] == expected[0] or (expected[0] == "ok") == (ours[0] == "ok"), (expected, ours)
    if expected[0] == "ok":
        assert np.asarray(expected[1]).tolist() == ours[1].tolist()


# --- assignment, overlapping or not -------------------------------------------------

@property_settings
@given(data=st.data())
def test_assignment_between_overlapping_views_matches_numpy(data):
    base = data.draw(arrays(min_ndim=1, max_ndim=3, max_side=6, dtypes=["float64", "int32", "uint8", "complex128"]))
    base = base.copy()  # writable and owned
    a = dr.asarray(base.tolist(), dtype=str(base.dtype)) if base.size else to_dr(base)
    if base.size:
        base = np.from_dlpack(a)  # the oracle works on the very same memory
    k_dst = data.draw(index_keys(base.ndim))
    k_src = data.draw(index_keys(base.ndim))
    ok_dst, ok_src = outcome(lambda: base[k_dst]), outcome(lambda: base[k_src])
    assume(ok_dst[0] == "ok" and ok_src[0] == "ok")
    dst_view, src_view = base[k_dst], base[k_src]
    assume(isinstance(dst_view, np.ndarray) and isinstance(src_view, np.ndarray))
    transpose = src_view.ndim >= 2 and data.draw(st.booleans())
    if transpose:
        src_view = src_view.T
    try:
        shape = np.broadcast_shapes(src_view.shape, dst_view.shape)
    except ValueError:
        assume(False)
    assume(shape == dst_view.shape and src_view.ndim <= dst_view.ndim)
    note(f"base={base.shape} dst={k_dst!r} src={k_src!r} transpose={transpose}")
    expected = base.copy()
    e_src = expected[k_src].T if transpose else expected[k_src]
    expected[k_dst] = e_src
    src = a[k_src]
    if transpose:  # NumPy's .T reverses every axis; the Array API's .T is 2-d only
        src = src.permute_dims(tuple(range(src.ndim))[::-1])
    a[k_dst] = src
    assert a.tolist() == expected.tolist()


@property_settings
@given(n=arrays(min_ndim=0, max_ndim=4), value=st.integers(0, 5))
def test_copy_is_independent_and_equal(n, value):
    a = to_dr(n)
    c = a.copy()
    assert c.shape == a.shape and c.tolist() == n.tolist() and c.readonly is False
    if c.size:
        assert c.data_ptr != a.data_ptr
        before = n.tolist()
        c[...] = value
        assert n.tolist() == before


# --- conversions -----------------------------------------------------------------

@property_settings
@given(n=arrays(min_ndim=0, max_ndim=4))
def test_tolist_and_to_device_cpu_match_numpy(n):
    a = to_dr(n)
    assert a.tolist() == n.tolist()
    b = a.to_device("cpu")
    assert b.tolist() == n.tolist() and b.data_ptr == a.data_ptr


@property_settings
@given(n=arrays(min_ndim=0, max_ndim=4, dtypes=["float64", "int64", "bool", "complex128", "int16", "float32"]))
def test_asarray_of_a_nested_sequence_matches_numpy(n):
    values = n.tolist()  # an empty axis hides the extents after it: compare with NumPy's reading
    a = dr.asarray(values, dtype=str(n.dtype))
    assert a.shape == np.asarray(values, dtype=n.dtype).shape and a.tolist() == values
    inferred, oracle = dr.asarray(values), np.asarray(values)
    if oracle.dtype.kind in "biufc" and oracle.size:
        assert inferred.tolist() == oracle.tolist()


@property_settings
@given(n=arrays(min_ndim=0, max_ndim=4, dtypes=["float64", "int32", "uint8", "int16", "complex128", "bool"]))
def test_asarray_of_numpys_buffer_matches_numpy(n):
    view = memoryview(n)
    a = dr.asarray(view)
    assert a.shape == n.shape and a.tolist() == n.tolist()
    if n.size:
        assert a.data_ptr == n.ctypes.data


ITEM = {"d": 8, "f": 4, "i": 4, "h": 2, "B": 1, "q": 8}


@st.composite
def strided_layouts(draw):
    """(format, itemsize, shape, element strides, first element) within a
    block of 64 elements: every element the layout addresses lies inside."""
    fmt = draw(st.sampled_from(sorted(ITEM)))
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(-5, 5), min_size=ndim, max_size=ndim)))
    low = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0 and n > 0)
    high = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0 and n > 0)
    assume(high - low < 64)
    first = draw(st.integers(-low, 63 - high))
    return fmt, ITEM[fmt], shape, strides, first


@property_settings
@given(layout=strided_layouts())
def test_asarray_of_a_hand_built_buffer_reads_what_numpy_reads(layout):
    fmt, itemsize, shape, strides, first = layout
    block = np.arange(64).astype(np.dtype(fmt))
    byte_strides = tuple(s * itemsize for s in strides)
    b = HostileBuffer(shape=shape, strides=byte_strides, itemsize=itemsize, fmt=fmt.encode(), data=None)
    b._block = block
    b._spec["buf"] = block.ctypes.data + first * itemsize
    expected = np.lib.stride_tricks.as_strided(block[first:], shape=shape, strides=byte_strides)
    refs = sys.getrefcount(b)
    a = dr.asarray(b)
    assert a.shape == shape and a.tolist() == expected.tolist()
    if a.size:
        assert a.data_ptr == expected.ctypes.data
    del a
    assert sys.getrefcount(b) == refs


@property_settings
@given(value=st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False),
                       st.complex_numbers(allow_nan=False)))
def test_asarray_of_a_python_scalar_matches_numpy(value):
    a, n = dr.asarray(value), np.asarray(value)
    assert a.shape == () and a.tolist() == n.tolist()


# --- iteration -------------------------------------------------------------------

@property_settings
@given(n=arrays(min_ndim=0, max_ndim=4))
def test_iteration_yields_what_numpy_yields(n):
    a = to_dr(n)
    if n.ndim == 0:
        # NumPy: TypeError('iteration over a 0-d array'); the same words for an Array.
        with pytest.raises(TypeError, match="^iteration over a 0-d array$"):
            iter(n)
        with pytest.raises(TypeError, match="^iteration over a 0-d Array$"):
            iter(a)
        with pytest.raises(TypeError):
            list(a)
        return
    items, expected = list(a), list(n)
    assert len(items) == len(expected) == n.shape[0]
    for i, (item, want) in enumerate(zip(items, expected)):
        # NumPy yields views of the rows (its scalars for a 1-d array);
        # dlpack-ref yields views, 0-d Arrays for a 1-d Array (docs/semantics.md).
        assert type(item) is dr.Array and item.shape == np.shape(want)
        assert item.tolist() == want.tolist()
        if item.size:
            assert item.data_ptr == n.ctypes.data + i * n.strides[0]


# --- asarray's dtype for sequences of NumPy scalars and 0-d arrays ----------------

try:
    import ml_dtypes
except ImportError:  # the extended floats are then left out of the leaves
    ml_dtypes = None
STANDARD = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "complex64", "complex128"]
# bfloat16 and the float8/6/4 types: ml_dtypes', outside NumPy's own lattice.
EXTENDED = [name for name, dt in dr.DTYPES.items()
            if dt.kind == "real floating" and name not in STANDARD and dt.lanes == 1]


def _numpy_dtype(name):
    return np.dtype(name) if name in STANDARD else np.dtype(getattr(ml_dtypes, name))


@st.composite
def leaves(draw):
    """A Python scalar, a NumPy (or ml_dtypes) scalar or a 0-d NumPy array of
    any dtype dlpack-ref has; values 1 and 2 are exact in every one."""
    value = draw(st.sampled_from([1, 2]))
    which = draw(st.sampled_from(["bool", "int", "float", "complex", "scalar", "0-d"]))
    if which == "bool":
        return value == 1
    if which in ("int", "float", "complex"):
        return {"int": int, "float": float, "complex": complex}[which](value)
    names = STANDARD + (EXTENDED if ml_dtypes is not None else [])
    dtype = _numpy_dtype(draw(st.sampled_from(names)))
    zero_d = np.array(value).astype(dtype)
    return zero_d if which == "0-d" else zero_d[()]


@st.composite
def mixed_sequences(draw):
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    flat = [draw(leaves()) for _ in range(int(np.prod(shape)))]

    def nest(items, dims):
        if len(dims) == 1:
            return list(items)
        step = len(items) // dims[0]
        return [nest(items[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]

    return nest(flat, shape), flat


def _leaf_dtype(leaf):
    # NumPy's reading of a leaf in a sequence: Python scalars as their
    # default dtypes (not NEP 50's weak scalars), NumPy values as their own.
    return {bool: np.dtype(bool), int: np.dtype("int64"), float: np.dtype("float64"),
            complex: np.dtype("complex128")}.get(type(leaf)) or leaf.dtype


def expected_dtype(seq, flat):
    """The documented rule (docs/semantics.md, "asarray's dtype"): NumPy's own
    result; with an extended float among the leaves, that type when every
    other leaf is bool or the same type, else NumPy's result with each
    extended float read as float32."""
    dts = [_leaf_dtype(leaf) for leaf in flat]
    ext = {d.name for d in dts if d.name in EXTENDED}
    if not ext:
        return np.asarray(seq).dtype.name
    others = {d.name for d in dts if d.name not in ext and d.name != "bool"}
    if len(ext) == 1 and not others:
        return ext.pop()
    return np.result_type(*[np.dtype("float32") if d.name in ext else d for d in dts]).name


@property_settings
@given(mixed=mixed_sequences())
def test_asarray_infers_numpys_dtype_for_numpy_scalars_and_0d_arrays(mixed):
    seq, flat = mixed
    want = expected_dtype(seq, flat)
    note(f"leaf dtypes {[str(_leaf_dtype(leaf)) for leaf in flat]} -> {want}")
    a = dr.asarray(seq)
    assert str(a.dtype) == want
    n = np.asarray(seq, dtype=_numpy_dtype(want))
    assert a.shape == n.shape
    # False is NaN in float8_e8m0fnu (no zero): NaNs compare equal here.
    np.testing.assert_array_equal(np.asarray(a.tolist()), np.asarray(n.tolist()))


def test_asarray_of_numpy_scalars_examples():
    # The example and the cases where NumPy does not apply NEP 50.
    assert str(dr.asarray([np.float32(1.5), np.int8(3)]).dtype) == "float32"
    assert str(dr.asarray([np.float32(1.5), 1.0]).dtype) == "float64"       # a Python float is float64 here
    assert str(dr.asarray([True, np.int8(1)]).dtype) == "int8"
    assert str(dr.asarray([np.uint64(1), -1]).dtype) == "float64"
    assert str(dr.asarray([np.array(3, dtype=np.int16)]).dtype) == "int16"
    assert dr.asarray([np.float32(1.5), np.int8(3)]).tolist() == [1.5, 3.0]
    with pytest.raises(TypeError, match="has no DLPack equivalent"):
        dr.asarray([np.datetime64(1, "s")])
