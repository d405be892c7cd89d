"""The header's consumer of memory as bytes (dlpack_ref_get_buffer and its
pieces), through a small extension built on the Cython API
(tests/cython_api_ext/buffer_demo.pyx): the producer's own memory in a
Py_buffer whose owner runs the deleter once, the data type policy of a byte
consumer, the request it makes, and refusals that leave no error pending
when a capsule dies."""

import ctypes
import gc
from pathlib import Path

import numpy as np
import pytest

import dlpack_ref
from dlpack_ref.testing import capsule_name
from dlpack_ref.testing.abi import FLAG_IS_COPIED, FLAG_READ_ONLY, NAME_VERSIONED
from dlpack_ref.testing.factory import ForeignProducer
from support.build_ext import compile_extension

SOURCE = Path(__file__).resolve().parent / "cython_api_ext" / "buffer_demo.pyx"
BOGUS = 0xDEAD0000


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    build = tmp_path_factory.mktemp("buffer_demo")
    pyx = build / SOURCE.name
    pyx.write_bytes(SOURCE.read_bytes())
    include = dlpack_ref.get_include()
    return compile_extension(pyx, build, cython_include=[include], c_include=[include])


class _Once:
    """A CPU producer handing out one prepared capsule."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


# --- the buffer: the producer's memory, owned until it is released --------------

def test_buffer_is_the_producers_memory_and_its_release_runs_the_deleter_once(ext, factory):
    producer = ForeignProducer(factory, shape=(2, 3), dtype=(2, 64, 1))
    view = ext.get_buffer(producer)
    assert view.nbytes == 48 and view.device == (1, 0) and view.dtype == (2, 64, 1)
    assert capsule_name(view.owner) == b"dlpack_ref.buffer_owner"
    gc.collect()
    assert factory.deleter_calls == 0 and factory.live == 1
    view.release()
    assert factory.deleter_calls == 1
    del view
    gc.collect()
    assert factory.deleter_calls == 1


def test_buffer_of_a_numpy_array_is_zero_copy(ext):
    x = np.arange(6, dtype=np.int32)
    view = ext.get_buffer(x, writable=True)
    assert view.address == x.ctypes.data and view.nbytes == 24 and not view.readonly


def test_the_request_is_copy_false_with_the_stream_only_off_the_cpu(ext, factory):
    cpu = ForeignProducer(factory, shape=(4,))
    ext.get_buffer(cpu).release()
    assert cpu.calls == [{"max_version": (1, 3), "copy": False}]
    gpu = ForeignProducer(factory, shape=(4,), device=(2, 0), data=BOGUS)
    view = ext.get_buffer(gpu, stream=-1)
    # taken without being read: the device and the address are handed on
    assert gpu.calls == [{"max_version": (1, 3), "stream": -1, "copy": False}]
    assert view.device == (2, 0) and view.address == BOGUS
    view.release()
    assert factory.deleter_calls == 2


def test_a_legacy_producer_is_asked_the_legacy_call_with_the_stream(ext, factory):
    old = ForeignProducer(factory, legacy_only=True, shape=(4,), device=(4, 0), data=BOGUS)
    view = ext.get_buffer(old, stream=-1)
    assert old.calls[-1] == {"stream": -1} and view.device == (4, 0)
    view.release()
    assert factory.deleter_calls == 1


# --- the data types of a byte consumer ------------------------------------------

@pytest.mark.parametrize("dtype", [(2, 128, 1), (5, 128, 2), (3, 16, 1), (99, 8, 3)],
                         ids=["float128", "complex128x2", "opaque-16", "vendor-code"])
def test_a_byte_consumer_takes_any_data_type_with_a_size(ext, factory, dtype):
    cap = factory.make(shape=(3,), dtype=dtype)
    view = ext.get_buffer(_Once(cap))
    assert view.nbytes == 3 * dtype[1] * dtype[2] // 8 and view.dtype == dtype
    view.release()
    assert factory.deleter_calls == 1


def test_an_element_consumer_refuses_what_dlpack_does_not_define(ext, factory):
    with pytest.raises(BufferError, match=r"unsupported DLDataType\(code=2, bits=128"):
        ext.get_buffer(_Once(factory.make(shape=(3,), dtype=(2, 128, 1))), as_bytes=False)
    assert factory.deleter_calls == 1


@pytest.mark.parametrize("dtype", [(2, 0, 1), (1, 8, 0)], ids=["bits-0", "lanes-0"])
def test_a_byte_consumer_refuses_a_data_type_without_a_size(ext, factory, dtype):
    with pytest.raises(BufferError, match="has no size"):
        ext.get_buffer(_Once(factory.make(shape=(3,), dtype=dtype)))
    assert factory.deleter_calls == 1


# --- refusals: the exception a buffer consumer's users expect, the deleter once ---

@pytest.mark.parametrize("make, message", [
    ({"flags": FLAG_READ_ONLY}, "READ_ONLY and a writable buffer"),
    ({"shape": (3,), "strides": (2,)}, "not contiguous"),
    ({"shape": (2, 3), "strides": (1, 2), "flags": FLAG_READ_ONLY}, "READ_ONLY"),
    ({"data": None}, "data is NULL"),
    ({"version": (2, 0)}, "version 2.0"),
    ({"shape": (2 ** 62, 8)}, "overflows int64"),
], ids=["read-only-writable", "strided", "fortran-read-only", "null-data", "major-2", "extent-overflow"])
def test_refusals_are_buffer_errors_and_delete_once(ext, factory, make, message):
    cap = factory.make(**make)
    with pytest.raises(BufferError, match=message):
        ext.get_buffer(_Once(cap), writable=True)
    gc.collect()
    assert factory.deleter_calls == 1


def test_read_only_memory_asked_read_only_is_a_read_only_buffer(ext, factory):
    view = ext.get_buffer(_Once(factory.make(flags=FLAG_READ_ONLY)))
    assert view.readonly
    fortran = ext.get_buffer(_Once(factory.make(shape=(2, 3), strides=(1, 2))), writable=True)
    assert fortran.nbytes == 24


def test_a_copy_is_refused_where_the_producers_memory_was_asked_for(ext, factory):
    with pytest.raises(BufferError, match="IS_COPIED") as info:
        ext.get_buffer(_Once(factory.make(flags=FLAG_IS_COPIED)))
    # the extension's own CopyForbiddenError (dlpack-ref is not its owner)
    assert type(info.value).__name__ == "CopyForbiddenError" and isinstance(info.value, ValueError)
    del info
    gc.collect()
    assert factory.deleter_calls == 1


def test_a_tensor_elsewhere_than_announced_is_refused(ext, factory):
    with pytest.raises(BufferError, match=r"said \(1, 0\) but the capsule's tensor is on \(2, 0\)"):
        ext.get_buffer(_Once(factory.make(device=(2, 0), data=BOGUS)))
    assert factory.deleter_calls == 1


def test_a_consumed_capsule_and_a_non_capsule_are_buffer_errors(ext, factory):
    cap = factory.make()
    ext.get_buffer(_Once(cap)).release()
    with pytest.raises(BufferError, match="already consumed"):
        ext.get_buffer(_Once(cap))
    with pytest.raises(BufferError, match="__dlpack__ returned NoneType, not a DLPack capsule"):
        ext.get_buffer(_Once(None))
    assert factory.deleter_calls == 1


def test_an_object_without_the_protocol_is_a_type_error(ext):
    with pytest.raises(TypeError, match="expects an object with __dlpack__"):
        ext.get_buffer([1, 2])

    class NoDunder:
        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="expects an object with __dlpack__"):
        ext.get_buffer(NoDunder())


# --- a refused capsule dies with no error pending -----------------------------------
# A producer whose capsule destructor is Python code (ctypes), as many written
# in Python are: it calls into the C API, which fails when an exception is
# already set, so a destructor run while the refusal was pending turned the
# refusal into a SystemError.

_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_IsValid.argtypes, _IsValid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
_SetDestructor = ctypes.pythonapi.PyCapsule_SetDestructor
_SetDestructor.argtypes, _SetDestructor.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_int
_SetContext = ctypes.pythonapi.PyCapsule_SetContext
_SetContext.argtypes, _SetContext.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_int
_destroyed = []


@_Destructor
def _python_destructor(address):
    capsule = ctypes.cast(address, ctypes.py_object)   # no new reference: the capsule is dying
    _destroyed.append(bool(_IsValid(capsule, NAME_VERSIONED)))


class _PythonDestructorProducer:
    def __init__(self, factory, **make):
        self.factory, self.make = factory, make

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        cap = self.factory.make(**self.make)
        _SetDestructor(cap, ctypes.cast(_python_destructor, ctypes.c_void_p).value)
        _SetContext(cap, None)   # this destructor needs none: the capsule may own its buffer
        return cap


@pytest.mark.parametrize("call", ["get_buffer", "import_and_release"])
def test_a_refused_capsule_is_destroyed_with_no_error_pending(ext, factory, call):
    del _destroyed[:]
    producer = _PythonDestructorProducer(factory, shape=(2, -3))
    with pytest.raises(BufferError, match="negative"):
        getattr(ext, call)(producer)
    gc.collect()
    assert _destroyed == [False] and factory.deleter_calls == 1


@pytest.fixture(scope="module")
def hostile_lib(tmp_path_factory):
    from support import hostile_table
    return hostile_table.build(tmp_path_factory.mktemp("hostile_table"))


def test_a_type_with_an_exchange_table_gives_its_memory_through_it(ext, hostile_lib):
    from support import hostile_table
    source = np.arange(4.0)
    producer = hostile_table.fresh_table_type(hostile_lib, source)
    exports = hostile_table.fresh_counts(hostile_lib)[2]
    view = ext.get_buffer(producer(), writable=True)
    assert view.address == source.ctypes.data and view.nbytes == 32 and view.dtype == (2, 64, 1)
    assert hostile_table.fresh_counts(hostile_lib)[2] == exports + 1   # the table's export, no __dlpack__
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    assert ext.get_buffer(t, writable=True).address == t.data_ptr()


def test_a_capsule_whose_context_is_free_is_the_buffers_owner(ext):
    import sys
    x = np.arange(4.0)
    refs = sys.getrefcount(x)
    view = ext.get_buffer(_Once(x.__dlpack__(max_version=(1, 3))), writable=True)
    # no owner object of its own: the producer's capsule, renamed, holds the tensor
    assert capsule_name(view.owner) == b"used_dltensor_versioned" and view.address == x.ctypes.data
    assert sys.getrefcount(x) == refs + 1
    view.release()
    assert sys.getrefcount(x) == refs


def test_a_legacy_capsule_whose_context_is_free_is_the_buffers_owner_too(ext):
    """The owner's release knows a legacy tensor from a versioned one by the
    destructor it was given: the legacy deleter runs, and the array's
    reference is given back."""
    import sys
    x = np.arange(4.0)
    refs = sys.getrefcount(x)
    view = ext.get_buffer(_Once(x.__dlpack__()))
    assert capsule_name(view.owner) == b"used_dltensor" and view.address == x.ctypes.data
    assert sys.getrefcount(x) == refs + 1
    view.release()
    assert sys.getrefcount(x) == refs


def test_the_producers_own_destructor_still_runs_after_the_deleter(ext, factory):
    del _destroyed[:]
    view = ext.get_buffer(_PythonDestructorProducer(factory, shape=(3,)))
    assert capsule_name(view.owner) == b"used_dltensor_versioned"
    gc.collect()
    assert factory.deleter_calls == 0 and _destroyed == []
    view.release()
    gc.collect()
    assert factory.deleter_calls == 1 and _destroyed == [False]
