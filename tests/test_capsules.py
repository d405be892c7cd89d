"""The consumer contract: dlpack_ref.from_dlpack against hand-built capsules.

Every capsule comes from dlpack_ref.testing.CapsuleFactory, which counts the
calls of its deleters. Each malformed capsule is delivered three ways: as a
bare versioned capsule, as a bare legacy capsule, and through a producer whose
capsule dies inside from_dlpack while the error is being raised.
"""

import ctypes
import gc
import struct
import sys
import threading
import tracemalloc

import pytest

import dlpack_ref
from dlpack_ref import from_dlpack
from support.malformed import INT64_MAX, INT64_MIN, MALFORMED
from dlpack_ref.testing import FLAG_IS_COPIED, FLAG_READ_ONLY
from dlpack_ref.testing import NAME_LEGACY, NAME_USED_LEGACY, NAME_USED_VERSIONED, NAME_VERSIONED
from dlpack_ref.testing import DELETER_T, CapsuleFactory, DLManagedTensorVersioned, ForeignProducer, capsule_name
from dlpack_ref.testing import read_capsule



def deleter_calls(factory):
    """Deleter calls once every unreachable Array has been collected."""
    gc.collect()
    return factory.deleter_calls


def used_name(versioned):
    return NAME_USED_VERSIONED if versioned else NAME_USED_LEGACY


def float32_bytes(values):
    return struct.pack(f"<{len(values)}f", *values)


# --- ownership on success ------------------------------------------------------

@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_deleter_runs_once_when_the_array_dies(factory, versioned):
    cap = factory.make(shape=(2, 3), versioned=versioned, fill=float32_bytes(range(6)))
    a = from_dlpack(cap)
    assert capsule_name(cap) == used_name(versioned)
    assert a.data_ptr == factory.last_data
    assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert deleter_calls(factory) == 0
    del a
    assert deleter_calls(factory) == 1
    del cap  # a consumed capsule's destructor must not call the deleter again
    assert deleter_calls(factory) == 1
    assert factory.live == 0


def test_views_keep_the_tensor_alive(factory):
    a = from_dlpack(factory.make(shape=(4, 2)))
    view = a[1:, ::-1]
    del a
    assert deleter_calls(factory) == 0
    del view
    assert deleter_calls(factory) == 1


def test_deleter_may_run_on_another_thread(factory):
    a = from_dlpack(factory.make())
    holder = [a]
    del a
    thread = threading.Thread(target=holder.clear)
    thread.start()
    thread.join()
    assert deleter_calls(factory) == 1


def test_unconsumed_capsule_calls_deleter_once(factory):
    cap = factory.make()
    assert capsule_name(cap) == NAME_VERSIONED
    del cap
    assert deleter_calls(factory) == 1
    assert factory.live == 0


def test_null_deleter_is_accepted(factory):
    cap = factory.make(deleter=False, fill=float32_bytes([7.0] * 6))
    a = from_dlpack(cap)
    assert a.tolist() == [[7.0] * 3] * 2
    del a, cap
    assert deleter_calls(factory) == 0


# --- names ---------------------------------------------------------------------------

@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_consuming_twice_raises_buffererror(factory, versioned):
    cap = factory.make(versioned=versioned)
    a = from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed") as excinfo:
        from_dlpack(cap)
    assert excinfo.type is BufferError
    assert used_name(versioned).decode() in str(excinfo.value)
    del a, excinfo
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_capsule_made_used_and_taken_anyway_is_the_takers(factory, versioned):
    # A consumer that ignores the used_ name and imports the capsule names it
    # used_ again, in its own string: the factory's destructor must see the
    # rename and leave the tensor to it (comparing the names' text, it freed
    # the struct under the live Array, a crash on a debug build).
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes, set_name.restype = (ctypes.py_object, ctypes.c_char_p), ctypes.c_int
    cap = factory.make(versioned=versioned, name=used_name(versioned), fill=float32_bytes(range(6)))
    set_name(cap, NAME_VERSIONED if versioned else NAME_LEGACY)
    a = from_dlpack(cap)
    assert capsule_name(cap) == used_name(versioned)
    del cap
    assert deleter_calls(factory) == 0
    assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    del a
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("name, shown", [
    (b"foo", "'foo'"),
    (b"DLTENSOR", "'DLTENSOR'"),
    (b"dltensor_versioned_", "'dltensor_versioned_'"),
    (b"", "''"),
    ("null", "NULL"),
    (NAME_USED_VERSIONED, "used_dltensor_versioned"),
    (NAME_USED_LEGACY, "used_dltensor"),
])
def test_wrong_capsule_name_is_refused_and_left_alone(factory, name, shown):
    cap = factory.make(name=name)
    with pytest.raises(BufferError) as excinfo:
        from_dlpack(cap)
    assert excinfo.type is BufferError
    assert shown in str(excinfo.value)
    # The consumer did not take ownership: the name is unchanged and the
    # deleter is the producer's business (its destructor runs it).
    assert capsule_name(cap) == (None if name == "null" else name)
    assert deleter_calls(factory) == 0
    del cap
    assert deleter_calls(factory) == 1


def test_wrong_name_through_a_producer_keeps_the_error(factory):
    producer = ForeignProducer(factory, name=b"foo")
    with pytest.raises(BufferError, match="'foo'"):
        from_dlpack(producer)
    assert deleter_calls(factory) == 1


def test_producer_returning_a_non_capsule_raises_typeerror(factory):
    with pytest.raises(TypeError, match="int"):
        from_dlpack(ForeignProducer(factory, returns=12345))
    assert factory.deleter_calls == 0


# --- what the consumer asks for ------------------------------------------------------

def test_consumer_asks_for_max_version_1_3(factory):
    producer = ForeignProducer(factory)
    a = from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 3)}]
    assert type(producer.calls[0]["max_version"]) is tuple
    del a
    assert deleter_calls(factory) == 1


def test_legacy_fallback_on_typeerror(factory):
    producer = ForeignProducer(factory, legacy_only=True, fill=float32_bytes(range(6)))
    a = from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 3)}, {}]
    assert a.data_ptr == factory.last_data
    assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert deleter_calls(factory) == 0
    del a
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("error", [BufferError("cannot export"), ValueError("bad value")],
                         ids=["BufferError", "ValueError"])
def test_no_fallback_on_other_errors(factory, error):
    producer = ForeignProducer(factory, raises=error)
    with pytest.raises(type(error), match=str(error)):
        from_dlpack(producer)
    assert len(producer.calls) == 1
    assert factory.deleter_calls == 0


# --- malformed capsules: one field out of range each ----------------------------------
# The corpus is shared with tests/test_malformed_corpus.py (from_dlpack, the
# vendorable Cython API and the checker's reader must agree on it).

DELIVERY = ["versioned", "legacy", "producer"]


def _deliver(factory, how, make_kwargs):
    """Hand a malformed capsule to from_dlpack; return the capsule (None when
    it went through a producer and died inside the consumer)."""
    if how == "producer":
        from_dlpack(ForeignProducer(factory, **make_kwargs))
        return None
    cap = factory.make(versioned=(how == "versioned"), **make_kwargs)
    try:
        from_dlpack(cap)
    finally:
        assert capsule_name(cap) == used_name(how == "versioned"), "ownership must be taken"
        del cap


# Legacy capsules have no version, and NULL strides are valid in them.
MALFORMED_DELIVERIES = [
    pytest.param(how, make_kwargs, message, id=f"{case}-{how}")
    for case, make_kwargs, message, for_legacy in MALFORMED
    for how in DELIVERY
    if for_legacy or how != "legacy"
]


@pytest.mark.parametrize("how, make_kwargs, message", MALFORMED_DELIVERIES)
def test_malformed_capsule_is_refused(factory, how, make_kwargs, message):
    with pytest.raises(BufferError, match=message) as excinfo:
        _deliver(factory, how, make_kwargs)
    assert excinfo.type is BufferError
    del excinfo
    assert deleter_calls(factory) == 1
    assert factory.live == 0


def test_major_version_error_says_the_deleter_ran(factory):
    with pytest.raises(BufferError, match="version 2.0"):
        from_dlpack(factory.make(version=(2, 0)))
    # The deleter runs right when the version is refused, not later.
    assert factory.calls_for(factory.last_id) == 1


# --- accepted corner cases -------------------------------------------------------------

@pytest.mark.parametrize("make_kwargs", [
    dict(version=(1, 0)), dict(version=(1, 1)), dict(versioned=False),
], ids=["1.0", "1.1", "legacy"])
def test_null_strides_read_as_row_major_before_1_2(factory, make_kwargs):
    cap = factory.make(shape=(2, 3), strides="null", fill=float32_bytes(range(6)), **make_kwargs)
    a = from_dlpack(cap)
    assert a.strides == (3, 1)
    assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    del a, cap
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("version", [(1, 0), (1, 3), (1, 4), (1, 99)])
def test_any_minor_version_of_major_1_is_accepted(factory, version):
    a = from_dlpack(factory.make(version=version))
    assert a.shape == (2, 3)
    del a
    assert deleter_calls(factory) == 1


def test_null_strides_are_fine_for_0d(factory):
    a = from_dlpack(factory.make(shape=(), strides="null", fill=float32_bytes([2.5])))
    assert a.shape == () and a.tolist() == 2.5
    del a
    assert deleter_calls(factory) == 1


# Every DLPack 1.3 data type, written out from the spec.
VALID_DTYPES = (
    [(0, b, 1) for b in (8, 16, 32, 64)] + [(1, b, 1) for b in (8, 16, 32, 64)]
    + [(2, b, 1) for b in (16, 32, 64)] + [(4, 16, 1), (5, 64, 1), (5, 128, 1), (6, 8, 1)]
    + [(code, 8, 1) for code in range(7, 15)]
    + [(15, 6, 1), (16, 6, 1), (17, 4, 1), (17, 4, 2)]
    + [(18, 32, 1)]   # kDLBcomplex, upstream's main branch since the 1.3 release
)


@pytest.mark.parametrize("dtype", VALID_DTYPES, ids=[f"{c}-{b}-{l}" for c, b, l in VALID_DTYPES])
@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
def test_every_dlpack_1_3_dtype_is_accepted(factory, dtype, padded):
    flags = 4 if padded else 0  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    a = from_dlpack(factory.make(shape=(4,), dtype=dtype, flags=flags))
    assert a.dtype.__dlpack_data_type__() == dtype
    assert a.data_ptr == factory.last_data
    assert a.shape == (4,)
    if dtype[1] * dtype[2] < 8:
        assert a.subbyte_padded is padded
    del a
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("device", [(1, 0), (1, 3)])
def test_cpu_capsules_are_accepted(factory, device):
    a = from_dlpack(factory.make(device=device))
    assert a.__dlpack_device__() == device
    del a
    assert deleter_calls(factory) == 1


def test_tpu_pinned_memory_is_held_and_read_in_place(factory):
    """kDLTPUHost is host memory the TPU runtime pinned (JAX exports TPU
    pinned-host arrays with it): the CPU reads it in place, as it reads
    kDLCUDAHost memory, and exports keep its true device type."""
    values = [1.5, -2.0, 3.25, 4.0, 0.5, 6.0]
    a = from_dlpack(factory.make(device=(20, 0), fill=float32_bytes(values)))
    assert a.device == dlpack_ref.Device("tpu_pinned", 0)
    assert a.__dlpack_device__() == (dlpack_ref.DeviceType.TPU_PINNED, 0)
    assert a.data_ptr == factory.last_data and a.tolist() == [values[:3], values[3:]]
    assert bytes(memoryview(a)) == float32_bytes(values)
    for kwargs in ({}, {"dl_device": (1, 0)}, {"dl_device": (20, 0)}, {"copy": False}):
        info = read_capsule(a.__dlpack__(max_version=(1, 3), **kwargs))
        assert (info["data"], info["device"]) == (factory.last_data, (20, 0)), kwargs
    assert from_dlpack(a, device="cpu").data_ptr == a.data_ptr
    copied = from_dlpack(a, device="cpu", copy=True)
    assert copied.device == dlpack_ref.Device("cpu") and copied.data_ptr != a.data_ptr
    assert copied.tolist() == a.tolist()
    with pytest.raises(ValueError, match="only stream=None"):
        a.__dlpack__(max_version=(1, 3), stream=1)
    with pytest.raises(BufferError, match="cannot allocate memory on tpu_pinned:0"):
        dlpack_ref.zeros((2,), device="tpu_pinned")
    del a, copied
    assert deleter_calls(factory) == 1


def test_inspect_names_the_device_and_the_dtype(factory):
    info = dlpack_ref.inspect(factory.make(shape=(2,), dtype=(18, 32, 1), device=(20, 0)))
    assert (info["device"], info["device_name"]) == ((20, 0), "tpu_pinned:0")
    assert (info["dtype"], info["dtype_name"]) == ((18, 32, 1), "bcomplex32")
    for device, name in [((19, 1), "tpu:1"), ((21, 0), "ascend:0"), ((1, 0), "cpu:0"), ((99, 0), None),
                         ((2, -1), None)]:
        assert dlpack_ref.inspect(factory.make(device=device))["device_name"] == name, device
    for dtype, name in [((2, 32, 1), "float32"), ((17, 4, 2), "float4_e2m1fn_x2"), ((18, 16, 1), None),
                        ((5, 32, 1), None)]:
        assert dlpack_ref.inspect(factory.make(dtype=dtype))["dtype_name"] == name, dtype


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0, 2)])
@pytest.mark.parametrize("strides", [None, "null"], ids=["strides", "null-strides-legacy"])
def test_null_data_with_size_0_is_accepted(factory, shape, strides):
    versioned = strides is None  # NULL strides are valid only in legacy capsules
    a = from_dlpack(factory.make(shape=shape, data=None, strides=strides, versioned=versioned))
    assert a.shape == shape
    assert a.size == 0
    assert a.tolist() == from_dlpack(dlpack_ref.zeros(shape, dtype="float32")).tolist()
    del a
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
@pytest.mark.parametrize("byte_offset", [4, 16, 1000])
def test_byte_offset_is_honoured(factory, versioned, byte_offset):
    cap = factory.make(shape=(3,), dtype=(2, 32, 1), byte_offset=byte_offset, versioned=versioned,
                       fill=float32_bytes([1.5, -2.0, 8.0]))
    a = from_dlpack(cap)
    assert a.data_ptr == factory.last_data + byte_offset
    assert a.tolist() == [1.5, -2.0, 8.0]
    del a, cap
    assert deleter_calls(factory) == 1


def test_negative_strides_are_read_in_place(factory):
    cap = factory.make(shape=(3,), strides=(-1,), fill=float32_bytes([5.0]))
    a = from_dlpack(cap)
    assert a.strides == (-1,)
    assert a.data_ptr == factory.last_data
    assert a.tolist()[0] == 5.0
    del a, cap
    assert deleter_calls(factory) == 1


@pytest.mark.parametrize("flags, readonly", [(0, False), (FLAG_READ_ONLY, True), (2, False)],
                         ids=["none", "READ_ONLY", "IS_COPIED"])
def test_read_only_flag_becomes_array_readonly(factory, flags, readonly):
    a = from_dlpack(factory.make(shape=(4,), dtype=(1, 8, 1), flags=flags))
    assert a.readonly is readonly
    assert memoryview(a).readonly is readonly
    del a
    assert deleter_calls(factory) == 1


# --- reference counts of NumPy sources ------------------------------------------------

def test_numpy_source_refcount_returns_to_start():
    np = pytest.importorskip("numpy")
    x = np.arange(12.0).reshape(3, 4)
    start = sys.getrefcount(x)
    a = from_dlpack(x)
    assert a.data_ptr == x.ctypes.data
    assert sys.getrefcount(x) > start  # the capsule's owner holds x
    del a
    gc.collect()
    assert sys.getrefcount(x) == start


@pytest.mark.parametrize("max_version", [None, (1, 0)], ids=["legacy", "versioned"])
def test_numpy_capsule_refcount_returns_to_start(max_version):
    np = pytest.importorskip("numpy")
    x = np.arange(6, dtype=np.int32)
    start = sys.getrefcount(x)
    cap = x.__dlpack__(max_version=max_version) if max_version else x.__dlpack__()
    a = from_dlpack(cap)
    assert a.data_ptr == x.ctypes.data
    del a, cap
    gc.collect()
    assert sys.getrefcount(x) == start


def test_numpy_source_refcount_after_a_refused_import():
    np = pytest.importorskip("numpy")
    x = np.arange(4.0)
    start = sys.getrefcount(x)
    with pytest.raises(BufferError):
        from_dlpack(x, device="cuda:0", copy=False)
    gc.collect()
    assert sys.getrefcount(x) == start


# --- the tool itself: dlpack_ref.testing ------------------------------------------------

def test_factory_writes_every_field_as_asked(factory):
    cap = factory.make(shape=(2, 5), dtype=(1, 16, 1), version=(1, 1), flags=5, strides=(1, 2),
                       device=(13, 2), byte_offset=24)
    info = read_capsule(cap)
    assert info["version"] == (1, 1) and info["flags"] == 5
    assert info["shape"] == (2, 5) and info["strides"] == (1, 2)
    assert info["device"] == (13, 2) and info["dtype"] == (1, 16, 1)
    assert info["byte_offset"] == 24 and info["data"] == factory.last_data
    assert info["data"] % 256 == 0
    seen = dlpack_ref.inspect(cap)
    for key in ("version", "flags", "shape", "strides", "device", "dtype", "byte_offset", "data"):
        assert seen[key] == info[key], key
    legacy = read_capsule(factory.make(versioned=False, shape_null=True, strides="null", ndim=3))
    assert legacy["version"] is None and legacy["ndim"] == 3
    assert legacy["shape_ptr"] == 0 and legacy["strides_ptr"] == 0


def test_a_second_deleter_call_is_counted_not_fatal(factory):
    cap = factory.make()
    info = read_capsule(cap)
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(info["deleter"])
    a = from_dlpack(cap)
    del a
    assert deleter_calls(factory) == 1
    deleter(info["address"])  # a buggy consumer calling it again
    assert deleter_calls(factory) == 2
    assert factory.calls_for(factory.last_id) == 2


def test_capsules_outlive_their_factory():
    factory = CapsuleFactory()
    cap = factory.make(fill=float32_bytes([1.0]))
    counts = factory._counts
    del factory
    gc.collect()
    a = from_dlpack(cap)
    assert a.tolist()[0][0] == 1.0
    del a, cap
    gc.collect()
    assert counts.total == 1


def test_foreign_producer_records_calls_and_reports_its_device(factory):
    producer = ForeignProducer(factory, device=(1, 0), shape=(3,))
    assert producer.__dlpack_device__() == (1, 0)
    assert capsule_name(producer.__dlpack__()) == NAME_LEGACY
    cap = producer.__dlpack__(max_version=(1, 3), stream=None, copy=False)
    assert capsule_name(cap) == NAME_VERSIONED
    assert producer.calls == [{}, {"max_version": (1, 3), "stream": None, "copy": False}]
    old = ForeignProducer(factory, legacy_only=True)
    with pytest.raises(TypeError, match="max_version"):
        old.__dlpack__(max_version=(1, 3))
    assert capsule_name(old.__dlpack__(stream=None)) == NAME_LEGACY
    del cap
    assert deleter_calls(factory) == 3


# --- copy=False and a tensor that is a copy ------------------------------------

@pytest.mark.parametrize("how", ["producer", "capsule", "producer refusing copy="])
def test_copy_false_refuses_a_tensor_flagged_is_copied(factory, how):
    # A producer that copied although asked not to (or a capsule that says it
    # is a copy): the result would not share the producer's memory.
    if how == "capsule":
        x = factory.make(shape=(3,), flags=FLAG_IS_COPIED, versioned=True)
        said = "the capsule's tensor"
    elif how == "producer":
        x = ForeignProducer(factory, shape=(3,), flags=FLAG_IS_COPIED)
        said = "the tensor ForeignProducer.__dlpack__ returned"
    else:
        class Refusing(ForeignProducer):
            def __dlpack__(self, **kwargs):
                if "copy" in kwargs:
                    self.calls.append(dict(kwargs))
                    raise BufferError("no copy= here")
                return super().__dlpack__(**kwargs)
        x = Refusing(factory, shape=(3,), flags=FLAG_IS_COPIED)
        said = "the tensor Refusing.__dlpack__ returned"
    with pytest.raises(dlpack_ref.CopyForbiddenError) as info:
        from_dlpack(x, copy=False)
    assert str(info.value) == (f"copy=False, but {said} is flagged DLPACK_FLAG_BITMASK_IS_COPIED (a copy, not "
                               "the producer's memory); its deleter was called")
    assert isinstance(info.value, BufferError) and isinstance(info.value, ValueError)
    del info
    assert deleter_calls(factory) == 1
    # Without copy=False the same tensor is accepted in place (the flag is
    # information, not a defect).
    a = from_dlpack(factory.make(shape=(3,), flags=FLAG_IS_COPIED, versioned=True), copy=None)
    assert a.data_ptr == factory.last_data
    del a
    assert deleter_calls(factory) == 2


@pytest.mark.thread_unsafe(reason="other threads' freed tensors may push this one out of the shared quarantine")
def test_a_factory_that_keeps_freed_memory_holds_a_freed_tensor_as_it_was():
    # what a consumer that reads a tensor after its deleter ran finds: the
    # tensor as it was, whatever was allocated since (the checker's cases
    # use it, so that such a consumer gets the same verdict in every run)
    f = CapsuleFactory(keep_freed=True)
    cap = f.make(shape=(3,), dtype=(2, 64, 1), fill=struct.pack("<3d", 1.0, 2.0, 3.0))
    info = read_capsule(cap)
    size = ctypes.sizeof(DLManagedTensorVersioned)
    before = ctypes.string_at(info["address"], size)
    DELETER_T(info["deleter"])(info["address"])
    assert (f.deleter_calls, f.live) == (1, 0)
    churn = [ctypes.create_string_buffer(b"\xab" * size) for _ in range(10_000)]
    assert ctypes.string_at(info["address"], size) == before
    assert ctypes.string_at(info["data"], 24) == struct.pack("<3d", 1.0, 2.0, 3.0)
    del churn, cap
    gc.collect()
    assert f.calls_for(f.last_id) == 2   # the capsule destructor's call after the first is counted, as always


@pytest.mark.thread_unsafe(reason="tracemalloc traces every thread's allocations, and is started once per process")
@pytest.mark.parametrize("keep_freed, kept_mib", [(True, (16, 17)), (False, (0, 1))], ids=["keep_freed", "default"])
def test_the_memory_of_the_last_16_freed_tensors_is_kept_or_none_is(keep_freed, kept_mib):
    tracemalloc.start()
    try:
        f = CapsuleFactory(keep_freed=keep_freed)
        for _ in range(40):
            a = from_dlpack(f.make(shape=(1 << 17,), dtype=(2, 64, 1)))   # 1 MiB of data each
            del a
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert f.deleter_calls == 40
    low, high = kept_mib
    assert low << 20 <= held < high << 20, held
