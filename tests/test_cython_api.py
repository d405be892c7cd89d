"""The Cython API (dlpack_ref_api.pxd, shipped in get_include()): a small
extension, tests/cython_api_ext/api_demo.pyx, is compiled against the
installed package and exchanges arrays with dlpack-ref, NumPy and PyTorch
in both directions."""

import ctypes
import gc
import os
import sys

import numpy as np
import pytest

import dlpack_ref
from dlpack_ref.testing import capsule_name
from support.build_ext import build_api_demo



@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    return build_api_demo(tmp_path_factory.mktemp("cython_api"))


def test_get_include_ships_the_headers_and_both_pxd_files():
    names = set(os.listdir(dlpack_ref.get_include()))
    assert {"dlpack.h", "dlpack_ref.h", "dlpack.pxd", "dlpack_ref_api.pxd", "dlpack_ref_tables.h"} <= names


# --- export: the extension's memory into other libraries ---------------------

def test_export_versioned_is_zero_copy_and_keeps_the_owner_alive(ext):
    freed = ext.freed
    cap, buf = ext.export(2, 3)
    address = buf.address
    a = dlpack_ref.from_dlpack(cap)
    assert capsule_name(cap) == b"used_dltensor_versioned"
    assert a.data_ptr == address and a.shape == (2, 3) and a.strides == (3, 1)
    assert a.tolist() == [[0, 1.5, 3], [4.5, 6, 7.5]]
    del cap, buf
    gc.collect()
    assert ext.freed == freed            # the Array still holds the memory
    del a
    gc.collect()
    assert ext.freed == freed + 1


def test_export_into_numpy_carries_read_only_and_strides(ext):
    cap, buf = ext.export(2, 3, read_only=True, transposed=True)
    x = np.from_dlpack(_Once(cap))
    assert x.ctypes.data == buf.address and x.shape == (3, 2) and x.strides == (8, 24)
    assert not x.flags.writeable
    assert x.tolist() == [[0, 4.5], [1.5, 6], [3, 7.5]]


def test_export_legacy_is_read_by_dlpack_ref(ext):
    cap, buf = ext.export(1, 4, versioned=False)
    assert capsule_name(cap) == b"dltensor"
    a = dlpack_ref.from_dlpack(cap)
    assert a.data_ptr == buf.address and a.tolist() == [[0, 1.5, 3, 4.5]]


def test_an_unconsumed_export_frees_its_owner_when_dropped(ext):
    freed = ext.freed
    cap, buf = ext.export(2, 2)
    del buf
    gc.collect()
    assert ext.freed == freed
    del cap
    gc.collect()
    assert ext.freed == freed + 1


class _Once:
    """A producer returning a prepared capsule (NumPy asks producers, not capsules)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


# --- import: other libraries' arrays into the extension -----------------------

def test_import_of_an_array_is_zero_copy_and_releases_it(ext):
    a = dlpack_ref.asarray(np.arange(6, dtype=np.float64).reshape(2, 3))
    refs = sys.getrefcount(a)
    data, shape, strides, dtype, flags, versioned = ext.describe(a)
    assert (data, shape, strides, dtype, flags, versioned) == (a.data_ptr, (2, 3), (3, 1), (2, 64, 1), 0, True)
    gc.collect()
    assert sys.getrefcount(a) == refs


@pytest.mark.parametrize("make", [
    lambda x: x,
    lambda x: dlpack_ref.from_dlpack(x),
    lambda x: x.__dlpack__(max_version=(1, 3)),
    lambda x: x.__dlpack__(),
], ids=["ndarray", "Array", "versioned-capsule", "legacy-capsule"])
def test_import_walks_strides_of_any_producer(ext, make):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
    assert ext.total(make(x)) == x.sum()


def test_import_of_a_torch_tensor_uses_its_table(ext):
    torch = pytest.importorskip("torch")

    class Plain(torch.Tensor):
        pass

    t = torch.arange(6, dtype=torch.float64).reshape(2, 3).as_subclass(Plain)
    assert ext.total(t) == 15
    assert ext.describe(t)[0] == t.data_ptr()


def test_import_calls_an_override_of_dunder_dlpack_instead_of_the_table(ext):
    torch = pytest.importorskip("torch")

    class Refusing(torch.Tensor):
        def __dlpack__(self, *args, **kwargs):
            raise BufferError("refused by the override")

    t = torch.arange(3, dtype=torch.float64).as_subclass(Refusing)
    with pytest.raises(BufferError, match="refused by the override"):
        ext.total(t)


def test_to_array_hands_the_tensor_to_dlpack_ref(ext):
    x = np.arange(4.0).reshape(2, 2)
    a = ext.to_array(x)
    assert type(a) is dlpack_ref.Array and a.data_ptr == x.ctypes.data and a.tolist() == x.tolist()
    cap, buf = ext.export(1, 2, versioned=False)
    b = ext.capsule_to_array(cap)
    assert b.data_ptr == buf.address and b.tolist() == [[0, 1.5]]


def test_view_borrows_an_arrays_tensor(ext):
    a = dlpack_ref.zeros((3, 5), dtype="float32")
    assert ext.view(a) == (a.data_ptr, (3, 5))
    with pytest.raises(TypeError, match="views Array objects, not ndarray"):
        ext.view(np.zeros(2))


def test_import_refuses_what_is_not_dlpack(ext):
    with pytest.raises(TypeError, match="expects an object with __dlpack__ and __dlpack_device__ or a DLPack capsule, not list"):
        ext.describe([1, 2])
    with pytest.raises(TypeError, match="expected a DLPack capsule, not int"):
        ext.take(3)


# --- take: validation and ownership ---------------------------------------------

def test_take_refuses_a_consumed_or_foreign_capsule(ext, factory):
    cap = factory.make()
    assert ext.take(cap) and factory.deleter_calls == 1
    with pytest.raises(BufferError, match="already consumed"):
        ext.take(cap)
    with pytest.raises(BufferError, match="'other' is not a DLPack capsule"):
        ext.take(factory.make(name=b"other"))


@pytest.mark.parametrize("kwargs, message", [
    ({"version": (2, 0)}, "version 2.0; major version 1"),
    ({"strides": "null", "version": (1, 3)}, "strides is NULL"),
    ({"shape": (2, -1)}, r"shape\[1\]=-1 is negative"),
    ({"ndim": 65, "shape": (1,)}, "ndim=65 is out of range"),
    ({"data": None}, "data is NULL"),
], ids=["major-2", "null-strides-1.3", "negative-extent", "ndim-65", "null-data"])
def test_take_rejects_a_bad_tensor_and_deletes_it_once(ext, factory, kwargs, message):
    cap = factory.make(**kwargs)
    with pytest.raises(BufferError, match=message):
        ext.take(cap)
    assert factory.deleter_calls == 1
    assert capsule_name(cap) == b"used_dltensor_versioned"


def test_take_accepts_null_strides_before_1_2(ext, factory):
    cap = factory.make(strides="null", version=(1, 1))
    assert ext.describe(cap)[2] is None
    assert factory.deleter_calls == 1


# --- the API's calls into a table that fails -----------------------------------
# dlpack_ref_import falls back to __dlpack__ when a table's export fails in any
# way (freeing a tensor handed out with the failure); dlpack_ref_view and
# dlpack_ref_to_array raise a BufferError naming the table's type and function.
# Never a SystemError (docs/exchange_api.md, "Calls into a foreign table").

from support import hostile_table  # noqa: E402
from dlpack_ref.testing import NAME_EXCHANGE_API, NAME_USED_VERSIONED, NAME_VERSIONED, DLPackExchangeAPI, c_api  # noqa: E402

_GetPointer = c_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_SetName = c_api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)


@pytest.fixture(scope="module")
def hostile_lib(tmp_path_factory):
    return hostile_table.build(tmp_path_factory.mktemp("hostile_table"))


def _taken(capsule):
    address = _GetPointer(capsule, NAME_VERSIONED)
    _SetName(capsule, NAME_USED_VERSIONED)
    return address


@pytest.mark.parametrize("failure", sorted(hostile_table.FAILURES))
def test_import_falls_back_when_the_table_export_fails(ext, hostile_lib, factory, failure):
    inner = dlpack_ref.asarray([[1.0, 2.0]])
    calls = []

    def dunder(self, **kwargs):
        calls.append(kwargs)
        return inner.__dlpack__(**kwargs)

    cls = hostile_table.publishing_type(hostile_table.table(hostile_lib), dunder)
    hostile_lib.hostile_set(_taken(factory.make(shape=(2,))), hostile_table.FAILURES[failure], 0, 0, 0)
    assert ext.total(cls()) == 3.0
    assert calls == [{"max_version": (1, 3)}]
    gc.collect()
    assert factory.deleter_calls == 1


def _array_table():
    cap = dlpack_ref.Array.__dict__["__dlpack_c_exchange_api__"]
    return DLPackExchangeAPI.from_address(_GetPointer(cap, NAME_EXCHANGE_API))


VIEW_MESSAGES = {
    "silent -1": "returned -1 without setting an exception",
    "silent 7": "returned 7 without setting an exception",
    "error with 0": "returned 0 but set RuntimeError: hostile {function}",
}


@pytest.mark.thread_unsafe(reason="swaps a function of dlpack_ref.Array's own table for the test")
@pytest.mark.parametrize("failure", sorted(hostile_table.FAILURES))
@pytest.mark.parametrize("function", ["dltensor_from_py_object_no_sync", "managed_tensor_to_py_object_no_sync"])
def test_view_and_to_array_report_a_failing_table(ext, hostile_lib, factory, failure, function):
    api = _array_table()
    hostile = hostile_table.table(hostile_lib)
    saved = getattr(api, function)
    mode = hostile_table.FAILURES[failure]
    hostile_lib.hostile_set(None, 0, 0, mode, mode)
    a = dlpack_ref.asarray([1.0, 2.0])
    setattr(api, function, getattr(hostile, function))
    try:
        with pytest.raises(Exception) as info:
            if function == "dltensor_from_py_object_no_sync":
                ext.view(a)
            else:
                ext.capsule_to_array(factory.make(shape=(2,)))
    finally:
        setattr(api, function, saved)
    if failure == "error with -1":
        # The header's own failure: the table's exception, as it is.
        assert type(info.value) is RuntimeError and str(info.value) == f"hostile {function}"
    else:
        assert type(info.value) is BufferError
        assert str(info.value) == (f"the DLPack exchange API of Array failed in {function}: "
                                   + VIEW_MESSAGES[failure].format(function=function))
        assert type(info.value.__cause__) is (RuntimeError if failure == "error with 0" else type(None))
    del info
    gc.collect()
    # to_py owns the tensor from the call on (the header), and freed it once.
    assert factory.deleter_calls == (function == "managed_tensor_to_py_object_no_sync")


# --- the header's consumer: one device answer on every path -----------------------

@pytest.mark.parametrize("kwargs", [{}, {"copy": True}, {"copy": False}, {"device": (1, 0)},
                                    {"device": (1, 0), "copy": True}], ids=str)
def test_consumer_takes_through_the_table_when_dlpack_device_is_unusable(ext, hostile_lib, kwargs):
    # paddle 3.3 answers (kDLCPU, None); its table gives the tensor on the
    # plain path, so every request takes it there and copies it if asked.
    source = np.arange(4.0)
    producer = hostile_table.fresh_table_type(hostile_lib, source, device=(1, None))
    exports = hostile_table.fresh_counts(hostile_lib)[2]
    described, target, must_copy = ext.consume(producer(), **kwargs)
    assert described[0] == source.ctypes.data and described[1] == (4,)
    assert target == (1, 0) and must_copy is bool(kwargs.get("copy"))
    assert hostile_table.fresh_counts(hostile_lib)[2] == exports + 1


def test_consumer_takes_the_plain_request_of_an_unusable_device_answer_without_a_table(ext):
    source = np.arange(3.0)

    class Unplaced:
        def __dlpack__(self, **kwargs):
            return source.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, None)

    for kwargs in ({}, {"copy": True}, {"device": (1, 0)}):
        described, target, must_copy = ext.consume(Unplaced(), **kwargs)
        assert described[0] == source.ctypes.data and target == (1, 0)
        assert must_copy is bool(kwargs.get("copy"))


# --- export of memory with the library's own release function ----------------

def _released(ext):
    gc.collect()
    return ext.released_counts()


@pytest.mark.parametrize("versioned", [True, False])
def test_export_released_is_zero_copy_and_calls_release_once_when_the_consumer_is_done(ext, versioned):
    calls, freed = _released(ext)
    cap, address = ext.export_released(4, versioned=versioned)
    assert _released(ext) == (calls + 1, freed)          # the handle's hold given back; the export's kept
    a = dlpack_ref.from_dlpack(cap)
    assert a.data_ptr == address and a.tolist() == [0, 2, 4, 6]
    del cap
    assert _released(ext) == (calls + 1, freed)          # the Array holds the export
    del a
    assert _released(ext) == (calls + 2, freed + 1)


def test_an_unconsumed_released_export_calls_release_when_dropped(ext):
    calls, freed = _released(ext)
    cap, _ = ext.export_released(3)
    del cap
    assert _released(ext) == (calls + 2, freed + 1)


def test_a_released_export_that_fails_calls_release_before_raising(ext):
    calls, freed = _released(ext)
    with pytest.raises(ValueError, match="ndim=-1 is out of range"):
        ext.export_released(3, ndim=-1)
    assert _released(ext) == (calls + 2, freed + 1)


def test_a_released_export_is_released_by_a_thread_python_never_saw(ext):
    calls, freed = _released(ext)
    cap, _ = ext.export_released(2)
    ext.release_on_a_new_thread(cap)
    assert _released(ext) == (calls + 2, freed + 1)


def test_the_plan_capsule_of_a_released_producer_follows_the_producer_rules(ext):
    calls, freed = _released(ext)
    cap, address = ext.released_dlpack(3, read_only=True, max_version=(1, 3))
    x = np.from_dlpack(_Once(cap))
    assert x.ctypes.data == address and not x.flags.writeable and x.tolist() == [0, 2, 4]
    del cap, x
    assert _released(ext) == (calls + 2, freed + 1)
    with pytest.raises(BufferError, match="read-only CArray cannot be exported as a legacy"):
        ext.released_dlpack(3, read_only=True)
    with pytest.raises(ValueError, match="only stream=None is accepted for CPU memory"):
        ext.released_dlpack(3, stream=1, max_version=(1, 0))
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        ext.released_dlpack(3, colour=1)
    assert _released(ext) == (calls + 5, freed + 4)      # each refused call gave only the handle's hold back


# --- __dlpack_device__ answers --------------------------------------------------

def test_dlpack_device_answers_are_made_once_per_device(ext):
    import enum
    first = ext.dlpack_device(1, 0)
    assert first == (1, 0) and isinstance(first[0], enum.IntEnum) and first[0].name == "CPU"
    assert ext.dlpack_device(1, 0) is first
    assert ext.dlpack_device(2, 3) is ext.dlpack_device(2, 3) and ext.dlpack_device(2, 3) == (2, 3)
    assert ext.dlpack_device(2, 3)[0] is ext.dlpack_device(2, 40)[0]
    assert ext.dlpack_device(2, 40) == (2, 40)     # past the kept ids: still right, made per call


def test_dlpack_device_of_an_undefined_device_type_is_a_value_error(ext):
    with pytest.raises(ValueError):
        ext.dlpack_device(99, 0)
    with pytest.raises(ValueError):
        ext.dlpack_device(5, 0)
