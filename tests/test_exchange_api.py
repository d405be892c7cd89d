"""The DLPack 1.3 C exchange API: dlpack-ref's table (producer side, every
function called through ctypes) and the consumer's use of other types'
tables (lookup on the type, per-type cache, version walk, fallback)."""

import ctypes
import gc
import sys
import threading

import numpy as np
import pytest

import dlpack_ref
from dlpack_ref import Array
from dlpack_ref.testing import (
    ALLOCATOR_T, DELETER_T, FROM_PY_T, NAME_EXCHANGE_API, NAME_USED_VERSIONED, NAME_VERSIONED, SET_ERROR_T, STREAM_T,
    TO_PY_T, VIEW_T, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader, DLTensor, c_api,
    capsule_name,
)

READ_ONLY, IS_COPIED, SUBBYTE_PADDED = 1, 2, 4
KDLCPU, KDLOPENCL = 1, 4

# A table function written in Python (a callback C calls with the GIL held).
FROM_PY_CALLBACK_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))

_PyCapsule_GetPointer = c_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_PyCapsule_SetName = c_api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_PyCapsule_New = c_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_Py_DecRef = c_api("Py_DecRef", None, ctypes.c_void_p)


def our_table() -> DLPackExchangeAPI:
    cap = Array.__dict__["__dlpack_c_exchange_api__"]
    return DLPackExchangeAPI.from_address(_PyCapsule_GetPointer(cap, NAME_EXCHANGE_API))


def float32_array(n=6, *, readonly=False):
    x = np.arange(n, dtype=np.float32)
    x.flags.writeable = not readonly
    return dlpack_ref.from_dlpack(x)


def take_object(address: int):
    """The object behind a new reference returned through a void** (the
    reference handed to us is released: we keep our own)."""
    obj = ctypes.cast(address, ctypes.py_object).value
    _Py_DecRef(address)
    return obj


def call_deleter(m: DLManagedTensorVersioned):
    DELETER_T(m.deleter)(ctypes.addressof(m))


# --- the published table ---------------------------------------------------

def test_table_is_a_type_attribute_capsule_named_dlpack_exchange_api():
    cap = Array.__dict__["__dlpack_c_exchange_api__"]
    assert capsule_name(cap) == NAME_EXCHANGE_API
    assert float32_array().__dlpack_c_exchange_api__ is cap


def test_table_header_is_version_1_3_with_no_previous_table():
    api = our_table()
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api
    assert dlpack_ref.exchange_api_version(Array) == (1, 3)


def test_every_function_of_the_table_is_filled_in():
    api = our_table()
    for name, _ in DLPackExchangeAPI._fields_[1:]:
        assert getattr(api, name), f"{name} is NULL"


# --- managed_tensor_allocator ----------------------------------------------

def allocate(shape, dtype=(2, 32, 1), device=(KDLCPU, 0), set_error=None):
    shape_c = (ctypes.c_int64 * len(shape))(*shape)
    proto = DLTensor(data=None, ndim=len(shape), shape=ctypes.addressof(shape_c), strides=None)
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = dtype
    proto.device.device_type, proto.device.device_id = device
    out = ctypes.c_void_p(0)
    errors = []
    callback = SET_ERROR_T(lambda ctx, kind, msg: errors.append((ctx, kind, msg)))
    rc = ALLOCATOR_T(our_table().managed_tensor_allocator)(
        ctypes.byref(proto), ctypes.byref(out), 1234, callback if set_error is None else set_error)
    return rc, out.value, errors


def test_allocator_makes_a_c_contiguous_cpu_tensor_like_the_prototype():
    rc, address, errors = allocate((2, 3))
    assert (rc, errors) == (0, [])
    m = DLManagedTensorVersioned.from_address(address)
    t = m.dl_tensor
    assert (m.version.major, m.version.minor, m.flags) == (1, 3, 0)
    assert (t.device.device_type, t.device.device_id, t.ndim) == (KDLCPU, 0, 2)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)
    assert tuple((ctypes.c_int64 * 2).from_address(t.shape)) == (2, 3)
    assert tuple((ctypes.c_int64 * 2).from_address(t.strides)) == (3, 1)
    assert t.data and t.data % 256 == 0 and t.byte_offset == 0
    # The memory is usable: write through it, then free it with its deleter.
    ctypes.memmove(t.data, np.arange(6, dtype=np.float32).tobytes(), 24)
    a = take_object(_to_py_object(address))
    assert a.data_ptr == t.data and a.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_allocator_marks_sub_byte_tensors_as_padded():
    rc, address, _ = allocate((5,), dtype=(17, 4, 1))  # float4_e2m1fn
    assert rc == 0
    m = DLManagedTensorVersioned.from_address(address)
    assert m.flags == SUBBYTE_PADDED
    call_deleter(m)


@pytest.mark.parametrize("dtype, device, kind, words", [
    ((2, 12, 1), (KDLCPU, 0), b"BufferError", "DLDataType(code=2, bits=12"),
    ((2, 32, 1), (KDLOPENCL, 0), b"BufferError", "cannot allocate memory"),
])
def test_allocator_reports_a_bad_prototype_through_set_error(dtype, device, kind, words):
    rc, address, errors = allocate((4,), dtype=dtype, device=device)
    assert rc == -1 and address is None
    assert len(errors) == 1
    ctx, got_kind, message = errors[0]
    assert (ctx, got_kind) == (1234, kind)
    assert words in message.decode()


def test_allocator_reports_a_negative_extent_as_value_error():
    rc, _, errors = allocate((2, -1))
    assert rc == -1 and errors[0][1] == b"ValueError" and b"negative dimension -1" in errors[0][2]


@pytest.mark.parametrize("ndim, null_shape", [(-1, False), (65, False), (2, True)])
def test_allocator_refuses_a_malformed_prototype_through_set_error(ndim, null_shape):
    shape_c = (ctypes.c_int64 * 1)(4)
    proto = DLTensor(data=None, ndim=ndim, shape=None if null_shape else ctypes.addressof(shape_c), strides=None)
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = (2, 32, 1)
    proto.device.device_type, proto.device.device_id = (KDLCPU, 0)
    out = ctypes.c_void_p(0)
    errors = []
    callback = SET_ERROR_T(lambda ctx, kind, msg: errors.append((kind, msg)))
    rc = ALLOCATOR_T(our_table().managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(out), None, callback)
    assert rc == -1 and out.value is None
    assert errors == [(b"ValueError", b"the allocator's prototype must be a DLTensor with 0 to 64 dimensions and a shape")]


def test_allocator_without_set_error_still_fails_cleanly():
    rc, address, _ = allocate((4,), dtype=(2, 12, 1), set_error=SET_ERROR_T())
    assert rc == -1 and address is None


# --- managed_tensor_from_py_object_no_sync ---------------------------------

def _from_py_object(obj) -> int:
    out = ctypes.c_void_p(0)
    assert FROM_PY_T(our_table().managed_tensor_from_py_object_no_sync)(id(obj), ctypes.byref(out)) == 0
    return out.value


@pytest.mark.parametrize("readonly", [False, True])
def test_from_py_object_exports_the_array_zero_copy(readonly):
    a = float32_array(readonly=readonly)[1:5:2]
    refs = sys.getrefcount(a)
    m = DLManagedTensorVersioned.from_address(_from_py_object(a))
    t = m.dl_tensor
    assert (m.version.major, m.version.minor) == (1, 3)
    assert m.flags == (READ_ONLY if readonly else 0)
    assert t.data == a.data_ptr and t.byte_offset == 0
    assert tuple((ctypes.c_int64 * 1).from_address(t.shape)) == (2,)
    assert tuple((ctypes.c_int64 * 1).from_address(t.strides)) == (2,)
    assert m.manager_ctx == id(a) and sys.getrefcount(a) == refs + 1
    call_deleter(m)
    assert sys.getrefcount(a) == refs


def test_from_py_object_of_memory_allocated_here_holds_a_count_not_the_array():
    # Host memory dlpack-ref allocated is owned by a C reference count: the
    # table's export holds a count of it, and its deleter (called here on a
    # thread without the GIL: ctypes releases it) only gives the count back.
    from dlpack_ref._dlpack_ref import _host_memory_holders
    a = dlpack_ref.asarray(np.arange(6, dtype=np.float32), copy=True)
    refs = sys.getrefcount(a)
    m = DLManagedTensorVersioned.from_address(_from_py_object(a[1:5:2]))
    assert m.dl_tensor.data == a.data_ptr + 4 and m.manager_ctx != id(a)
    assert sys.getrefcount(a) == refs and _host_memory_holders(a) == 2
    call_deleter(m)
    assert _host_memory_holders(a) == 1


def test_from_py_object_refuses_other_objects_with_type_error():
    with pytest.raises(TypeError, match="exports Array objects, not ndarray"):
        _from_py_object(np.zeros(3))


# --- managed_tensor_to_py_object_no_sync -----------------------------------

def _to_py_object(address: int) -> int:
    out = ctypes.c_void_p(0)
    assert TO_PY_T(our_table().managed_tensor_to_py_object_no_sync)(address, ctypes.byref(out)) == 0
    return out.value


def take_tensor(capsule) -> int:
    """Take ownership of the managed tensor of a versioned capsule."""
    address = _PyCapsule_GetPointer(capsule, NAME_VERSIONED)
    _PyCapsule_SetName(capsule, NAME_USED_VERSIONED)
    return address


def test_to_py_object_takes_ownership_and_deletes_once(factory):
    cap = factory.make(shape=(2, 3), dtype=(2, 32, 1), flags=READ_ONLY)
    a = take_object(_to_py_object(take_tensor(cap)))
    assert type(a) is Array and a.shape == (2, 3) and a.readonly
    assert a.data_ptr == factory.last_data
    assert factory.deleter_calls == 0
    del a, cap
    gc.collect()
    assert factory.deleter_calls == 1


def test_to_py_object_rejects_an_invalid_tensor_and_deletes_it_once(factory):
    cap = factory.make(shape=(2,), dtype=(2, 12, 1))
    with pytest.raises(BufferError, match="unsupported DLDataType"):
        _to_py_object(take_tensor(cap))
    gc.collect()
    assert factory.deleter_calls == 1


# --- dltensor_from_py_object_no_sync ---------------------------------------

def test_dltensor_view_borrows_the_arrays_own_metadata():
    a = float32_array(12)[::3]
    refs = sys.getrefcount(a)
    t = DLTensor()
    assert VIEW_T(our_table().dltensor_from_py_object_no_sync)(id(a), ctypes.byref(t)) == 0
    assert (t.data, t.ndim, t.byte_offset) == (a.data_ptr, 1, 0)
    assert (t.device.device_type, t.device.device_id) == (KDLCPU, 0)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)
    # No allocation: shape and strides point inside the Array object itself.
    assert id(a) <= t.shape < t.strides < id(a) + sys.getsizeof(a)
    assert tuple((ctypes.c_int64 * 1).from_address(t.shape)) == (4,)
    assert tuple((ctypes.c_int64 * 1).from_address(t.strides)) == (3,)
    assert sys.getrefcount(a) == refs


def test_dltensor_view_refuses_other_objects_with_type_error():
    not_an_array = []  # kept alive: the function borrows it by address
    with pytest.raises(TypeError, match="views Array objects, not list"):
        VIEW_T(our_table().dltensor_from_py_object_no_sync)(id(not_an_array), ctypes.byref(DLTensor()))


def test_current_work_stream_on_cpu_is_null():
    stream = ctypes.c_void_p(1234)
    assert STREAM_T(our_table().current_work_stream)(KDLCPU, 0, ctypes.byref(stream)) == 0
    assert stream.value is None


# --- consumer: foreign tables ------------------------------------------------

class Table:
    """A DLPack exchange table written in Python: managed_tensor_from_py_object
    exports obj.inner (an Array) with dlpack-ref's own function and counts
    its calls. ``prev`` links an older table; ``major`` sets the header."""

    def __init__(self, major=1, minor=3, prev=None, from_py=True, name=NAME_EXCHANGE_API):
        # One entry per call: list.append is atomic without the GIL, `+= 1` is not.
        self._call_log = []
        self.prev = prev
        self._callback = FROM_PY_CALLBACK_T(self._from_py)
        self.struct = DLPackExchangeAPI()
        self.struct.header.version.major, self.struct.header.version.minor = major, minor
        if prev is not None:
            self.struct.header.prev_api = ctypes.cast(ctypes.pointer(prev.struct), ctypes.POINTER(DLPackExchangeAPIHeader))
        if from_py:
            self.struct.managed_tensor_from_py_object_no_sync = ctypes.cast(self._callback, ctypes.c_void_p).value
        self._name = ctypes.c_char_p(name)
        self.capsule = _PyCapsule_New(ctypes.addressof(self.struct), self._name, None)

    @property
    def calls(self):
        return len(self._call_log)

    def _from_py(self, py_object, out):
        self._call_log.append(None)
        inner = ctypes.cast(py_object, ctypes.py_object).value.inner
        return FROM_PY_T(our_table().managed_tensor_from_py_object_no_sync)(id(inner), out)

    def producer_type(self, attribute=None, device=None):
        """A new type publishing this table; its __dlpack__ forwards to the
        inner Array and records its calls in the instance; ``device``, when
        given, is its __dlpack_device__ (a function of no argument)."""
        def __init__(self, inner):
            self.inner = inner
            self.dunder_calls = 0

        def __dlpack__(self, **kwargs):
            self.dunder_calls += 1
            return self.inner.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.inner.__dlpack_device__() if device is None else device()

        return type("Producer", (), {
            "__init__": __init__, "__dlpack__": __dlpack__, "__dlpack_device__": __dlpack_device__,
            "__dlpack_c_exchange_api__": self.capsule if attribute is None else attribute})


def test_consumer_uses_the_table_instead_of_dunder_dlpack():
    table = Table()
    inner = float32_array()
    x = table.producer_type()(inner)
    a = dlpack_ref.from_dlpack(x)
    assert a.data_ptr == inner.data_ptr and a.tolist() == inner.tolist()
    assert (table.calls, x.dunder_calls) == (1, 0)
    assert dlpack_ref.exchange_api_version(type(x)) == (1, 3)


def test_consumer_walks_prev_api_from_another_major_version():
    old = Table(1, 1)
    new = Table(2, 0, prev=old)
    x = new.producer_type()(float32_array())
    a = dlpack_ref.from_dlpack(x)
    assert a.data_ptr == x.inner.data_ptr
    assert (new.calls, old.calls, x.dunder_calls) == (0, 1, 0)
    assert dlpack_ref.exchange_api_version(type(x)) == (1, 1)


@pytest.mark.parametrize("table, attribute", [
    (Table(2, 0), None),                      # another major, nothing older
    (Table(3, 0, prev=Table(2, 5)), None),    # no 1.x anywhere in the chain
    (Table(from_py=False), None),             # the function needed is NULL
    (Table(name=b"not_an_exchange_api"), None),
    (Table(), 12345),                         # not a capsule
], ids=["major-2", "chain-without-1.x", "null-function", "wrong-name", "not-a-capsule"])
def test_consumer_falls_back_to_dunder_dlpack_for_an_unusable_table(table, attribute):
    x = table.producer_type(attribute)(float32_array())
    a = dlpack_ref.from_dlpack(x)
    assert a.data_ptr == x.inner.data_ptr
    assert (table.calls, x.dunder_calls) == (0, 1)
    assert dlpack_ref.exchange_api_version(type(x)) is None


@pytest.mark.parametrize("kwargs", [{"copy": True}, {"copy": False}, {"device": "cpu"}])
def test_consumer_calls_dunder_dlpack_when_a_device_or_copy_is_asked_for(kwargs):
    table = Table()
    x = table.producer_type()(float32_array())
    a = dlpack_ref.from_dlpack(x, **kwargs)
    assert (table.calls, x.dunder_calls) == (0, 1)
    assert (a.data_ptr != x.inner.data_ptr) == bool(kwargs.get("copy"))


def _raises_value_error():
    raise ValueError("no device for this tensor")


# What paddle 3.3's __dlpack_device__ returns, and other answers the plain
# path never sees when the table gives the tensor.
UNUSABLE_DEVICE_ANSWERS = {"(kDLCPU, None)": lambda: (1, None), "a string": lambda: "cpu",
                           "ValueError": _raises_value_error}
EVERY_REQUEST = [{}, {"copy": True}, {"copy": False}, {"device": "cpu"}, {"device": (1, 0), "copy": True},
                 {"device": "cpu", "copy": False}]


@pytest.mark.parametrize("kwargs", EVERY_REQUEST, ids=str)
@pytest.mark.parametrize("answer", sorted(UNUSABLE_DEVICE_ANSWERS))
def test_every_request_accepts_a_producer_whose_table_gives_its_tensor_whatever_its_device_answer(answer, kwargs):
    # The plain path takes the tensor through the table and never asks
    # __dlpack_device__; the table's DLTensor.device is then the device on
    # every path, and the copy asked for is made here.
    table = Table()
    x = table.producer_type(device=UNUSABLE_DEVICE_ANSWERS[answer])(float32_array())
    a = dlpack_ref.from_dlpack(x, **kwargs)
    assert a.tolist() == x.inner.tolist() and a.device == dlpack_ref.Device("cpu")
    assert (a.data_ptr != x.inner.data_ptr) == bool(kwargs.get("copy"))
    assert (table.calls, x.dunder_calls) == (1, 0)


@pytest.mark.parametrize("kwargs", EVERY_REQUEST, ids=str)
def test_every_request_accepts_a_tableless_producer_whatever_its_device_answer_through_dunder_dlpack(kwargs):
    table = Table(from_py=False)   # no usable table: the plain request is __dlpack__
    x = table.producer_type(device=UNUSABLE_DEVICE_ANSWERS["(kDLCPU, None)"])(float32_array())
    a = dlpack_ref.from_dlpack(x, **kwargs)
    assert a.tolist() == x.inner.tolist() and a.device == dlpack_ref.Device("cpu")
    assert (a.data_ptr != x.inner.data_ptr) == bool(kwargs.get("copy"))
    assert (table.calls, x.dunder_calls) == (0, 1)


def test_consumer_looks_the_table_up_once_per_type():
    table = Table()
    cls = table.producer_type()
    dlpack_ref.from_dlpack(cls(float32_array()))
    # The entry is written once: later changes to the type are not seen, and
    # the cache keeps the capsule alive.
    cls.__dlpack_c_exchange_api__ = None
    x = cls(float32_array())
    assert dlpack_ref.from_dlpack(x).data_ptr == x.inner.data_ptr
    assert (table.calls, x.dunder_calls) == (2, 0)


def test_consumer_table_lookup_is_safe_from_many_threads():
    table = Table()
    cls = table.producer_type()
    inner = float32_array()
    barrier = threading.Barrier(8)
    results, errors = [], []

    def work():
        barrier.wait()
        try:
            for _ in range(50):
                results.append(dlpack_ref.from_dlpack(cls(inner)).data_ptr)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [inner.data_ptr] * 400 and table.calls == 400


def test_an_error_of_the_table_gives_dunder_dlpacks_answer():
    # A type borrowing dlpack-ref's table for objects it cannot export: the
    # table's TypeError is dropped and __dlpack__ answers (tests/test_hostile.py
    # has the other ways a table fails).
    def refuse(self, **kwargs):
        raise BufferError("refused by __dlpack__")

    cls = type("Borrower", (), {"__dlpack_c_exchange_api__": Array.__dlpack_c_exchange_api__,
                                "__dlpack__": refuse, "__dlpack_device__": lambda self: (1, 0)})
    assert dlpack_ref.exchange_api_version(cls) == (1, 3)
    with pytest.raises(BufferError, match="refused by __dlpack__"):
        dlpack_ref.from_dlpack(cls())


def test_an_array_subclass_is_exported_through_the_inherited_table():
    class Sub(Array):
        def __init__(self):
            pass

    assert dlpack_ref.exchange_api_version(Sub) == (1, 3)


# --- consumer: other libraries ----------------------------------------------

def test_torch_tensor_is_imported_through_torchs_table():
    torch = pytest.importorskip("torch")
    assert dlpack_ref.exchange_api_version(torch.Tensor) == (1, 3)

    calls = []

    class Counting(torch.Tensor):
        pass

    original = torch.Tensor.__dlpack__
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).as_subclass(Counting)
    # The table, not __dlpack__, exports it: __dlpack__ is not called.
    torch.Tensor.__dlpack__ = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    try:
        assert dlpack_ref.exchange_api_version(Counting) == (1, 3)
        a = dlpack_ref.from_dlpack(t)
    finally:
        torch.Tensor.__dlpack__ = original
    assert calls == []
    del a
    gc.collect()
    refs = sys.getrefcount(t)
    a = dlpack_ref.from_dlpack(t)
    assert a.data_ptr == t.data_ptr() and a.shape == (2, 3) and a.strides == (3, 1)
    assert a.tolist() == [[0, 1, 2], [3, 4, 5]]
    del a
    gc.collect()
    assert sys.getrefcount(t) == refs


@pytest.mark.parametrize("kwargs", EVERY_REQUEST, ids=str)
def test_a_torch_tensor_with_paddles_device_answer_is_taken_on_every_path(kwargs):
    # torch's own table, with the answer paddle 3.3 gives: every request
    # agrees with the plain one, and a copy is a copy of torch's values.
    torch = pytest.importorskip("torch")

    class Unplaced(torch.Tensor):
        def __dlpack_device__(self):
            return (1, None)

    t = torch.arange(6, dtype=torch.float64).as_subclass(Unplaced)
    a = dlpack_ref.from_dlpack(t, **kwargs)
    assert a.tolist() == torch.Tensor.tolist(t) and a.device == dlpack_ref.Device("cpu")
    assert (a.data_ptr != t.data_ptr()) == bool(kwargs.get("copy"))


def test_torch_conjugate_view_is_never_imported_with_wrong_values():
    """torch 2.13's table exports a conjugate view unconjugated; the fast path
    must give what __dlpack__ gives: its BufferError, the deleter run."""
    torch = pytest.importorskip("torch")
    c = torch.tensor([1 + 2j, 3 - 4j]).conj()
    refs = sys.getrefcount(c)
    with pytest.raises(BufferError, match="conjugate bit") as through_dlpack:
        c.__dlpack__(max_version=(1, 3))
    with pytest.raises(BufferError, match="conjugate bit") as through_table:
        dlpack_ref.from_dlpack(c)
    assert str(through_table.value) == str(through_dlpack.value)
    del through_dlpack, through_table  # their tracebacks hold c
    gc.collect()
    assert sys.getrefcount(c) == refs
    # The fallback is asked only for complex data: resolved views and the
    # real (negated) view of the imaginary part keep the fast path and the
    # producer's values.
    assert dlpack_ref.from_dlpack(c.resolve_conj()).tolist() == [1 - 2j, 3 + 4j]
    r = torch.tensor([1.0, 2.0])
    assert dlpack_ref.from_dlpack(r).data_ptr == r.data_ptr()


def test_exchange_fast_path_falls_back_when_is_conj_fails():
    torch = pytest.importorskip("torch")

    class Odd(torch.Tensor):
        def is_conj(self):
            raise RuntimeError("no answer")

    z = torch.tensor([1 + 2j]).as_subclass(Odd)
    assert dlpack_ref.exchange_api_version(Odd) == (1, 3)
    # The table never calls is_conj; torch's __dlpack__ does, so this error
    # proves the import went through __dlpack__, as for any table failure.
    with pytest.raises(RuntimeError, match="no answer"):
        dlpack_ref.from_dlpack(z)
    assert dlpack_ref.from_dlpack(torch.tensor([1 + 2j]).as_subclass(Odd).real).tolist() == [1.0]


def test_tvm_ffi_imports_an_array_through_our_table():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    # A read-only Array cannot be exported as the legacy capsule that tvm-ffi's
    # __dlpack__ fallback asks for, so success proves the table was used.
    a = float32_array(readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        a.__dlpack__()
    refs = sys.getrefcount(a)
    t = tvm_ffi.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr and tuple(t.shape) == (6,)
    assert sys.getrefcount(a) == refs + 1
    del t
    gc.collect()
    assert sys.getrefcount(a) == refs


def test_tvm_ffi_calls_the_table_of_the_type():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    table = Table()
    x = table.producer_type()(float32_array())
    t = tvm_ffi.from_dlpack(x)
    assert t.data_ptr() == x.inner.data_ptr
    assert (table.calls, x.dunder_calls) == (1, 0)


def test_cuda_core_strided_memory_view_reads_an_array():
    pytest.importorskip("cuda.core")
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError as exc:
        pytest.skip(f"cuda.core has no StridedMemoryView: {exc}")
    # cuda.core publishes no table; for host memory its from_dlpack asks
    # __dlpack__ for a versioned capsule, which keeps the read-only flag.
    a = float32_array(readonly=True)
    view = StridedMemoryView.from_dlpack(a, stream_ptr=-1)
    assert view.ptr == a.data_ptr and view.shape == (6,) and view.readonly


# --- a foreign table that fails in every way a table can -----------------------
# (tests/support/hostile_table.c). A failing export falls back to __dlpack__;
# a failing current_work_stream is a BufferError naming the type and the
# function; either way the tensor the table handed out is freed exactly once
# and nothing ends in SystemError (docs/exchange_api.md).

from support import cudatest  # noqa: E402
from support import hostile_table  # noqa: E402


@pytest.fixture(scope="module")
def hostile_lib(tmp_path_factory):
    return hostile_table.build(tmp_path_factory.mktemp("hostile_table"))


def _hostile_producer(lib, inner, device=(KDLCPU, 0)):
    calls = []

    def dunder(self, **kwargs):
        calls.append(kwargs)
        return inner.__dlpack__(**kwargs)

    return hostile_table.publishing_type(hostile_table.table(lib), dunder, device), calls


def _producer_with_table(lib, factory, inner, behaviour):
    """_hostile_producer of ``inner`` whose table hands out a tensor of
    ``factory`` and then behaves as ``behaviour`` (hostile_table's codes)."""
    cls, calls = _hostile_producer(lib, inner)
    lib.hostile_set(take_tensor(factory.make(shape=(2,))), behaviour, 0, 0, 0)
    return cls, calls


@pytest.mark.parametrize("failure", sorted(hostile_table.FAILURES))
def test_a_failing_table_export_falls_back_and_frees_the_tensor_it_handed_out(hostile_lib, factory, failure):
    inner = dlpack_ref.asarray([1.0, 2.0, 3.0])
    cls, calls = _producer_with_table(hostile_lib, factory, inner, hostile_table.FAILURES[failure])
    a = dlpack_ref.from_dlpack(cls())
    assert a.data_ptr == inner.data_ptr and a.tolist() == [1.0, 2.0, 3.0]
    assert calls == [{"max_version": (1, 3)}]
    gc.collect()
    assert factory.deleter_calls == 1


@pytest.mark.parametrize("failure", sorted(hostile_table.FAILURES))
def test_an_unusable_device_answer_takes_the_plain_request_past_a_failing_table(hostile_lib, factory, failure):
    # The table fails (its tensor freed once), __dlpack__ gives the plain
    # request's tensor, which is copied here as asked.
    inner = dlpack_ref.asarray([1.0, 2.0])
    base, calls = _producer_with_table(hostile_lib, factory, inner, hostile_table.FAILURES[failure])
    cls = type("Unplaced", (base,), {"__dlpack_device__": lambda self: _raises_value_error()})
    a = dlpack_ref.from_dlpack(cls(), copy=True)
    assert a.tolist() == [1.0, 2.0] and a.data_ptr != inner.data_ptr
    assert calls == [{"max_version": (1, 3)}]
    gc.collect()
    assert factory.deleter_calls == 1


def test_a_keyboardinterrupt_from_a_table_is_not_a_fallback_and_the_tensor_is_freed_once(hostile_lib, factory):
    # A table's failure falls back to __dlpack__ and drops its error; an
    # exception that is no Exception (Ctrl-C reaching the table's code) is
    # the user's and propagates.
    inner = dlpack_ref.asarray([1.0])
    cls, calls = _producer_with_table(hostile_lib, factory, inner, hostile_table.INTERRUPT_WITH_MINUS_ONE)
    with pytest.raises(KeyboardInterrupt):
        dlpack_ref.from_dlpack(cls())
    assert calls == []
    gc.collect()
    assert factory.deleter_calls == 1


def test_a_working_hostile_table_is_used(hostile_lib, factory):
    inner = dlpack_ref.asarray([1.0])
    cls, calls = _producer_with_table(hostile_lib, factory, inner, hostile_table.WORKS)
    a = dlpack_ref.from_dlpack(cls())
    assert a.data_ptr == factory.last_data and calls == []
    del a
    gc.collect()
    assert factory.deleter_calls == 1


CWS_MESSAGES = {
    "silent -1": "returned -1 without setting an exception",
    "silent 7": "returned 7 without setting an exception",
    "error with 0": "returned 0 but set RuntimeError: hostile current_work_stream",
}


@pytest.mark.cuda
@pytest.mark.parametrize("failure", sorted(hostile_table.FAILURES))
def test_a_failing_current_work_stream_is_refused_and_frees_the_tensor_once(
        hostile_lib, factory, sim, failure):
    inner = dlpack_ref.asarray([1.0])
    cls, calls = _hostile_producer(hostile_lib, inner, device=(2, 0))
    hostile_lib.hostile_set(take_tensor(factory.make(shape=(2,), device=(2, 0))), hostile_table.WORKS,
                            hostile_table.FAILURES[failure], 0, 0)
    with pytest.raises(Exception) as info:
        dlpack_ref.from_dlpack(cls())
    if failure == "error with -1":
        # The header's own failure: the producer's exception, as it is.
        assert type(info.value) is RuntimeError and str(info.value) == "hostile current_work_stream"
    else:
        assert type(info.value) is BufferError
        assert str(info.value) == ("the DLPack exchange API of Hostile failed in current_work_stream: "
                                   + CWS_MESSAGES[failure])
        assert type(info.value.__cause__) is (RuntimeError if failure == "error with 0" else type(None))
    assert calls == []
    del info
    gc.collect()
    assert factory.deleter_calls == 1


@pytest.mark.skipif(cudatest.unavailable() is not None, reason="needs the CUDA driver (real or simulated) and cuda-python")
@pytest.mark.cuda
def test_a_working_current_work_stream_imports_cuda_data_in_place(hostile_lib, factory, sim):
    inner = dlpack_ref.asarray([1.0])
    cls, calls = _hostile_producer(hostile_lib, inner, device=(2, 0))
    hostile_lib.hostile_set(take_tensor(factory.make(shape=(2,), device=(2, 0))), hostile_table.WORKS,
                            hostile_table.WORKS, 0, 0)
    a = dlpack_ref.from_dlpack(cls())
    assert a.data_ptr == factory.last_data and a.device == dlpack_ref.Device("cuda:0") and calls == []
    del a
    gc.collect()
    assert factory.deleter_calls == 1


# --- a table filled by the header (a Cython adopter, the core) -------------------

TABLE_PROBE = r"""
#include <Python.h>
#include "dlpack_ref.h"

static int alloc_fn(DLTensor* p, DLManagedTensorVersioned** o, void* c, void (*e)(void*, const char*, const char*)) {
    (void)p; (void)o; (void)c; (void)e; return 0;
}
static int from_fn(void* obj, DLManagedTensorVersioned** out) { (void)obj; (void)out; return 0; }
static int to_fn(DLManagedTensorVersioned* t, void** out) { (void)t; (void)out; return 0; }
static int view_fn(void* obj, DLTensor* out) { (void)obj; (void)out; return 0; }
static int stream_fn(DLDeviceType t, int32_t id, void** out) { (void)t; (void)id; (void)out; return 0; }

/* filled(): what dlpack_ref_exchange_table_init writes over a table of garbage. */
static PyObject* filled(PyObject* self, PyObject* unused) {
    DLPackExchangeAPI table;
    (void)self; (void)unused;
    memset(&table, 0xAB, sizeof table);
    dlpack_ref_exchange_table_init(&table, alloc_fn, from_fn, to_fn, view_fn, stream_fn);
    return Py_BuildValue("(IIiiiiii)", (unsigned)table.header.version.major, (unsigned)table.header.version.minor,
                         table.header.prev_api == NULL, table.managed_tensor_allocator == alloc_fn,
                         table.managed_tensor_from_py_object_no_sync == from_fn,
                         table.managed_tensor_to_py_object_no_sync == to_fn,
                         table.dltensor_from_py_object_no_sync == view_fn, table.current_work_stream == stream_fn);
}

static PyMethodDef methods[] = {{"filled", filled, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
"""


def test_the_header_fills_a_table_written_out_by_hand(tmp_path):
    # dlpack_ref_exchange_table_init: the one place a table's header (1.3,
    # prev_api NULL) and five functions are written, for the core and the
    # Cython adopter, whose functions are their own.
    from support.build_ext import load_c_probe

    probe = load_c_probe("table_probe", TABLE_PROBE, tmp_path, c_include=[dlpack_ref.get_include()])
    assert probe.filled() == (*dlpack_ref.DLPACK_VERSION, 1, 1, 1, 1, 1, 1)
