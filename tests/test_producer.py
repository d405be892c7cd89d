"""The producer contract: Array.__dlpack__ and Array.__dlpack_device__ on the CPU.

Capsules are read field by field with dlpack_ref.testing.read_capsule (plain
ctypes, independent of the core) and cross-checked with dlpack_ref.inspect.
"""

import ctypes
import enum
import gc
import sys
import weakref

import pytest

import dlpack_ref
from dlpack_ref import CopyForbiddenError, DeviceType, from_dlpack
from dlpack_ref.testing import (
    FLAG_IS_COPIED,
    FLAG_READ_ONLY,
    NAME_LEGACY,
    NAME_VERSIONED,
    DLManagedTensor,
    DLManagedTensorVersioned,
    capsule_name,
    read_capsule,
)

CPU = (1, 0)
CUDA0 = (2, 0)


def arange(n, dtype="float32"):
    """A writable 1-d Array holding 0 .. n-1."""
    a = dlpack_ref.asarray(list(range(n)), dtype=dtype)
    assert not a.readonly
    return a


def readonly_from_bytes():
    a = dlpack_ref.asarray(b"\x01\x02\x03\x04")
    assert a.readonly
    return a


def readonly_from_numpy():
    np = pytest.importorskip("numpy")
    x = np.arange(4, dtype=np.int16)
    x.flags.writeable = False
    a = dlpack_ref.asarray(x)
    assert a.data_ptr == x.ctypes.data
    return a


READ_ONLY_SOURCES = [readonly_from_bytes, readonly_from_numpy]


# --- names, versions and layout ------------------------------------------------------

@pytest.mark.parametrize("max_version, versioned", [
    (None, False), ((0, 5), False), ((0, 99), False),
    ((1, 0), True), ((1, 3), True), ((1, 99), True), ((2, 0), True),
])
def test_capsule_name_and_stamped_version(max_version, versioned):
    a = arange(6)
    cap = a.__dlpack__(max_version=max_version)
    info = read_capsule(cap)
    assert capsule_name(cap) == (NAME_VERSIONED if versioned else NAME_LEGACY)
    assert info["version"] == ((1, 3) if versioned else None)
    assert dlpack_ref.inspect(cap)["version"] == info["version"]
    assert dlpack_ref.DLPACK_VERSION == (1, 3)


@pytest.mark.parametrize("max_version", [
    "1.3", 1, 1.0, [1, 3], (1,), (1, 3, 0), (1.0, 3), (1, "3"), (True, 0), (1, None), {"major": 1},
])
def test_bad_max_version_type_raises_typeerror(max_version):
    a = arange(3)
    start = sys.getrefcount(a)
    with pytest.raises(TypeError, match="max_version") as excinfo:
        a.__dlpack__(max_version=max_version)
    assert repr(max_version) in str(excinfo.value)
    del excinfo
    assert sys.getrefcount(a) == start


def views():
    base = dlpack_ref.asarray([[float(i + 4 * j) for i in range(4)] for j in range(3)], dtype="float64")
    return {
        "0d": dlpack_ref.asarray(3.0),
        "1d": arange(5),
        "2d": base,
        "3d": dlpack_ref.zeros((2, 3, 4), dtype="int8"),
        "size0": dlpack_ref.zeros((0, 3), dtype="int32"),
        "sliced": base[::2, 1::2],
        "negative": base[:, ::-1],
        "transposed": base.T,
        "20d": dlpack_ref.zeros((1,) * 20, dtype="uint8"),
    }


VIEW_NAMES = list(views())


@pytest.mark.parametrize("name", VIEW_NAMES)
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_one_allocation_non_null_strides_and_first_element(name, versioned):
    a = views()[name]
    cap = a.__dlpack__(max_version=(1, 3) if versioned else None)
    info = read_capsule(cap)
    struct_size = ctypes.sizeof(DLManagedTensorVersioned if versioned else DLManagedTensor)
    ndim = a.ndim
    assert info["ndim"] == ndim
    # One block: the struct, then shape, then strides.
    assert info["shape_ptr"] == info["address"] + struct_size
    assert info["strides_ptr"] == info["shape_ptr"] + 8 * ndim
    if ndim:
        assert info["strides_ptr"] != 0
    assert info["shape"] == a.shape
    assert info["strides"] == a.strides
    assert info["byte_offset"] == 0
    assert info["data"] == a.data_ptr
    assert info["device"] == CPU
    assert info["dtype"] == a.dtype.__dlpack_data_type__()
    assert info["deleter"] != 0
    if versioned:
        assert info["flags"] == 0


def test_export_is_zero_copy_and_round_trips():
    a = views()["negative"]
    b = from_dlpack(a.__dlpack__(max_version=(1, 3)))
    assert b.data_ptr == a.data_ptr
    assert b.strides == a.strides
    assert b.tolist() == a.tolist()


# --- READ_ONLY -------------------------------------------------------------------------

@pytest.mark.parametrize("make", READ_ONLY_SOURCES, ids=["bytes", "numpy"])
def test_read_only_array_sets_read_only_flag(make):
    a = make()
    info = read_capsule(a.__dlpack__(max_version=(1, 0)))
    assert info["flags"] & FLAG_READ_ONLY
    assert not info["flags"] & FLAG_IS_COPIED
    assert info["data"] == a.data_ptr
    b = from_dlpack(a.__dlpack__(max_version=(1, 3)))
    assert b.readonly


@pytest.mark.parametrize("make", READ_ONLY_SOURCES, ids=["bytes", "numpy"])
@pytest.mark.parametrize("max_version", [None, (0, 9)])
def test_legacy_export_of_read_only_array_raises_buffererror(make, max_version):
    a = make()
    start = sys.getrefcount(a)
    with pytest.raises(BufferError, match="read-only") as excinfo:
        a.__dlpack__(max_version=max_version)
    assert excinfo.type is BufferError
    del excinfo
    assert sys.getrefcount(a) == start


def test_read_only_array_copy_exports_a_writable_copy():
    a = readonly_from_bytes()
    for max_version in (None, (1, 3)):
        cap = a.__dlpack__(max_version=max_version, copy=True)
        info = read_capsule(cap)
        assert info["data"] != a.data_ptr
        if max_version:
            assert info["flags"] == FLAG_IS_COPIED
        assert not from_dlpack(cap).readonly


# --- copies ---------------------------------------------------------------------------

@pytest.mark.parametrize("dl_device", [None, CPU])
def test_copy_true_copies(dl_device):
    a = arange(4)
    cap = a.__dlpack__(max_version=(1, 3), copy=True, dl_device=dl_device)
    info = read_capsule(cap)
    assert info["data"] != a.data_ptr
    assert info["flags"] & FLAG_IS_COPIED
    b = from_dlpack(cap)
    assert b.tolist() == a.tolist()
    b[0] = 42.0
    assert b.tolist()[0] == 42.0
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("dl_device", [None, CPU, (DeviceType.CPU, 0)])
@pytest.mark.parametrize("name", ["1d", "negative", "transposed", "0d"])
def test_copy_false_never_copies(dl_device, name):
    a = views()[name]
    info = read_capsule(a.__dlpack__(max_version=(1, 3), copy=False, dl_device=dl_device))
    assert info["data"] == a.data_ptr
    assert info["strides"] == a.strides
    assert info["flags"] == 0


@pytest.mark.parametrize("dl_device", [CPU, (DeviceType.CPU, 0)])
@pytest.mark.parametrize("copy", [None, False])
def test_dl_device_equal_to_own_device_is_zero_copy(dl_device, copy):
    a = arange(3)
    info = read_capsule(a.__dlpack__(max_version=(1, 3), dl_device=dl_device, copy=copy))
    assert info["data"] == a.data_ptr
    assert info["device"] == CPU
    assert info["flags"] == 0


def test_dl_device_cuda_with_copy_false_is_copy_forbidden():
    a = arange(3)
    start = sys.getrefcount(a)
    with pytest.raises(CopyForbiddenError, match="copy=False") as excinfo:
        a.__dlpack__(max_version=(1, 3), dl_device=CUDA0, copy=False)
    assert isinstance(excinfo.value, BufferError)
    assert isinstance(excinfo.value, ValueError)
    assert "cuda" in str(excinfo.value).lower()
    del excinfo
    assert sys.getrefcount(a) == start


@pytest.mark.parametrize("copy", ["yes", 1, 0, "", [True]])
def test_non_bool_copy_raises_typeerror(copy):
    with pytest.raises(TypeError, match="copy") as excinfo:
        arange(2).__dlpack__(max_version=(1, 3), copy=copy)
    assert repr(copy) in str(excinfo.value)


# --- streams on the CPU -------------------------------------------------------------------

def test_stream_none_is_accepted_on_cpu():
    a = arange(2)
    assert read_capsule(a.__dlpack__(stream=None, max_version=(1, 3)))["data"] == a.data_ptr


class _CudaStreamLike:
    def __cuda_stream__(self):
        return (0, 1)


@pytest.mark.parametrize("stream", [1, -1, 2, 5, 0, 2**40, _CudaStreamLike()],
                         ids=["1", "-1", "2", "5", "0", "handle", "__cuda_stream__"])
def test_stream_values_raise_valueerror_on_cpu(stream):
    a = arange(2)
    start = sys.getrefcount(a)
    with pytest.raises(ValueError, match="stream") as excinfo:
        a.__dlpack__(stream=stream, max_version=(1, 3))
    assert excinfo.type is ValueError
    if isinstance(stream, int):
        assert f"stream={stream}" in str(excinfo.value)
    del excinfo
    assert sys.getrefcount(a) == start


@pytest.mark.parametrize("stream", ["x", 1.0, object()], ids=["str", "float", "object"])
def test_stream_of_wrong_type_raises_typeerror(stream):
    with pytest.raises(TypeError, match="stream") as excinfo:
        arange(2).__dlpack__(stream=stream, max_version=(1, 3))
    assert type(stream).__name__ in str(excinfo.value)


# --- __dlpack_device__ ----------------------------------------------------------------------

def test_dlpack_device_is_cpu_deviceype_intenum():
    device = arange(2).__dlpack_device__()
    assert device == (DeviceType.CPU, 0)
    assert type(device) is tuple
    assert type(device[0]) is DeviceType
    assert issubclass(DeviceType, enum.IntEnum)
    assert device[0] == 1 and type(device[1]) is int


# --- lifetime of the exported Array ------------------------------------------------------------

def _owned_by_python(n):
    """A writable 1-d Array holding 0 .. n-1 on memory a Python object owns
    (an array.array's buffer)."""
    import array
    return dlpack_ref.asarray(array.array("f", range(n)))


# Host memory dlpack-ref allocated is owned by a C reference count: its
# exports hold a count of the memory, not the Array; an export of memory a
# Python object owns holds the Array (docs/guarantees.md, Deleters).
MEMORY = {"allocated here": arange, "owned by a Python object": _owned_by_python}


def _holders(a):
    from dlpack_ref._dlpack_ref import _host_memory_holders
    return _host_memory_holders(a)


def _exported(memory, max_version):
    """An array of `memory`, its reference count and memory holders before
    its export, and the capsule of that export."""
    a = MEMORY[memory](4)
    start, holders = sys.getrefcount(a), _holders(a)
    return a, start, holders, a.__dlpack__(max_version=max_version)


@pytest.mark.parametrize("memory", sorted(MEMORY))
@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_unconsumed_capsule_releases_what_it_holds(max_version, memory):
    a, start, holders, cap = _exported(memory, max_version)
    if memory == "allocated here":
        assert sys.getrefcount(a) == start and _holders(a) == holders + 1
    else:
        assert sys.getrefcount(a) == start + 1 and _holders(a) is None
    del cap
    assert sys.getrefcount(a) == start and _holders(a) == holders


@pytest.mark.parametrize("memory", sorted(MEMORY))
@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_consumed_capsule_releases_what_it_holds_when_the_consumer_dies(max_version, memory):
    a, start, holders, cap = _exported(memory, max_version)
    b = from_dlpack(cap)
    del cap
    if memory == "allocated here":
        assert sys.getrefcount(a) == start and _holders(a) == holders + 1
    else:
        assert sys.getrefcount(a) == start + 1
    del b
    gc.collect()
    assert sys.getrefcount(a) == start and _holders(a) == holders


def test_copied_export_holds_no_reference_to_the_source():
    a = arange(4)
    start = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=(1, 3), copy=True)
    assert sys.getrefcount(a) == start
    del cap
    assert sys.getrefcount(a) == start


def _exported_then_consumed(make, max_version):
    """Export `make(4)` and drop it (made here, so that no caller's frame
    holds it), then import the capsule and drop that: a weak reference to
    the Array, whether it lived with only the capsule left, whether it lives
    with only the consumer's array left, that array, and the Array's data
    address."""
    a = make(4)
    data = a.data_ptr
    alive = weakref.ref(a)
    cap = a.__dlpack__(max_version=max_version)
    del a
    gc.collect()
    with_capsule = alive() is not None
    b = from_dlpack(cap)
    del cap
    gc.collect()
    return alive, with_capsule, alive() is not None, b, data


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_exported_array_lives_while_a_capsule_or_consumer_does(max_version):
    alive, with_capsule, with_consumer, b, data = _exported_then_consumed(_owned_by_python, max_version)
    assert with_capsule, "the capsule must keep the exported Array alive"
    assert with_consumer, "the consumer's array must keep the exported Array alive"
    assert b.data_ptr == data
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0]
    del b
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_exported_memory_allocated_here_lives_while_a_capsule_or_consumer_does(max_version):
    # The export holds the memory's count, not the Array: the Array goes at
    # once, the memory stays with the capsule, then with the consumer's array.
    _, with_capsule, _, b, data = _exported_then_consumed(arange, max_version)
    assert not with_capsule, "the capsule kept the Array; it should hold the memory only"
    assert b.data_ptr == data and _holders(b) is None
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_exported_array_dies_with_its_unconsumed_capsule():
    a = _owned_by_python(4)
    alive = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 3))
    del a
    gc.collect()
    assert alive() is not None
    del cap
    gc.collect()
    assert alive() is None
