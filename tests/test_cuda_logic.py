"""The CUDA layer's logic against a recording stand-in of
``cuda.bindings.driver``: what only a stand-in shows.

The stand-in (host buffers for device memory, handles tied to contexts, a
log of every call) stays for what the simulated driver under the real
cuda.bindings (tests/support, used by test_cuda_sim.py and test_cuda_gpu.py)
cannot show: the loader's messages when cuda-python, the driver or a device
is missing, frees counted per pointer, which driver calls a copy plan
issues, and argument checks that need no driver at all. Stream ordering is
checked by the data consumers read, in test_cuda_sim.py.
"""

from __future__ import annotations

import ctypes
import enum
import gc
import importlib.util
import itertools
import random
import subprocess
import sys
import threading

import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref import _cuda_driver, cuda
from dlpack_ref._cuda_memory import plan_copy
from dlpack_ref._dlpack_ref import _coalesce
from dlpack_ref.testing import CapsuleFactory, ForeignProducer, read_capsule

LEGACY, PER_THREAD = 1, 2


# --- the stand-in ----------------------------------------------------------

class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400


class CUmemorytype(enum.IntEnum):
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    CU_MEMORYTYPE_ARRAY = 3
    CU_MEMORYTYPE_UNIFIED = 4


class CUevent_flags(enum.IntEnum):
    CU_EVENT_DISABLE_TIMING = 2


class CUmemAttach_flags(enum.IntEnum):
    CU_MEM_ATTACH_GLOBAL = 1


class CUDA_MEMCPY2D:
    def __init__(self):
        self.srcMemoryType = self.dstMemoryType = 0
        self.srcHost = self.srcDevice = self.dstHost = self.dstDevice = 0
        self.srcPitch = self.dstPitch = self.WidthInBytes = self.Height = 0


class _Fail(Exception):
    def __init__(self, result):
        self.result = result


def _api(fn):
    def wrapper(self, *args):
        try:
            out = fn(self, *args)
        except _Fail as f:
            self.errors.append((fn.__name__, f.result))
            return (f.result,)
        return (CUresult.CUDA_SUCCESS,) if out is None else (CUresult.CUDA_SUCCESS, out)
    wrapper.__name__ = fn.__name__
    return wrapper


class FakeDriver:
    """A recording stand-in of cuda.bindings.driver (the calls dlpack-ref makes)."""

    CUresult = CUresult
    CUmemorytype = CUmemorytype
    CUevent_flags = CUevent_flags
    CUmemAttach_flags = CUmemAttach_flags
    CUDA_MEMCPY2D = CUDA_MEMCPY2D
    CU_MEMHOSTALLOC_PORTABLE = 1

    def __init__(self, device_count=2):
        self.device_count = device_count
        self.log = []          # (op, ...) in call order
        self.errors = []       # (call, CUresult) of failed calls
        self.memory = {}       # ptr -> (buffer, kind, device)
        self.frees = {}        # ptr -> number of frees
        self.retains = []      # devices whose primary context was retained
        self.streams = {}      # handle -> device
        self.events = {}       # handle -> device (its context)
        self._tls = threading.local()
        self._next = itertools.count(0x7000)

    # helpers for tests
    def new_stream(self, device=0):
        h = next(self._next)
        self.streams[h] = device
        return h

    def ops(self, *kinds):
        return [e for e in self.log if not kinds or e[0] in kinds]

    def clear(self):
        self.log.clear()

    @property
    def stack(self):
        st = getattr(self._tls, "stack", None)
        if st is None:
            st = self._tls.stack = []
        return st

    def _current_device(self):
        if not self.stack:
            raise _Fail(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        return self.stack[-1] - 0x100

    def _stream(self, h):
        """A stream handle as ("legacy"|"per-thread"|handle, device)."""
        h = int(h)
        if h in (LEGACY, PER_THREAD):
            return ("legacy" if h == LEGACY else "per-thread", self._current_device())
        if h not in self.streams:
            raise _Fail(CUresult.CUDA_ERROR_INVALID_HANDLE)
        return (h, self.streams[h])

    # init, devices, contexts
    @_api
    def cuInit(self, flags):
        pass

    @_api
    def cuDeviceGetCount(self):
        return self.device_count

    @_api
    def cuDeviceGet(self, i):
        return i

    @_api
    def cuDevicePrimaryCtxRetain(self, dev):
        self.retains.append(dev)
        return 0x100 + dev

    @_api
    def cuCtxGetCurrent(self):
        return self.stack[-1] if self.stack else 0

    @_api
    def cuCtxPushCurrent(self, ctx):
        self.stack.append(int(ctx))

    @_api
    def cuCtxPopCurrent(self):
        return self.stack.pop()

    @_api
    def cuCtxGetDevice(self):
        return self._current_device()

    @_api
    def cuStreamGetCtx(self, h):
        return 0x100 + self._stream(h)[1]

    @_api
    def cuCtxSynchronize(self):
        self.log.append(("device_sync",))

    # memory
    def _alloc(self, n, kind):
        dev = self._current_device()
        buf = ctypes.create_string_buffer(n)
        ptr = ctypes.addressof(buf)
        self.memory[ptr] = (buf, kind, dev)
        self.log.append(("alloc", kind, dev, n))
        return ptr

    def _free(self, ptr, kinds):
        ptr = int(ptr)
        self.frees[ptr] = self.frees.get(ptr, 0) + 1
        entry = self.memory.pop(ptr, None)
        if entry is None or entry[1] not in kinds:
            raise _Fail(CUresult.CUDA_ERROR_INVALID_VALUE)
        self.log.append(("free", entry[1], ptr))

    @_api
    def cuMemAlloc(self, n):
        return self._alloc(n, "device")

    @_api
    def cuMemAllocManaged(self, n, flags):
        return self._alloc(n, "managed")

    @_api
    def cuMemHostAlloc(self, n, flags):
        return self._alloc(n, "pinned")

    @_api
    def cuMemFree(self, ptr):
        self._free(ptr, ("device", "managed"))

    @_api
    def cuMemFreeHost(self, ptr):
        self._free(ptr, ("pinned",))

    def kind_of(self, ptr):
        for base, (buf, kind, _) in self.memory.items():
            if base <= ptr < base + len(buf):
                return kind
        return "pageable"

    # copies
    @_api
    def cuMemcpyAsync(self, dst, src, n, h):
        s = self._stream(h)
        self.log.append(("copy", self.kind_of(int(dst)), self.kind_of(int(src)), n, s))
        ctypes.memmove(int(dst), int(src), n)

    @_api
    def cuMemcpy2DAsync(self, p, h):
        s = self._stream(h)
        if p.srcPitch < p.WidthInBytes or p.dstPitch < p.WidthInBytes:
            raise _Fail(CUresult.CUDA_ERROR_INVALID_VALUE)
        host = CUmemorytype.CU_MEMORYTYPE_HOST
        src = p.srcHost if p.srcMemoryType == host else p.srcDevice
        dst = p.dstHost if p.dstMemoryType == host else p.dstDevice
        self.log.append(("copy2d", self.kind_of(dst), self.kind_of(src), p.WidthInBytes, p.Height, s))
        for r in range(p.Height):
            ctypes.memmove(dst + r * p.dstPitch, src + r * p.srcPitch, p.WidthInBytes)

    @_api
    def cuMemsetD8Async(self, ptr, value, n, h):
        self.log.append(("memset", n, self._stream(h)))
        ctypes.memset(int(ptr), value, n)

    # streams and events
    @_api
    def cuEventCreate(self, flags):
        h = next(self._next)
        self.events[h] = self._current_device()
        self.log.append(("event_create", self.events[h]))
        return h

    @_api
    def cuEventRecord(self, ev, h):
        s = self._stream(h)
        if self.events[int(ev)] != s[1]:
            raise _Fail(CUresult.CUDA_ERROR_INVALID_HANDLE)
        self.log.append(("record", s))

    @_api
    def cuStreamWaitEvent(self, h, ev, flags):
        self.log.append(("wait", self._stream(h)))

    @_api
    def cuStreamSynchronize(self, h):
        self.log.append(("sync", self._stream(h)))


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver(device_count=2)
    monkeypatch.setattr(_cuda_driver, "_runtime", _cuda_driver.Runtime(drv, drv.device_count))
    yield drv
    gc.collect()
    assert drv.errors == [], drv.errors
    assert drv.stack == [], "a context was left current"


def sync_ops(drv):
    """Events recorded / waited on and stream/device syncs, in order."""
    return [e for e in drv.log if e[0] in ("record", "wait", "sync", "device_sync")]


def copies(drv):
    return [e for e in drv.log if e[0] in ("copy", "copy2d")]


def cuda_array(values, device="cuda:0", dtype="float32"):
    host = dr.asarray(np.asarray(values, dtype=dtype))
    return host.to_device(device)


def readback(a):
    """The values of any Array, through a synchronized copy to the host."""
    return np.from_dlpack(dr.from_dlpack(a, device="cpu"))


# --- availability ----------------------------------------------------------

def _reset_loader(monkeypatch):
    monkeypatch.setattr(_cuda_driver, "_runtime", None)
    monkeypatch.setattr(_cuda_driver, "_failure", None)


def _install_driver_module(monkeypatch, driver):
    """Make `from cuda.bindings import driver` yield `driver` (None: fail to
    import), whether or not cuda-python is installed here."""
    import types
    if importlib.util.find_spec("cuda") is None:
        monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    if driver is None:
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    else:
        bindings = types.ModuleType("cuda.bindings")
        bindings.driver = driver
        monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)


def test_without_cuda_python_the_error_names_cuda_python(monkeypatch):
    _reset_loader(monkeypatch)
    _install_driver_module(monkeypatch, None)
    with pytest.raises(cuda.CUDAUnavailableError, match="cuda-python, which is not installed") as info:
        dr.empty((2,), device="cuda:0")
    assert isinstance(info.value, BufferError) and isinstance(info.value, RuntimeError)
    assert not cuda.is_available()


def test_without_a_driver_the_error_names_the_driver(monkeypatch):
    _reset_loader(monkeypatch)

    class NoLibcuda:
        def cuInit(self, flags):
            raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')

    _install_driver_module(monkeypatch, NoLibcuda())
    with pytest.raises(cuda.CUDAUnavailableError, match=r"NVIDIA driver \(libcuda\)"):
        dr.zeros((2,), device="cuda_managed:0")


@pytest.mark.parametrize("count, init_result", [(0, CUresult.CUDA_SUCCESS), (1, CUresult.CUDA_ERROR_NO_DEVICE)])
def test_without_a_device_the_error_names_the_device(monkeypatch, count, init_result):
    _reset_loader(monkeypatch)
    drv = FakeDriver(device_count=count)
    drv.cuInit = lambda flags: (init_result,)
    _install_driver_module(monkeypatch, drv)
    with pytest.raises(cuda.CUDAUnavailableError, match="needs a CUDA device"):
        dr.asarray([1.0, 2.0], device="cuda:0")


def test_a_device_id_past_the_last_device_is_named(fake):
    with pytest.raises(cuda.CUDAUnavailableError, match="CUDA device 5 does not exist: this machine has 2"):
        dr.empty((3,), device="cuda:5")


def test_the_real_loader_here_names_what_is_missing():
    """On this machine (whatever it lacks), the message says which piece."""
    code = (
        "import dlpack_ref as d, numpy as np\n"
        "assert d.zeros(3).tolist() == [0.0, 0.0, 0.0]\n"
        "import dlpack_ref.cuda as c\n"
        "try:\n    d.empty(2, device='cuda:0')\nexcept c.CUDAUnavailableError as e:\n    print('ERR', e)\n"
        "else:\n    print('OK')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("OK") or any(w in out for w in ("cuda-python", "NVIDIA driver", "CUDA device"))


def test_import_and_cpu_work_without_cuda_python():
    code = (
        "import sys; sys.modules['cuda'] = None\n"
        "import dlpack_ref as d, dlpack_ref.cuda as c\n"
        "a = d.asarray([1, 2, 3]); assert d.from_dlpack(a).tolist() == [1, 2, 3]\n"
        "try:\n    a.to_device('cuda:0')\nexcept c.CUDAUnavailableError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "cuda-python" in out


# --- memory ----------------------------------------------------------------

@pytest.mark.parametrize("device, kind", [("cuda:0", "device"), ("cuda:1", "device"),
                                          ("cuda_managed:0", "managed"), ("cpu_pinned", "pinned")])
def test_memory_is_freed_exactly_once_when_the_last_view_dies(fake, device, kind):
    a = dr.zeros((4, 5), dtype="int16", device=device)
    ptr = a.data_ptr
    assert fake.memory[ptr][1] == kind
    view = a[1:, ::2]
    cap = a.__dlpack__(max_version=(1, 3))
    del a
    gc.collect()
    assert fake.frees.get(ptr, 0) == 0
    del view
    gc.collect()
    assert fake.frees.get(ptr, 0) == 0
    b = dr.from_dlpack(cap)
    del cap
    gc.collect()
    assert fake.frees.get(ptr, 0) == 0 and b.data_ptr == ptr
    del b
    gc.collect()
    if kind == "managed":
        assert fake.frees == {ptr: 1}
        assert ptr not in fake.memory
        return
    # Device memory without memory pools (this stand-in has none) and
    # pinned memory go back to a cache, once: the next allocation of the
    # size gets the block, the one after a new block.
    assert fake.frees == {}
    again = dr.zeros((4, 5), dtype="int16", device=device)
    other = dr.zeros((4, 5), dtype="int16", device=device)
    assert again.data_ptr == ptr and other.data_ptr != ptr


def test_primary_context_is_retained_once_per_device_and_never_left_current(fake):
    arrays = [dr.zeros((8,), device=d) for d in ("cuda:0", "cuda:1", "cuda:0", "cuda_managed:1")]
    arrays[0].to_device("cuda:1")
    assert sorted(fake.retains) == [0, 1]
    assert fake.stack == []


def test_zeros_on_cuda_is_a_memset_on_the_legacy_stream(fake):
    a = dr.zeros((3, 4), dtype="float64", device="cuda:1")
    assert fake.ops("memset") == [("memset", 96, ("legacy", 1))]
    assert readback(a).tolist() == [[0.0] * 4] * 3


# --- producer: stream values x producer stream ----------------------------

CONSUMER_STREAMS = ["none", "1", "2", "handle", "cuda_stream_obj", "-1"]


@pytest.mark.parametrize("bad, error, message", [
    (0, ValueError, "stream=0 is ambiguous"),
    (-2, ValueError, "stream=-2 is not valid"),
    (True, TypeError, "not bool"),
    ("s", TypeError, "not str"),
    (1.5, TypeError, "not float"),
])
def test_bad_stream_values_are_refused(fake, bad, error, message):
    a = dr.zeros((2,), device="cuda:0")
    fake.clear()
    with pytest.raises(error, match=message):
        a.__dlpack__(stream=bad)
    with pytest.raises(error, match=message):
        a.to_device("cpu", stream=bad)
    assert sync_ops(fake) == [] and copies(fake) == []


def test_a_bad_cuda_stream_protocol_answer_is_refused(fake):
    a = dr.zeros((2,), device="cuda:0")
    class VersionOne:
        def __cuda_stream__(self):
            return (1, 5)

    with pytest.raises(ValueError, match=r"__cuda_stream__\(\) returned \(1, 5\)"):
        a.__dlpack__(stream=VersionOne())


def test_cpu_arrays_refuse_a_stream():
    a = dr.zeros((2,))
    with pytest.raises(ValueError, match="only stream=None is accepted for CPU memory"):
        a.__dlpack__(stream=1)


# --- producer: dl_device x copy --------------------------------------------

DEVICES = ["cpu", "cuda:0", "cuda:1", "cuda_managed:0", "cpu_pinned"]
DL = {"cpu": (1, 0), "cuda:0": (2, 0), "cuda:1": (2, 1), "cuda_managed:0": (13, 0), "cpu_pinned": (3, 0)}
IN_PLACE = {  # memory -> devices that use it in place (the can_access table)
    "cpu": {"cpu"}, "cuda:0": {"cuda:0"}, "cuda:1": {"cuda:1"},
    "cuda_managed:0": {"cpu", "cuda:0", "cuda:1", "cuda_managed:0"},
    "cpu_pinned": {"cpu", "cuda:0", "cuda:1", "cpu_pinned"},
}
KIND = {"cpu": "pageable", "cuda:0": "device", "cuda:1": "device", "cuda_managed:0": "managed",
        "cpu_pinned": "pinned"}


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("target", DEVICES)
@pytest.mark.parametrize("source", DEVICES)
def test_dl_device_and_copy_matrix(fake, source, target, copy):
    a = dr.asarray(np.arange(6, dtype=np.int32).reshape(2, 3), device=source)
    fake.clear()
    in_place = target in IN_PLACE[source] and copy is not True
    if not in_place and copy is False:
        with pytest.raises(dr.CopyForbiddenError, match="copy=False"):
            a.__dlpack__(max_version=(1, 3), dl_device=DL[target], copy=False)
        assert copies(fake) == []
        return
    cap = a.__dlpack__(max_version=(1, 3), dl_device=DL[target], copy=copy)
    info = read_capsule(cap)
    if in_place:
        assert info["data"] == a.data_ptr
        assert info["device"] == DL[source]          # the true device, e.g. CUDA_MANAGED
        assert not info["flags"] & 2
        assert copies(fake) == []
    else:
        assert info["data"] != a.data_ptr
        assert info["device"] == DL[target]
        assert info["flags"] & 2                     # IS_COPIED
        if source == "cpu" and target == "cpu":
            assert copies(fake) == []                # a host copy
        else:
            [op] = copies(fake)
            # device memory lands on the host in pinned memory (bandwidth)
            target_kind = KIND[target] if target != "cpu" else "pinned" if KIND[source] == "device" else "pageable"
            assert op[:4] == ("copy", target_kind, KIND[source], 24)
    assert readback(dr.from_dlpack(cap)).tolist() == [[0, 1, 2], [3, 4, 5]]


# --- to_device -------------------------------------------------------------


# --- strided copies --------------------------------------------------------

def _run_plan(ops, dst, src):
    for op in ops:
        if op[0] == "1d":
            _, d, s, n = op
            ctypes.memmove(dst + d, src + s, n)
        else:
            _, d, dp, s, sp, w, h = op
            assert dp >= w and sp >= w
            for r in range(h):
                ctypes.memmove(dst + d + r * dp, src + s + r * sp, w)


def _random_view(rng, base):
    view = base
    for axis in range(base.ndim):
        n = view.shape[axis]
        start = rng.randrange(0, max(n // 2, 1))
        step = rng.choice([1, 1, 2, 3, -1, -2])
        sl = [slice(None)] * base.ndim
        sl[axis] = slice(start, None, step) if step > 0 else slice(None, start, step)
        view = view[tuple(sl)]
    return view.transpose(rng.sample(range(base.ndim), base.ndim))


def plan(shape, dst_strides, src_strides, itemsize):
    """The driver copies of a copy, as the core asks for them: its dimensions
    coalesced by the kernels first."""
    coalesced = _coalesce(shape, dst_strides, src_strides)
    return [] if coalesced is None else plan_copy(*coalesced, itemsize)


@pytest.mark.parametrize("seed", range(60))
def test_copy_plan_reproduces_any_strided_layout(seed):
    rng = random.Random(seed)
    shape = [rng.randint(1, 6) for _ in range(rng.randint(0, 4))]
    base = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    src = _random_view(rng, base)
    dst = np.zeros(src.shape, dtype=src.dtype)
    for ops in (plan(src.shape, dst.strides, src.strides, 2), plan_copy(src.shape, dst.strides, src.strides, 2)):
        dst[...] = 0
        _run_plan(ops, dst.ctypes.data, src.ctypes.data)
        np.testing.assert_array_equal(dst, src)


def test_copy_plan_uses_one_copy_for_contiguous_and_2d_for_pitched():
    assert plan((4, 5), (20, 4), (20, 4), 4) == [("1d", 0, 0, 80)]
    assert plan((4, 1, 5), (20, 7, 4), (20, 9, 4), 4) == [("1d", 0, 0, 80)]
    # rows of a column slice: one 2-D copy
    assert plan((4, 2), (8, 4), (20, 4), 4) == [("2d", 0, 8, 0, 20, 8, 4)]
    # two row dimensions that coalesce: one 2-D copy of all their rows
    assert plan((2, 3, 4), (48, 16, 4), (96, 32, 4), 4) == [("2d", 0, 16, 0, 32, 16, 6)]
    # a transposed 2-D source: element-wide 2-D copies, one per row
    assert plan((2, 3), (12, 4), (4, 8), 4) == [("2d", 0, 4, 0, 8, 4, 3), ("2d", 12, 4, 4, 8, 4, 3)]
    # broadcast source (pitch 0): one copy per row
    assert plan((3, 2), (8, 4), (0, 4), 4) == [("1d", 0, 0, 8), ("1d", 8, 0, 8), ("1d", 16, 0, 8)]
    assert plan((0, 3), (12, 4), (4, 8), 4) == []
    # one element: no dimension left
    assert plan((1, 1), (8, 4), (99, 4), 4) == [("1d", 0, 0, 4)]


def test_a_device_copy_is_planned_on_the_kernels_coalescing(fake):
    # The two row dimensions of this view merge only by coalescing (the CUDA
    # layer merges nothing itself): one 2-D copy moves it.
    a = dr.asarray(np.arange(48, dtype=np.float32).reshape(2, 3, 8), device="cuda:0")
    fake.clear()
    out = a[:, :, :4].to_device("cpu")
    assert [e[0] for e in copies(fake)] == ["copy2d"]
    assert np.from_dlpack(out).tolist() == np.arange(48, dtype=np.float32).reshape(2, 3, 8)[:, :, :4].tolist()


def test_strided_device_to_host_copy_end_to_end(fake):
    a = dr.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), device="cuda:0")
    view = a[:, 1:3].T
    fake.clear()
    out = view.to_device("cpu")
    assert [e[0] for e in copies(fake)] == ["copy2d", "copy2d"]
    assert np.from_dlpack(out).tolist() == np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:3].T.tolist()


def test_strided_host_source_is_gathered_on_the_host_first(fake):
    host = dr.asarray(np.arange(12, dtype=np.int32).reshape(3, 4))[:, ::2]
    fake.clear()
    b = host.to_device("cuda:0")
    assert copies(fake) == [("copy", "device", "pageable", 24, ("legacy", 0))]
    assert readback(b).tolist() == [[0, 2], [4, 6], [8, 10]]


# --- consumer --------------------------------------------------------------


def test_the_stream_context_is_per_thread(fake):
    factory = CapsuleFactory()
    producer = ForeignProducer(factory, device=(2, 0), shape=(2,))
    s = fake.new_stream(0)
    seen = []

    def other_thread():
        dr.from_dlpack(producer)
        seen.append(producer.calls[-1])

    with cuda.stream(s):
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert "stream" not in seen[0]


def test_stream_context_refuses_zero():
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        cuda.stream(0)


# NumPy before 2.4 refuses a dl_device it cannot serve with ValueError, later
# versions (and the standard) with BufferError: the consumer treats both alike.
@pytest.mark.parametrize("refusal", [BufferError, ValueError])
def test_consumer_moves_data_when_the_producer_refuses_the_device(fake, refusal):
    factory = CapsuleFactory()
    data = dr.asarray(np.array([4, 5], dtype=np.int64), device="cuda:0")
    s = fake.new_stream(0)

    class NoCrossDevice(ForeignProducer):
        def __dlpack__(self, **kw):
            if "dl_device" in kw:
                self.calls.append(kw)
                raise refusal("cannot reach that device")
            return super().__dlpack__(**kw)

    producer = NoCrossDevice(factory, device=(2, 0), shape=(2,), dtype=(0, 64, 1), data=data.data_ptr)
    with cuda.stream(s):
        out = dr.from_dlpack(producer, device="cpu")
        with pytest.raises(dr.CopyForbiddenError, match="copy=False"):
            dr.from_dlpack(producer, device="cpu", copy=False)
    assert producer.calls[1] == {"max_version": (1, 3), "stream": s}
    assert copies(fake)[-1] == ("copy", "pinned", "device", 16, (s, 0))
    assert np.from_dlpack(out).tolist() == [4, 5]


def test_no_device_wide_sync_anywhere(fake):
    a = cuda_array(np.arange(24, dtype=np.float32).reshape(4, 6))
    s = fake.new_stream(0)
    a[1:3, ::2].to_device("cpu")
    a.__dlpack__(stream=s, dl_device=(1, 0))
    a.to_device("cuda:1").to_device("cuda_managed:0").__dlpack__(dl_device=(1, 0))
    assert fake.ops("device_sync") == []


class _Proto:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.fixture
def layer_calls(fake, monkeypatch):
    """The CUDA layer's stream entries, each recorded (its stream arguments)
    and then run as it is."""
    from dlpack_ref import _cuda_layer
    seen = []

    def recording(name, stream_args):
        real = getattr(_cuda_layer, name)

        def call(*args):
            seen.append((name, args[len(args) - stream_args:]))
            return real(*args)
        monkeypatch.setattr(_cuda_layer, name, call)

    for name in ("copy_array", "export_sync", "export_copy"):
        recording(name, 3)
    recording("imported", 1)
    recording("consumer_stream_for", 0)
    return seen


def _stream_cases(fake):
    """(the stream argument, the fields the header parses it to: given,
    sync, handle) for every kind of CUDA stream value."""
    h = fake.new_stream(0)
    return [(None, (0, 1, 1)), (1, (1, 1, 1)), (2, (1, 1, 2)), (-1, (1, 0, 1)), (h, (1, 1, h)),
            (_Proto(h), (1, 1, h)), (_Proto(0), (1, 1, 1))]


def test_to_device_hands_the_copy_the_parsed_fields(fake, layer_calls):
    """The copy entry receives the struct's fields as plain ints, exactly
    as the header parsed them (None and -1 carry the handle 1; -1 is told
    apart by its sync), for a copy to the host and between devices."""
    for stream, fields in _stream_cases(fake):
        for device in ("cpu", "cuda:1"):
            a = cuda_array([1.0, 2.0, 3.0])
            layer_calls.clear()
            a.to_device(device, stream=stream)
            assert [(n, tuple(map(int, f))) for n, f in layer_calls] == [("copy_array", fields)], (stream, device)
            assert all(type(v) in (bool, int) for v in layer_calls[0][1])


def test_dlpack_hands_the_layer_the_parsed_fields(fake, layer_calls):
    """__dlpack__(stream=...) orders, and __dlpack__(copy=True) and
    dl_device copies run, on the fields of the one parse."""
    for stream, fields in _stream_cases(fake):
        a = cuda_array([1.0, 2.0])          # its write is pending
        layer_calls.clear()
        a.__dlpack__(stream=stream)
        ordered = [("export_sync", fields)] if fields[1] else []    # -1: the header orders nothing
        assert [(n, tuple(map(int, f))) for n, f in layer_calls] == ordered, stream
        layer_calls.clear()
        a.__dlpack__(stream=stream, copy=True)
        expected = [("copy_array", fields), ("export_copy", fields)]
        if fields[2] <= 2:      # the copy's own device's default stream waits for it
            expected.append(("export_sync", fields))
        assert [(n, tuple(map(int, f))) for n, f in layer_calls] == expected, stream
        layer_calls.clear()
        a.__dlpack__(stream=stream, dl_device=(1, 0))
        assert [(n, tuple(map(int, f))) for n, f in layer_calls] == [("copy_array", fields)], stream


@pytest.mark.parametrize("copy", [None, True])
def test_from_dlpack_in_a_stream_context_hands_the_layer_its_fields(fake, layer_calls, copy):
    """from_dlpack inside cuda.stream(s): the producer gets the value s was
    parsed from, the import is recorded on the handle, and a copy to the
    host runs on the fields (given, as a stream was set)."""
    factory = CapsuleFactory()
    for stream, (_, sync, handle) in _stream_cases(fake):
        if stream is None:
            continue
        data = dr.asarray(np.array([4, 5], dtype=np.int64), device="cuda:0")
        producer = ForeignProducer(factory, device=(2, 0), shape=(2,), dtype=(0, 64, 1), data=data.data_ptr)
        with cuda.stream(stream):
            layer_calls.clear()
            out = dr.from_dlpack(producer, device="cpu", copy=copy)
        assert producer.calls[-1]["stream"] == (handle if sync else -1)
        recorded = [(n, tuple(map(int, f))) for n, f in layer_calls]
        assert recorded[0] == ("consumer_stream_for", ())
        assert (("imported", (handle,)) in recorded) == bool(sync), stream
        assert recorded[-1] == ("copy_array", (1, sync, handle)), stream
        assert np.from_dlpack(dr.from_dlpack(out, device="cpu")).tolist() == [4, 5]
