"""The Array type: metadata, repr, tolist, copies, indexing views, the
buffer protocol, and the creation functions asarray / empty / zeros."""

from __future__ import annotations

import array
import io
import math

import pytest

import dlpack_ref as dr

ALL_DTYPES = sorted(dr.DTYPES)
FORMATS = {"bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B",
           "uint16": "H", "uint32": "I", "uint64": "Q", "float16": "e", "float32": "f",
           "float64": "d", "complex64": "Zf", "complex128": "Zd"}
NO_FORMAT = sorted(set(ALL_DTYPES) - set(FORMATS))

# One exactly representable sample value per kind, used to fill arrays.
SAMPLES = {"bool": [True, False, True], "complex64": [1 + 2j, -0.5j, 3], "complex128": [1 + 2j, -0.5j, 3],
           "float4_e2m1fn_x2": [(0.5, -6.0), (1.0, 0.0), (3.0, 1.5)],
           "float8_e8m0fnu": [1.0, 0.5, 4.0]}


def sample(name):
    if name in SAMPLES:
        return SAMPLES[name]
    if dr.DTYPES[name].kind in ("signed integer", "unsigned integer"):
        return [1, 2, 3]
    return [1.5, -0.5, 1.0]


def grid(shape=(3, 4), dtype="int64"):
    """Array with values 0..n-1 in C order."""
    n = math.prod(shape)
    flat = list(range(n))
    nested = flat
    for extent in reversed(shape[1:]):
        nested = [nested[i:i + extent] for i in range(0, len(nested), extent)]
    return dr.asarray(nested, dtype=dtype)


# --- metadata -------------------------------------------------------------------

def test_metadata_of_a_2d_array():
    a = grid((3, 4), "int32")
    assert a.shape == (3, 4) and a.strides == (4, 1)
    assert a.dtype is dr.int32 and a.device == dr.Device("cpu", 0)
    assert a.ndim == 2 and a.size == 12 and a.nbytes == 48 and len(a) == 3
    assert a.readonly is False and a.data_ptr % 256 == 0
    assert a.__dlpack_device__() == (dr.DeviceType.CPU, 0)


def test_strides_count_elements_after_views():
    a = grid((3, 4), "float64")
    assert a.T.strides == (1, 4) and a.T.shape == (4, 3)
    assert a[:, ::2].strides == (4, 2)
    assert a[::-1].strides == (-4, 1)
    assert a[None].strides[1:] == (4, 1) and a[None].shape == (1, 3, 4)


def test_zero_d():
    a = dr.asarray(7)
    assert a.shape == () and a.strides == () and a.ndim == 0 and a.size == 1 and a.nbytes == 8
    assert a.tolist() == 7 and int(a) == 7
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d Array"):
        len(a)


def test_size_zero():
    a = dr.empty((0, 5), dtype="float32")
    assert a.shape == (0, 5) and a.size == 0 and a.nbytes == 0 and len(a) == 0
    assert a.tolist() == []


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_dtype_round_trips_through_tolist(name):
    values = sample(name)
    a = dr.asarray(values, dtype=name)
    assert a.dtype is dr.DTYPES[name] and a.shape == (3,)
    assert a.tolist() == [complex(v) if "complex" in name else v for v in values]
    assert dr.asarray(a.tolist(), dtype=name).tolist() == a.tolist()
    assert repr(a) == f"Array({a.tolist()!r}, shape=(3,), dtype={name})"
    assert a.nbytes == 3 * dr.DTYPES[name].itemsize


def test_repr():
    assert repr(dr.asarray([[1, 2], [3, 4]])) == "Array([[1, 2], [3, 4]], shape=(2, 2), dtype=int64)"
    assert repr(dr.asarray(2.5)) == "Array(2.5, shape=(), dtype=float64)"
    assert repr(dr.asarray(b"ab")) == "Array([97, 98], shape=(2,), dtype=uint8, readonly=True)"
    assert repr(dr.zeros((2000,))) == "Array(<2000 elements>, shape=(2000,), dtype=float64)"


def test_tolist_of_a_strided_view():
    a = grid((3, 4))
    assert a[::-1, 1::2].tolist() == [[9, 11], [5, 7], [1, 3]]
    assert a.T.tolist() == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]


# --- copies and devices -----------------------------------------------------------

def test_copy_is_c_contiguous_with_a_new_pointer():
    a = grid((3, 4))
    v = a[::-1, ::2]
    c = v.copy()
    assert c.data_ptr != v.data_ptr and c.data_ptr % 256 == 0
    assert c.strides == (2, 1) and c.tolist() == v.tolist()
    assert not c.readonly
    c[0, 0] = -1
    assert v.tolist()[0][0] == 8


def test_copy_of_read_only_is_writable():
    a = dr.asarray(b"xyz")
    c = a.copy()
    assert a.readonly and not c.readonly and c.tolist() == [120, 121, 122]


@pytest.mark.parametrize("device", ["cpu", "cpu:0", (1, 0), (dr.DeviceType.CPU, 0), dr.Device("cpu")])
def test_to_device_same_device_returns_self(device):
    a = grid((2, 2))
    assert a.to_device(device) is a


# --- indexing ---------------------------------------------------------------------

ITEM = 8  # int64


@pytest.mark.parametrize("key, offset, shape, strides", [
    (1, 4, (4,), (1,)),
    (-1, 8, (4,), (1,)),
    ((2, 3), 11, (), ()),
    ((-3, -4), 0, (), ()),
    (slice(1, None), 4, (2, 4), (4, 1)),
    (slice(None, None, -1), 8, (3, 4), (-4, 1)),
    ((slice(None), slice(3, 0, -2)), 3, (3, 2), (4, -2)),
    ((slice(None, None, 2), slice(1, None, 3)), 1, (2, 1), (8, 3)),
    ((Ellipsis, 2), 2, (3,), (4,)),
    ((1, Ellipsis), 4, (4,), (1,)),
    (Ellipsis, 0, (3, 4), (4, 1)),
    (None, 0, (1, 3, 4), (0, 4, 1)),
    ((slice(None), None, 1), 1, (3, 1), (4, 0)),
    ((slice(5, 9),), 0, (0, 4), (4, 1)),
    ((slice(-2, None), slice(-1, -5, -1)), 7, (2, 4), (4, -1)),
])
def test_basic_indexing_is_a_view(key, offset, shape, strides):
    a = grid((3, 4))
    v = a[key]
    assert v.shape == shape and v.strides == strides
    if v.size:
        assert v.data_ptr == a.data_ptr + offset * ITEM
    assert v.base is a
    # Values agree with Python's own indexing of the nested list.
    import numpy as np
    assert v.tolist() == np.arange(12).reshape(3, 4)[key].tolist()


def test_writes_through_a_view_reach_the_base():
    a = grid((3, 4))
    a[::-1, 0][0] = 100
    assert a.tolist()[2][0] == 100


@pytest.mark.parametrize("key, exc, message", [
    ((0, 0, 0), IndexError, "too many indices for an Array of ndim 2: 3 given"),
    (3, IndexError, "index 3 is out of bounds for axis 0 with size 3"),
    (-4, IndexError, "index -4 is out of bounds for axis 0 with size 3"),
    (2**70, IndexError, f"index {2**70} is out of bounds for axis 0 with size 3"),
    ((0, 4), IndexError, "index 4 is out of bounds for axis 1 with size 4"),
    ("x", IndexError, "only integers, slices, Ellipsis and None are valid indices.*not str"),
    (1.0, IndexError, "only integers, slices, Ellipsis and None are valid indices.*not float"),
    (True, IndexError, "only integers, slices, Ellipsis and None are valid indices.*not bool"),
    ([0], IndexError, "only integers, slices, Ellipsis and None are valid indices.*not list"),
    ((Ellipsis, Ellipsis), IndexError, "single ellipsis"),
    (slice(None, None, 0), ValueError, "slice step cannot be zero"),
    (slice(1.5, None), TypeError, "slice indices must be integers"),
])
def test_bad_indices(key, exc, message):
    a = grid((3, 4))
    with pytest.raises(exc, match=message):
        a[key]


def test_integer_arrays_index_through_index():
    a = grid((3, 4))
    assert a[dr.asarray(2)].tolist() == [8, 9, 10, 11]
    with pytest.raises(TypeError, match="only integer Arrays can be used as an index"):
        a[dr.asarray(1.0)]


def test_setitem():
    a = grid((2, 3))
    a[0] = [7, 8, 9]
    a[1, ::-1] = dr.asarray([1, 2, 3])
    a[:, 0] = 0
    assert a.tolist() == [[0, 8, 9], [0, 2, 1]]
    a[...] = 5
    assert a.tolist() == [[5, 5, 5], [5, 5, 5]]
    f = dr.zeros((2,), dtype="float32")
    f[:] = dr.asarray([1, 2], dtype="int8")  # converted to the destination dtype
    assert f.tolist() == [1.0, 2.0]


def test_setitem_errors():
    a = grid((2, 3))
    with pytest.raises(ValueError, match=r"cannot broadcast shape \(2,\) to \(3,\)"):
        a[0] = [1, 2]
    with pytest.raises(TypeError, match="cannot store 1.5 in an integer Array"):
        a[0, 0] = 1.5
    with pytest.raises(OverflowError, match="out of range for int8"):
        dr.zeros((1,), dtype="int8")[0] = 200
    ro = dr.asarray(b"abc")
    with pytest.raises(ValueError, match="assignment destination is read-only"):
        ro[0] = 1
    assert ro.tolist() == [97, 98, 99]


def test_packed_subbyte_cannot_be_indexed():
    a = dr.from_dlpack(_packed_float4())
    assert not a.subbyte_padded
    with pytest.raises(TypeError, match="indexing packed sub-byte float4_e2m1fn"):
        a[0]


def _packed_float4():
    from dlpack_ref.testing import CapsuleFactory
    f = CapsuleFactory()
    return f.make(shape=(4,), dtype=(17, 4, 1), fill=bytes([0x21, 0x43]))


# --- buffer protocol ----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FORMATS))
def test_buffer_formats(name):
    a = dr.zeros((2, 3), dtype=name)
    m = memoryview(a)
    assert m.format == FORMATS[name] and m.itemsize == dr.DTYPES[name].itemsize
    assert m.shape == (2, 3) and m.strides == (3 * m.itemsize, m.itemsize)
    assert not m.readonly and m.obj is a


@pytest.mark.parametrize("name", NO_FORMAT)
def test_buffer_refused_without_a_format(name):
    a = dr.zeros((2,), dtype=name)
    with pytest.raises(BufferError, match=f"dtype {name} has no buffer-protocol format"):
        memoryview(a)


def test_memoryview_shares_memory_and_writes():
    a = grid((2, 3), "int32")
    m = memoryview(a)
    m[1, 2] = -5
    assert a.tolist()[1][2] == -5
    assert m.tolist() == a.tolist()


def test_numpy_asarray_shares_memory():
    np = pytest.importorskip("numpy")
    a = grid((3, 4), "float64")
    for v in (a, a.T, a[::-1, ::2], a[1]):
        n = np.asarray(v)
        assert n.ctypes.data == v.data_ptr and n.shape == v.shape
        assert n.strides == tuple(s * 8 for s in v.strides)
        assert n.tolist() == v.tolist()
    np.asarray(a)[0, 0] = 42
    assert a.tolist()[0][0] == 42


def test_buffer_honours_read_only():
    np = pytest.importorskip("numpy")
    a = dr.asarray(b"abc")
    m = memoryview(a)
    assert m.readonly
    with pytest.raises(TypeError, match="cannot modify read-only memory"):
        m[0] = 1
    n = np.asarray(a)
    assert not n.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        n[0] = 1
    with pytest.raises(BufferError, match="read-only; a writable buffer was requested"):
        _get_writable_buffer(a)
    assert a.tolist() == [97, 98, 99]


def _get_writable_buffer(obj):
    """PyObject_GetBuffer(obj, PyBUF_WRITABLE) called directly: CPython's own
    'w*' argument parsers turn the exporter's BufferError into a TypeError."""
    import ctypes
    from dlpack_ref.testing import c_api
    get = c_api("PyObject_GetBuffer", ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int)
    release = c_api("PyBuffer_Release", None, ctypes.c_void_p)
    view = (ctypes.c_char * 256)()  # larger than any Py_buffer
    get(obj, ctypes.addressof(view), 0x0001)  # PyBUF_WRITABLE
    release(ctypes.addressof(view))


def test_writable_buffer_of_a_writable_array():
    _get_writable_buffer(dr.asarray(bytearray(b"abc")))


def test_buffer_contiguity_requests():
    a = grid((3, 4), "int64")
    with pytest.raises(BufferError, match="this Array is strided; the consumer must accept strides"):
        io.BytesIO().write(a.T)  # a simple (unstrided) buffer request
    assert io.BytesIO().write(a) == 96
    assert memoryview(a.T).f_contiguous
    assert memoryview(a).c_contiguous


# --- asarray ------------------------------------------------------------------------

def test_asarray_bytes_is_read_only_zero_copy():
    data = b"\x00\x01\x02"
    a = dr.asarray(data)
    assert a.readonly and a.dtype is dr.uint8 and a.shape == (3,)
    import ctypes
    assert a.data_ptr == ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value


def test_asarray_bytearray_is_writable_zero_copy():
    buf = bytearray(b"abc")
    a = dr.asarray(buf)
    assert not a.readonly
    a[0] = 65
    assert buf == bytearray(b"Abc")


def test_asarray_array_module():
    x = array.array("d", [1.0, 2.0])
    a = dr.asarray(x)
    assert a.dtype is dr.float64 and a.data_ptr == x.buffer_info()[0] and a.tolist() == [1.0, 2.0]
    i = dr.asarray(array.array("i", [1, -2]))
    assert i.dtype is dr.int32 and i.tolist() == [1, -2]


def test_asarray_numpy_zero_copy_and_copies():
    np = pytest.importorskip("numpy")
    n = np.arange(4.0)
    assert dr.asarray(n).data_ptr == n.ctypes.data
    assert dr.asarray(n, copy=False).data_ptr == n.ctypes.data
    c = dr.asarray(n, copy=True)
    assert c.data_ptr != n.ctypes.data and c.tolist() == [0.0, 1.0, 2.0, 3.0]
    f = dr.asarray(n, dtype="float32")
    assert f.dtype is dr.float32 and f.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(dr.CopyForbiddenError, match="converting float64 to float32 needs a copy"):
        dr.asarray(n, dtype="float32", copy=False)


def test_asarray_of_an_array():
    a = grid((2, 2))
    assert dr.asarray(a) is a
    assert dr.asarray(a, copy=False) is a
    c = dr.asarray(a, copy=True)
    assert c is not a and c.data_ptr != a.data_ptr and c.tolist() == a.tolist()
    f = dr.asarray(a, dtype="float64")
    assert f.dtype is dr.float64 and f.tolist() == [[0.0, 1.0], [2.0, 3.0]]


@pytest.mark.parametrize("obj, dtype", [
    (True, dr.bool), (3, dr.int64), (2.5, dr.float64), (1j, dr.complex128),
    ([True, False], dr.bool), ([1, 2], dr.int64), ([1, 2.0], dr.float64), ([1, 2j], dr.complex128),
    ([True, 1], dr.int64), ([], dr.float64), ([[1, 2], [3, 4]], dr.int64),
])
def test_asarray_infers_dtype(obj, dtype):
    a = dr.asarray(obj)
    assert a.dtype is dtype and a.tolist() == obj and not a.readonly


def test_asarray_nested_shape():
    a = dr.asarray([[[1], [2]], [[3], [4]]])
    assert a.shape == (2, 2, 1) and a.strides == (2, 1, 1)
    assert dr.asarray(((1, 2), (3, 4))).tolist() == [[1, 2], [3, 4]]


def test_asarray_ragged_is_a_value_error():
    with pytest.raises(ValueError, match=r"ragged nested sequence: sub-shapes \(1,\) and \(2,\) differ"):
        dr.asarray([[1], [2, 3]])


@pytest.mark.parametrize("obj", ["abc", object(), {1: 2}])
def test_asarray_unreadable_is_a_type_error(obj):
    with pytest.raises(TypeError, match=f"asarray cannot read an object of type {type(obj).__name__}"):
        dr.asarray(obj)


def test_asarray_dtype_conversion():
    assert dr.asarray([1, 2], dtype="float32").tolist() == [1.0, 2.0]
    assert dr.asarray([1.5], dtype=dr.bfloat16).tolist() == [1.5]
    assert dr.asarray(300, dtype="uint16").tolist() == 300
    with pytest.raises(OverflowError, match=r"300 is out of range for uint8 \[0, 255\]"):
        dr.asarray([300], dtype="uint8")
    with pytest.raises(TypeError, match="cannot store complex"):
        dr.asarray([1j], dtype="float64")


def test_asarray_copy_false_from_a_list_is_both_errors():
    with pytest.raises(ValueError) as as_value:
        dr.asarray([1, 2], copy=False)
    assert isinstance(as_value.value, BufferError)
    assert "copy=False, but an Array made from a list always needs a copy" in str(as_value.value)
    with pytest.raises(BufferError):
        dr.asarray(1.0, copy=False)


def test_asarray_copy_argument_type():
    with pytest.raises(TypeError, match="copy must be True, False or None, not 1"):
        dr.asarray([1], copy=1)


def test_asarray_copy_true_from_buffer():
    buf = bytearray(b"ab")
    a = dr.asarray(buf, copy=True)
    a[0] = 0
    assert buf == bytearray(b"ab") and a.data_ptr % 256 == 0


# --- empty / zeros ------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_DTYPES)
def test_zeros_and_empty_every_dtype(name):
    z = dr.zeros((5, 3), dtype=name)
    e = dr.empty((5, 3), dtype=dr.DTYPES[name])
    for a in (z, e):
        assert a.dtype is dr.DTYPES[name] and a.shape == (5, 3) and a.strides == (3, 1)
        assert a.data_ptr % 256 == 0 and a.device == dr.Device("cpu")
    zero = {"bool": False, "float8_e8m0fnu": 2.0 ** -127, "float4_e2m1fn_x2": (0.0, 0.0)}.get(name, 0)
    assert all(v == zero for row in z.tolist() for v in row)


def test_empty_defaults_and_shapes():
    assert dr.empty(4).dtype is dr.float64 and dr.empty(4).shape == (4,)
    assert dr.empty(()).shape == () and dr.empty([2, 0]).shape == (2, 0)
    assert dr.empty((3,), dtype="int8").data_ptr % 256 == 0


@pytest.mark.parametrize("shape, exc, message", [
    ((-1,), ValueError, r"negative dimension -1 in shape \(-1,\)"),
    ((2 ** 62, 4), ValueError, "more elements than fit in int64|needs more than 2\\*\\*63 bytes"),
    ("ab", TypeError, "shape entries must be ints"),
    ((1.5,), TypeError, "shape entries must be ints, got 1.5"),
    (None, TypeError, "shape must be an int or a sequence of ints, not NoneType"),
])
def test_empty_bad_shapes(shape, exc, message):
    with pytest.raises(exc, match=message):
        dr.empty(shape)


def test_empty_unknown_dtype():
    with pytest.raises(TypeError, match="unknown dtype name 'float128'"):
        dr.empty(3, dtype="float128")


def test_array_cannot_be_constructed_or_pickled():
    with pytest.raises(TypeError, match="Array cannot be created directly"):
        dr.Array()
    import pickle
    with pytest.raises(TypeError, match="Array does not pickle"):
        pickle.dumps(dr.zeros(2))


def test_array_claims_no_array_api_namespace():
    """dlpack_ref is not an array API namespace, so the Array does not claim one
    (array-api-compat is the oracle of what claiming means)."""
    compat = pytest.importorskip("array_api_compat")
    a = dr.zeros(3)
    assert not hasattr(a, "__array_namespace__")
    assert not compat.is_array_api_obj(a)
    with pytest.raises(TypeError):
        compat.array_namespace(a)
