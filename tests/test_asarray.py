"""``asarray`` (its dispatch lives in the core, src/_creation.pxi) against
NumPy as the oracle, and its refusals pinned.

For every kind of input (an ndarray, possibly strided or reversed; a
dlpack-ref Array on the same memory; a memoryview of it; the nested list
and, for 0-d, the Python scalar of its values), every ``copy`` and a dtype
that is absent, the same, or an exact conversion, ``dr.asarray`` must give
what ``np.array(..., copy=...)`` gives: the same values and dtype, memory
shared exactly when NumPy shares it, the input itself exactly when NumPy
returns its input, and a CopyForbiddenError exactly where NumPy cannot
avoid a copy. The rounding of inexact conversions is tests/test_conversions'
subject, not this file's.
"""

from __future__ import annotations

import array
import sys

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import dlpack_ref as dr

core = dr._dlpack_ref

from test_properties import arrays, property_settings

KINDS = ["ndarray", "Array", "memoryview", "list", "scalar"]
# Python values (the list and scalar kinds) convert as the core documents:
# a float into an integer dtype is refused (docs/semantics.md), where NumPy
# truncates; only the conversions both make are drawn for them.
PYTHON_EXACT = {
    "float64": ["float64", "float32", "complex128"], "float32": ["float64", "float32", "complex128"],
    "complex128": ["complex128"],
}
# Conversions every value of `arrays()` (integers in [-100, 100), complex
# parts in [-9, 9)) survives exactly, so that NumPy's value is the only one.
EXACT = {
    "float64": ["float64", "float32", "int64", "int32", "int16", "complex128"],
    "float32": ["float64", "float32", "int64", "int32", "int16", "complex128"],
    "int64": ["float64", "float32", "int64", "int32", "int16", "complex128"],
    "int32": ["float64", "float32", "int64", "int32", "int16", "complex128"],
    "int16": ["float64", "float32", "int64", "int32", "int16", "complex128"],
    "uint8": ["float64", "float32", "int64", "int32", "int16", "uint8", "complex128"],
    "bool": ["float64", "float32", "int64", "int32", "int16", "uint8", "bool", "complex128"],
    "complex128": ["complex128"],
}


def _inputs(n, kind):
    """(what dr.asarray gets, what np.array gets: the same memory or values)."""
    if kind == "ndarray":
        return n, n
    if kind == "Array":
        return dr.from_dlpack(n), n
    if kind == "memoryview":
        return memoryview(n), n
    if kind == "list":
        return n.tolist(), n.tolist()
    return n.item(), n.item()


def _numpy_outcome(src, dtype, copy):
    try:
        return np.array(src, dtype=dtype, copy=copy)
    except ValueError as exc:
        assert copy is False, exc
        return None


def _shares(result, n) -> bool:
    if n.size == 0:
        # Nothing to overlap: a view keeps the address, a copy has its own.
        return result.data_ptr == n.ctypes.data
    return np.shares_memory(np.from_dlpack(result), n)


def _numpy_shares(expected, n) -> bool:
    return expected.ctypes.data == n.ctypes.data if n.size == 0 else np.shares_memory(expected, n)


@property_settings
@given(data=st.data())
def test_asarray_matches_numpys_array(data):
    n = data.draw(arrays(min_ndim=0, max_ndim=3))
    kind = data.draw(st.sampled_from(KINDS if n.ndim == 0 else KINDS[:-1]))
    exact = PYTHON_EXACT.get(str(n.dtype), EXACT[str(n.dtype)]) if kind in ("list", "scalar") else EXACT[str(n.dtype)]
    dtype = data.draw(st.sampled_from([None, *exact]))
    copy = data.draw(st.sampled_from([None, True, False]))
    device = data.draw(st.sampled_from([None, "cpu", (1, 0)]))
    ours_in, numpy_in = _inputs(n, kind)
    note(f"kind={kind} shape={n.shape} strides={n.strides} dtype={dtype} copy={copy} device={device}")
    expected = _numpy_outcome(numpy_in, dtype, copy)
    if expected is None:
        with pytest.raises(dr.CopyForbiddenError, match="^copy=False, but "):
            dr.asarray(ours_in, dtype=dtype, copy=copy, device=device)
        return
    a = dr.asarray(ours_in, dtype=dtype, copy=copy, device=device)
    assert a.dtype.name == expected.dtype.name
    assert a.shape == expected.shape and a.tolist() == expected.tolist()
    assert a.device == dr.Device("cpu", 0)
    if kind in ("ndarray", "Array", "memoryview"):
        assert _shares(a, n) == _numpy_shares(expected, n), "memory shared where NumPy copies, or the reverse"
    if kind == "Array":
        # NumPy hands back its own array when nothing is asked of it.
        assert (a is ours_in) == (expected is numpy_in)
    if copy is True or kind in ("list", "scalar") or dtype not in (None, str(n.dtype)):
        # A copy (made here or by NumPy's __dlpack__): C-contiguous, writable.
        assert not a.readonly and np.from_dlpack(a).flags.c_contiguous


# --- the refusals, one per input kind ----------------------------------------------

def _self_containing():
    values = [1]
    values.append(values)
    return values


INPUT_KINDS = {
    "list": lambda: [1.0, 2.0],
    "tuple": lambda: (1, 2),
    "float": lambda: 3.0,
    "numpy scalar (a float subclass)": lambda: np.float64(2.0),
    "ndarray": lambda: np.arange(3.0),
    "Array": lambda: dr.asarray([1.0, 2.0]),
    "buffer": lambda: bytearray(b"ab"),
    "array.array": lambda: array.array("d", [1.0]),
}


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_copy_must_be_a_bool_or_none(kind):
    for bad in (1, 0, "yes", np.True_):
        with pytest.raises(TypeError, match=f"^copy must be True, False or None, not {bad!r}$"):
            dr.asarray(INPUT_KINDS[kind](), copy=bad)


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_an_unknown_dtype_is_a_type_error(kind):
    with pytest.raises(TypeError, match=r"^unknown dtype name 'float99'; expected one of \["):
        dr.asarray(INPUT_KINDS[kind](), dtype="float99")


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_an_unknown_device_is_a_value_error(kind):
    with pytest.raises(ValueError, match=r"^unknown device type 'quantum'; expected one of \['ascend', "):
        dr.asarray(INPUT_KINDS[kind](), device="quantum")


@pytest.mark.parametrize("obj, name", [
    ([1.0], "list"), ((1,), "tuple"), (3.0, "float"), (3, "int"), (True, "bool"), (1j, "complex"),
    (np.float64(2.0), "float64"), ("abc", "str"), (object(), "object"), (None, "NoneType"),
])
def test_copy_false_of_a_value_that_always_copies(obj, name):
    with pytest.raises(dr.CopyForbiddenError,
                       match=f"^copy=False, but an Array made from a {name} always needs a copy$"):
        dr.asarray(obj, copy=False)
    if type(obj) in (list, tuple, float, int, bool, complex):
        # An exact Python value is refused before its dtype is read: no
        # dtype could make sharing possible.
        with pytest.raises(dr.CopyForbiddenError, match=f"^copy=False, but an Array made from a {name} "):
            dr.asarray(obj, copy=False, dtype="float99")
    else:
        # Anything else may be a producer or a buffer: the dtype is read first.
        with pytest.raises(TypeError, match="^unknown dtype name 'float99'"):
            dr.asarray(obj, copy=False, dtype="float99")


@pytest.mark.parametrize("kind, source", [
    ("ndarray", "float64"), ("Array", "float64"), ("buffer", "uint8"),
    ("array.array", "float64"),
])
def test_copy_false_with_a_dtype_change(kind, source):
    with pytest.raises(dr.CopyForbiddenError, match=f"^copy=False, but converting {source} to int8 needs a copy$"):
        dr.asarray(INPUT_KINDS[kind](), dtype="int8", copy=False)


@pytest.mark.parametrize("kind", ["ndarray", "Array"])
def test_copy_false_to_a_device_the_memory_is_not_usable_on(kind):
    with pytest.raises(dr.CopyForbiddenError,
                       match=r"^copy=False, but the data on cpu:0 cannot be used on cuda:0 without a copy$"):
        dr.asarray(INPUT_KINDS[kind](), device="cuda", copy=False)


@pytest.mark.parametrize("kind", ["buffer", "array.array"])
def test_copy_false_moving_a_buffer_to_a_device(kind):
    with pytest.raises(dr.CopyForbiddenError, match="^copy=False, but moving host memory to cuda:0 needs a copy$"):
        dr.asarray(INPUT_KINDS[kind](), device="cuda:0", copy=False)


def test_copy_forbidden_is_both_a_value_error_and_a_buffer_error():
    assert issubclass(dr.CopyForbiddenError, ValueError) and issubclass(dr.CopyForbiddenError, BufferError)


@pytest.mark.parametrize("dtype", [None, "float32"])
def test_ragged_and_self_containing_lists_are_value_errors(dtype):
    with pytest.raises(ValueError, match=r"^ragged nested sequence: sub-shapes \(1,\) and \(2,\) differ"):
        dr.asarray([[1], [2, 3]], dtype=dtype)
    with pytest.raises(ValueError, match="nested"):
        dr.asarray(_self_containing(), dtype=dtype)


@pytest.mark.parametrize("obj", ["abc", object(), {1: 2}, None, {1}, np.arange(3.0).__dlpack__()])
def test_an_object_of_no_kind_is_a_type_error(obj):
    # A bare capsule is from_dlpack's input, not asarray's (as for NumPy).
    for dtype in (None, "float64"):
        with pytest.raises(TypeError, match=f"^asarray cannot read an object of type {type(obj).__name__}: expected a DLPack "
                                            "object, a buffer, a Python scalar or a nested sequence$"):
            dr.asarray(obj, dtype=dtype)


def test_the_public_asarray_is_the_cores():
    # No Python frame between the caller and the core's dispatch.
    from dlpack_ref import _dlpack_ref

    assert dr.asarray is _dlpack_ref.asarray and dr.zeros is _dlpack_ref.zeros
    assert type(dr.asarray).__name__ == "cython_function_or_method"


# --- asarray(ndarray, copy=True) reads the array's head, else its buffer -------

HEAD_VIEWS = {
    "dense": lambda x: x,
    "reversed": lambda x: x[::-1, :, ::-1],
    "transposed": lambda x: x.transpose(2, 0, 1),
    "stepped": lambda x: x[:, ::2, 1::3],
    "broadcast": lambda x: np.broadcast_to(x[:1], (4,) + x.shape[1:]),
    "zero-d": lambda x: np.asarray(x[1, 2, 3]),
    "empty": lambda x: x[:0],
    "read-only": lambda x: np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape),
    "unaligned": lambda x: np.frombuffer(b"\0" + x.tobytes(), x.dtype, x.size, 1).reshape(x.shape),
}


@pytest.mark.parametrize("dtype", ["?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "F", "D"])
@pytest.mark.parametrize("view", sorted(HEAD_VIEWS))
def test_an_ndarray_copy_is_read_from_its_head(dtype, view):
    """Every NumPy type the head is read for (C's int and long at the
    platform's sizes), in every layout: the copy is np.array(x, copy=True),
    in new C-contiguous memory, with the dtype the DLPack import gives."""
    base = (np.arange(6 * 5 * 7) % 97).astype(dtype).reshape(6, 5, 7)
    x = HEAD_VIEWS[view](base)
    c = dr.asarray(x, copy=True)
    assert core._numpy_head_read() == 1
    expected = np.array(x, copy=True)
    assert c.dtype == dr.from_dlpack(expected).dtype and c.shape == expected.shape
    got = np.from_dlpack(c)
    assert got.flags.c_contiguous and np.array_equal(got, expected)
    if x.size:
        assert not np.shares_memory(got, x)


def test_an_ndarray_head_copy_splits_like_any_copy():
    # Large enough for the worker pool: the same routine as Array.copy().
    n = np.arange(3 << 18, dtype=np.float64).reshape(3, -1)[:, ::-1]
    before = dr.get_num_threads()
    dr.set_num_threads(2)
    try:
        assert np.array_equal(np.from_dlpack(dr.asarray(n, copy=True)), n)
    finally:
        dr.set_num_threads(before)


def test_a_copied_ndarray_holds_no_buffer_export():
    n = np.arange(4.0)
    before = sys.getrefcount(n)
    c = dr.asarray(n, copy=True)
    assert sys.getrefcount(n) == before and c.tolist() == [0.0, 1.0, 2.0, 3.0]
    held = dr.asarray(memoryview(n))   # the control: a zero-copy import holds the export
    assert sys.getrefcount(n) == before + 1
    del held
    assert sys.getrefcount(n) == before


def test_a_copy_of_a_read_only_ndarray_is_writable():
    n = np.arange(3.0)
    n.flags.writeable = False
    c = dr.asarray(n, copy=True)
    c[0] = 7.0
    assert c.tolist() == [7.0, 1.0, 2.0] and n.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("make", [
    lambda: np.arange(3, dtype=">f8"),
    lambda: np.array([1, None], dtype=object),
    lambda: np.array(["2020-01-01"], dtype="M8[D]"),
    lambda: np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]),
    lambda: np.frombuffer(bytearray(33), dtype=np.float64, count=4, offset=1),
], ids=["big-endian", "object", "datetime", "structured", "unaligned"])
def test_an_ndarray_the_buffer_cannot_describe_gets_the_dlpack_answer(make):
    # The buffer route is only a faster way to the same copy: where it
    # cannot describe the array, the DLPack import answers, as it always did.
    def outcome(fn):
        try:
            r = fn()
        except Exception as exc:   # noqa: BLE001 - the outcome compared is the exception
            return type(exc), str(exc)
        return r.dtype, r.tolist()

    assert outcome(lambda: dr.asarray(make(), copy=True)) == outcome(lambda: dr.from_dlpack(make(), copy=True))


def test_an_ndarray_of_an_ml_dtypes_type_gets_the_dlpack_answer():
    # NumPy's buffer export refuses ml_dtypes' types ("cannot include dtype
    # 'E'"); its __dlpack__ refuses bfloat16 before NumPy 2.5 and exports it
    # from 2.5 on. Either way asarray(copy=True) answers as the DLPack import.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    n = np.arange(3, dtype=ml_dtypes.bfloat16)
    with pytest.raises(ValueError):
        memoryview(n)
    try:
        imported = dr.from_dlpack(n, copy=True)
    except BufferError as e:
        with pytest.raises(BufferError) as ours:
            dr.asarray(n, copy=True)
        assert str(ours.value) == str(e)
        return
    ours = dr.asarray(n, copy=True)
    assert ours.dtype == imported.dtype == dr.bfloat16
    assert ours.tolist() == imported.tolist() == [0.0, 1.0, 2.0]
    assert ours.data_ptr != n.ctypes.data


# --- a producer's element type is its tensor's ------------------------------------

class _NoDLPackType:
    def __dlpack_data_type__(self):
        raise ValueError("this dtype has no DLPack type")


class _OddDtypeProducer:
    """A valid DLPack producer of a float64 NumPy array whose unrelated
    ``dtype`` attribute raises, or names an object whose
    __dlpack_data_type__ raises."""

    def __init__(self, source, odd):
        self.source, self.odd = source, odd

    def __dlpack__(self, **kwargs):
        return self.source.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.source.__dlpack_device__()

    @property
    def dtype(self):
        if self.odd == "raises":
            raise RuntimeError("no dtype here")
        return _NoDLPackType()


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("odd", ["raises", "no DLPack type"])
def test_asarray_of_a_producer_never_reads_its_dtype_attribute(odd, dtype, copy):
    source = np.arange(4.0)
    p = _OddDtypeProducer(source, odd)
    try:
        expected = np.asarray(source, dtype=dtype, copy=copy)   # the oracle
    except ValueError:
        with pytest.raises(dr.CopyForbiddenError, match="converting float64 to float32 needs a copy"):
            dr.asarray(p, dtype=dtype, copy=copy)
        return
    a = dr.asarray(p, dtype=dtype, copy=copy)
    assert a.dtype == dr.as_dtype(dtype) and a.tolist() == expected.tolist()
    assert (a.data_ptr == source.ctypes.data) == (expected.ctypes.data == source.ctypes.data)
