"""The stream model (docs/cuda.md) checked by the data a consumer reads.

Each test leaves work pending on a non-blocking stream, exports or reads the
memory as a consumer that follows the rules would, and reads the bytes on
the consumer's stream. On the simulated driver (tests/support) stream work
runs only when CUDA's rules force it, so a missing event record or stream
wait shows up as stale bytes (the simulator's 0xA5 poison). Marked ``cuda``:
on a real GPU the same tests run unchanged (where they can rarely catch a
race); the checks that only a simulator can make use the ``sim`` fixture.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref import cuda
from dlpack_ref._cuda_memory import MAX_PITCH, plan_copy
from dlpack_ref.testing import DLPackExchangeAPI, read_capsule
from support import cudatest
from support.cudatest import CudaStream
from support.threads import N_THREADS, run_threads

_why = cudatest.unavailable()
pytestmark = cudatest.marks()

N = 1 << 12
VALUES = np.arange(N, dtype=np.float32)


def _d():
    from cuda.bindings import driver
    return driver


def _rt():
    from dlpack_ref._cuda_driver import runtime
    return runtime()


def _ok(out):
    assert not out[0], out[0]
    return out[1] if len(out) == 2 else (out[1:] or None)


class Streams:
    """Non-blocking streams made for one test, synchronized and destroyed after it."""

    def __init__(self):
        self.made = []

    def new(self, device=0):
        rt = _rt()
        pushed = rt.enter(device)
        try:
            s = int(_ok(_d().cuStreamCreate(1)))   # CU_STREAM_NON_BLOCKING
        finally:
            rt.leave(pushed)
        self.made.append(s)
        return s

    def destroy(self, s):
        _ok(_d().cuStreamSynchronize(s))
        _ok(_d().cuStreamDestroy(s))
        self.made.remove(s)


@pytest.fixture
def streams():
    s = Streams()
    yield s
    for h in list(s.made):
        s.destroy(h)


def read_on(stream, ptr, nbytes, device=0):
    """The bytes at ``ptr`` as a consumer on ``stream`` reads them: a copy
    into pageable host memory enqueued there (it returns once complete)."""
    out = np.empty(nbytes, dtype=np.uint8)
    rt = _rt()
    pushed = rt.enter(device)
    try:
        _ok(_d().cuMemcpyAsync(out.ctypes.data, ptr, nbytes, stream))
    finally:
        rt.leave(pushed)
    return out


def as_f32(raw):
    return raw.view(np.float32)


def pending_on(stream, device="cuda:0", values=VALUES):
    """A fresh Array whose data is still being copied in on ``stream``."""
    return dr.asarray(values).to_device(device, stream=stream)


# --- issue items 1-7 ----------------------------------------------------------

def test_assignment_through_a_view_is_seen_by_exports_of_the_base(streams):
    s0, c = streams.new(), streams.new()
    base = pending_on(s0, values=np.zeros(16, dtype=np.float32))
    base[4:12] = dr.asarray(np.arange(100, 108, dtype=np.float32), device="cuda:0")
    base.__dlpack__(max_version=(1, 3), stream=c)
    expected = np.zeros(16, dtype=np.float32)
    expected[4:12] = np.arange(100, 108)
    assert as_f32(read_on(c, base.data_ptr, 64)).tolist() == expected.tolist()


@pytest.mark.parametrize("reader", ["memoryview", "numpy", "tolist"])
def test_host_readers_of_managed_memory_wait_for_the_memset(reader):
    m = dr.zeros(64, dtype="uint8", device="cuda_managed:0")
    got = {"memoryview": lambda: bytes(memoryview(m)),
           "numpy": lambda: np.from_dlpack(m).tobytes(),
           "tolist": lambda: bytes(m.tolist())}[reader]()
    assert got == bytes(64)


def test_host_readers_of_pinned_memory_wait_for_the_copy(streams):
    s = streams.new()
    p = pending_on(s).to_device("cpu_pinned", stream=s)
    assert np.frombuffer(memoryview(p), dtype=np.float32).tolist() == VALUES.tolist()


STREAM_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
FROM_PY_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
TO_PY_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", ctypes.pythonapi))
_DecRef = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("Py_DecRef", ctypes.pythonapi))


def _table():
    cap = dr.Array.__dict__["__dlpack_c_exchange_api__"]
    return DLPackExchangeAPI.from_address(_GetPointer(cap, b"dlpack_exchange_api"))


def _delete_managed(address):
    deleter = ctypes.c_void_p.from_address(address + 16).value   # DLManagedTensorVersioned.deleter
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(address)


@pytest.mark.parametrize("ours", ["legacy", "stream"])
def test_exchange_api_export_is_ordered_on_the_reported_stream(streams, ours):
    """A consumer following the protocol: take the tensor, ask
    current_work_stream, make its stream wait for that one, read."""
    s0, c, mine = streams.new(), streams.new(), streams.new()
    a = pending_on(s0)
    api = _table()
    reported = ctypes.c_void_p(0)
    out = ctypes.c_void_p(0)
    with cuda.stream(mine if ours == "stream" else 1):
        assert FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(a), ctypes.byref(out)) == 0
        assert STREAM_T(api.current_work_stream)(2, 0, ctypes.byref(reported)) == 0
    producer = reported.value or 1
    assert producer == (mine if ours == "stream" else 1)
    rt = _rt()
    d = _d()
    pushed = rt.enter(0)
    try:
        ev = _ok(d.cuEventCreate(2))
        _ok(d.cuEventRecord(ev, producer))
        _ok(d.cuStreamWaitEvent(c, ev, 0))
        _ok(d.cuEventDestroy(ev))
    finally:
        rt.leave(pushed)
    try:
        assert as_f32(read_on(c, a.data_ptr, N * 4)).tolist() == VALUES.tolist()
    finally:
        _delete_managed(out.value)


def test_exchange_api_import_waits_for_the_work_enqueued_on_the_reported_stream(streams):
    """to_py_object: the library wrote on the stream current_work_stream
    reported; a later to_device("cpu") sees it."""
    s = streams.new()
    target = dr.empty(N, dtype="float32", device="cuda:0")
    src = dr.asarray(VALUES, device="cuda:0")
    cap = target.__dlpack__(max_version=(1, 3))
    address = _GetPointer(cap, b"dltensor_versioned")
    _SetName(cap, b"used_dltensor_versioned")
    api = _table()
    with cuda.stream(s):
        reported = ctypes.c_void_p(0)
        assert STREAM_T(api.current_work_stream)(2, 0, ctypes.byref(reported)) == 0
        assert reported.value == s
        rt = _rt()
        pushed = rt.enter(0)
        try:
            _ok(_d().cuMemcpyAsync(target.data_ptr, src.data_ptr, N * 4, s))
        finally:
            rt.leave(pushed)
        obj = ctypes.c_void_p(0)
        assert TO_PY_T(api.managed_tensor_to_py_object_no_sync)(address, ctypes.byref(obj)) == 0
    b = ctypes.cast(obj.value, ctypes.py_object).value
    _DecRef(obj.value)
    assert b.data_ptr == target.data_ptr
    assert np.from_dlpack(b.to_device("cpu")).tolist() == VALUES.tolist()


def test_per_thread_stream_is_the_writing_threads(streams):
    c = streams.new()
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("a", pending_on(2)))
    t.start()
    t.join()
    a = box["a"]
    done = threading.Event()

    def export():
        a.__dlpack__(max_version=(1, 3), stream=c)
        done.set()

    t = threading.Thread(target=export)
    t.start()
    t.join()
    assert done.is_set()
    assert as_f32(read_on(c, a.data_ptr, N * 4)).tolist() == VALUES.tolist()


def test_a_destroyed_consumer_stream_is_never_used_again(streams):
    s, c = streams.new(), streams.new()
    x = dr.asarray(VALUES, device="cuda:0")
    with cuda.stream(s):
        b = dr.from_dlpack(x)
    assert b.data_ptr == x.data_ptr
    streams.destroy(s)
    b.__dlpack__(max_version=(1, 3), stream=c)    # no cuStreamGetCtx/cuEventRecord on s
    assert as_f32(read_on(c, b.data_ptr, N * 4)).tolist() == VALUES.tolist()


def _devices():
    return _rt().device_count if _why is None else 0


@pytest.mark.skipif("_devices() < 2", reason="needs two CUDA devices")
def test_pinned_memory_for_stream_1_orders_the_current_devices_legacy_stream(streams):
    s0 = streams.new(0)
    p = pending_on(s0, device="cpu_pinned")
    rt = _rt()
    pushed = rt.enter(1)
    try:
        assert rt.current_device() == 1
        p.__dlpack__(max_version=(1, 3), stream=1)
        got = read_on(1, p.data_ptr, N * 4, device=1)
    finally:
        rt.leave(pushed)
    assert as_f32(got).tolist() == VALUES.tolist()


def test_pinned_memory_and_the_current_device_touch_no_unused_gpu(sim):
    """Only cuda:1 in use: no context is retained on GPU 0 (a fresh process)."""
    if _devices() < 2:
        pytest.skip("needs two CUDA devices")
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import sys; sys.path.insert(0, {here!r})\n"
        "from support import cudasim\n"
        "lib = cudasim.load(); sim = cudasim.Simulator(lib)\n"
        "import dlpack_ref as dr, numpy as np\n"
        "a = dr.zeros(4, device='cuda:1')\n"
        "p = dr.asarray(np.arange(4.0), device='cpu_pinned')\n"
        "b = p.to_device('cuda:1')\n"
        "assert np.from_dlpack(b.to_device('cpu')).tolist() == [0.0, 1.0, 2.0, 3.0]\n"
        "print(sim.retained(0), sim.retained(1), len(sim.violations()))\n")
    env = dict(os.environ, DLPACK_REF_CUDA_SIM="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "0"]


def test_copy_plans_keep_2d_pitches_within_the_driver_limit():
    big = MAX_PITCH + 1
    ops = plan_copy((3, 4), (16, 4), (big, 4), 4)
    assert ops and all(op[0] == "1d" for op in ops)
    assert [op[2] for op in ops] == [0, big, 2 * big]
    ok = plan_copy((3, 4), (16, 4), (MAX_PITCH - 3, 4), 4)
    assert ok == [("2d", 0, 16, 0, MAX_PITCH - 3, 16, 3)]


def test_short_lived_threads_leave_no_events_behind(sim, streams):
    c = streams.new()
    s = streams.new()
    before = sim.live_events()

    def work():
        a = pending_on(s)
        a.__dlpack__(max_version=(1, 3), stream=c)
        assert as_f32(read_on(c, a.data_ptr, N * 4))[-1] == N - 1

    for _ in range(20):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    gc.collect()
    assert sim.live_events() - before <= 2


def test_memory_is_not_freed_under_pending_work(sim, streams):
    s = streams.new()
    a = pending_on(s)
    del a
    gc.collect()
    # The simulator's cuMemFree does not wait: a copy left pending on the
    # freed memory would be reported (by the sim fixture) when s runs.
    _ok(_d().cuStreamSynchronize(s))


def test_a_host_copy_on_a_stream_keeps_its_pinned_memory_until_done(sim, streams):
    s, c = streams.new(), streams.new()
    h = pending_on(s).to_device("cpu", stream=c)
    assert h.device == dr.Device("cpu")
    del h
    gc.collect()
    _ok(_d().cuStreamSynchronize(c))   # a copy into freed memory would be reported


# --- seed 004 and the specification's stream cases ----------------------------

def test_cpu_dl_device_with_stream_none_is_readable_on_return(streams):
    a = pending_on(streams.new())
    cap = a.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    info = read_capsule(cap)
    assert info["device"] == (1, 0)
    assert np.from_dlpack(dr.from_dlpack(cap)).tolist() == VALUES.tolist()


def test_cpu_dl_device_with_a_consumer_stream_is_enqueued_not_blocking(streams):
    from support import cudasim
    s, c = streams.new(), streams.new()
    values = np.random.default_rng().random(N, dtype=np.float32)   # not what reused memory holds
    a = pending_on(s, values=values)
    b = dr.from_dlpack(a.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=c))
    if cudasim.loaded() is not None:
        # Nothing ran yet: the copy waits on c, after a's copy on s.
        assert cudasim.Simulator(cudasim.loaded()).pending() > 0
        assert np.frombuffer(bytes(memoryview(b)), dtype=np.float32)[:4].tolist() != values[:4].tolist()
    _ok(_d().cuStreamSynchronize(c))
    assert np.from_dlpack(b).tolist() == values.tolist()


@pytest.mark.parametrize("stream", [None, "handle"])
def test_managed_memory_asked_as_cpu_is_exported_in_place_as_managed(streams, stream):
    m = pending_on(streams.new(), device="cuda_managed:0")
    c = streams.new()
    cap = m.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=None if stream is None else c)
    info = read_capsule(cap)
    assert info["device"] == (13, 0) and info["data"] == m.data_ptr and not info["flags"] & 2
    if stream is None:
        got = np.frombuffer(ctypes.string_at(m.data_ptr, N * 4), dtype=np.float32)
    else:
        got = as_f32(read_on(c, m.data_ptr, N * 4))
    assert got.tolist() == VALUES.tolist()


@pytest.mark.parametrize("kind", ["legacy", "per_thread", "handle", "cuda_stream", "cuda_stream_null"])
def test_every_stream_value_orders_the_consumer_after_the_pending_work(streams, kind):
    s = streams.new()
    a = pending_on(s)
    c = streams.new()
    value, reader = {"legacy": (1, 1), "per_thread": (2, 2), "handle": (c, c),
                     "cuda_stream": (CudaStream(c), c), "cuda_stream_null": (CudaStream(0), 1)}[kind]
    a.__dlpack__(max_version=(1, 3), stream=value)
    assert as_f32(read_on(reader, a.data_ptr, N * 4)).tolist() == VALUES.tolist()


@pytest.mark.thread_unsafe(reason="expects stale bytes, which another thread's reads of reused pool memory change")
def test_stream_minus_one_orders_nothing(sim, streams):
    s, c = streams.new(), streams.new()
    a = pending_on(s)
    a.__dlpack__(max_version=(1, 3), stream=-1)
    assert read_on(c, a.data_ptr, 4).tobytes() == b"\xa5" * 4


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (True, TypeError), ("1", TypeError),
                                        (CudaStream(-5), ValueError)])
def test_bad_stream_values_are_refused(bad, error):
    a = dr.zeros(4, device="cuda:0")
    with pytest.raises(error):
        a.__dlpack__(max_version=(1, 3), stream=bad)


@pytest.mark.parametrize("value", [1, 2, -1, CudaStream(5)])
def test_cpu_memory_accepts_only_stream_none(value):
    with pytest.raises(ValueError, match="only stream=None"):
        dr.zeros(4).__dlpack__(stream=value)


class CountedStream(CudaStream):
    """A __cuda_stream__ object that counts how often its handle is asked for."""

    def __init__(self, handle):
        super().__init__(handle)
        self.asked = 0

    def __cuda_stream__(self):
        self.asked += 1
        return super().__cuda_stream__()


@pytest.mark.parametrize("how", ["in place", "copy", "to_device", "cuda.stream"])
def test_a_stream_is_read_once_where_it_enters(streams, how):
    # The stream argument is checked where it enters (the producer call, the
    # core's to_device, dlpack_ref.cuda.stream) and the CUDA layer gets the
    # checked handle: __cuda_stream__ is asked exactly once, and the work is
    # ordered on that handle.
    c = streams.new()
    value = CountedStream(c)
    a = pending_on(streams.new())
    if how == "in place":
        a.__dlpack__(max_version=(1, 3), stream=value)
        got = as_f32(read_on(c, a.data_ptr, N * 4))
    elif how == "copy":
        out = dr.from_dlpack(a.__dlpack__(max_version=(1, 3), stream=value, copy=True))
        got = as_f32(read_on(c, out.data_ptr, N * 4))
    elif how == "to_device":
        out = a.to_device("cuda_managed:0", stream=value)
        got = as_f32(read_on(c, out.data_ptr, N * 4))
    else:
        with cuda.stream(value):
            out = dr.from_dlpack(a)
        got = as_f32(read_on(c, out.data_ptr, N * 4))
    assert value.asked == 1
    assert got.tolist() == VALUES.tolist()


@pytest.mark.skipif("_devices() < 2", reason="needs two CUDA devices")
def test_peer_copy_is_ordered_for_a_stream_of_the_target_device(streams):
    s0, c1 = streams.new(0), streams.new(1)
    b = pending_on(s0).to_device("cuda:1")
    assert b.device == dr.Device("cuda", 1)
    b.__dlpack__(max_version=(1, 3), stream=c1)
    assert as_f32(read_on(c1, b.data_ptr, N * 4, device=1)).tolist() == VALUES.tolist()


@pytest.mark.skipif("_devices() < 2", reason="needs two CUDA devices")
def test_a_device_1_array_exported_while_device_0_is_current(streams):
    s1 = streams.new(1)
    a = pending_on(s1, device="cuda:1")
    rt = _rt()
    d = _d()
    pushed = rt.enter(0)
    try:
        before = int(_ok(d.cuCtxGetCurrent()))
        a.__dlpack__(max_version=(1, 3), stream=1)      # device 1's legacy stream
        assert int(_ok(d.cuCtxGetCurrent())) == before
    finally:
        rt.leave(pushed)
    assert as_f32(read_on(1, a.data_ptr, N * 4, device=1)).tolist() == VALUES.tolist()


def test_copy_true_on_cuda_copies_after_the_pending_work(streams):
    s, c = streams.new(), streams.new()
    a = pending_on(s)
    b = dr.from_dlpack(a.__dlpack__(max_version=(1, 3), copy=True, stream=c))
    assert b.data_ptr != a.data_ptr
    assert as_f32(read_on(c, b.data_ptr, N * 4)).tolist() == VALUES.tolist()


def test_strided_views_copy_correctly_every_direction():
    base = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    expected = base[1:, ::2, ::-3].transpose(2, 0, 1)
    for device in ("cuda:0", "cuda_managed:0", "cpu_pinned"):
        view = dr.asarray(base, device=device)[1:, ::2, ::-3].permute_dims((2, 0, 1))
        assert np.from_dlpack(view.to_device("cpu")).tolist() == expected.tolist()
        back = dr.asarray(expected).to_device(device)
        assert back.tolist() == expected.tolist()


def test_no_device_wide_synchronization(sim, streams):
    s, c = streams.new(), streams.new()
    a = pending_on(s)
    a.__dlpack__(max_version=(1, 3), stream=c)
    a.to_device("cpu")
    a.to_device("cuda_managed:0").tolist()
    a[1:3] = dr.zeros(2, dtype="float32", device="cuda:0")
    assert sim.counter("ctx_sync") == 0


# --- cross-device copies: ordered for every stream of the target device -------
#
# The source is on cuda:0 with its write pending on a non-blocking stream;
# each path moves it to cuda:1, the result is exported with a stream of
# cuda:1 and read there. The peer copy runs on a stream of device 0 (Copies,
# docs/cuda.md), so only an event recorded after it and waited on by the
# export orders the target's stream. Values are random per test: memory
# reused from an earlier test must not pass for the copy's bytes.

class _OldProducer:
    """A pre-1.0 producer: no max_version, dl_device or copy, so
    from_dlpack copies across devices itself."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _zeros_on_1(n):
    return dr.zeros(n, dtype="float32", device="cuda:1")


def _assign(a):
    b = _zeros_on_1(N)
    b[...] = a
    return b


def _assign_view(a):
    base = _zeros_on_1(2 * N)
    base[N:] = a
    return base[N:]


def _in_target_stream_context(a, streams):
    with cuda.stream(streams.new(1)):
        return dr.from_dlpack(a, device="cuda:1")


CROSS_DEVICE_PATHS = {
    "to_device": lambda a, streams: a.to_device("cuda:1"),
    "to_device_on_a_source_stream": lambda a, streams: a.to_device("cuda:1", stream=streams.new(0)),
    "from_dlpack_device": lambda a, streams: dr.from_dlpack(a, device="cuda:1"),
    "from_dlpack_device_copy": lambda a, streams: dr.from_dlpack(a, device="cuda:1", copy=True),
    "from_dlpack_device_in_a_target_stream_context": _in_target_stream_context,
    "from_dlpack_device_old_producer": lambda a, streams: dr.from_dlpack(_OldProducer(a), device="cuda:1"),
    "dlpack_dl_device_copy": lambda a, streams: dr.from_dlpack(
        a.__dlpack__(max_version=(1, 3), dl_device=(2, 1), copy=True)),
    "assignment": lambda a, streams: _assign(a),
    "assignment_into_a_view": lambda a, streams: _assign_view(a),
}


def _target_stream(kind, streams):
    """(the stream value an export is given, the stream that reads) on cuda:1."""
    if kind == "handle":
        c = streams.new(1)
        return c, c
    return {"legacy": (1, 1), "per_thread": (2, 2)}[kind]


@pytest.mark.skipif("_devices() < 2", reason="needs two CUDA devices")
@pytest.mark.parametrize("target", ["legacy", "per_thread", "handle"])
@pytest.mark.parametrize("path", sorted(CROSS_DEVICE_PATHS))
def test_a_cross_device_result_is_ordered_for_every_stream_of_the_target(streams, path, target):
    values = np.random.default_rng().random(N, dtype=np.float32)
    a = pending_on(streams.new(0), values=values)
    b = CROSS_DEVICE_PATHS[path](a, streams)
    assert b.device == dr.Device("cuda", 1) and b.data_ptr != a.data_ptr
    value, reader = _target_stream(target, streams)
    b.__dlpack__(max_version=(1, 3), stream=value)
    assert as_f32(read_on(reader, b.data_ptr, N * 4, device=1)).tolist() == values.tolist()


@pytest.mark.skipif("_devices() < 2", reason="needs two CUDA devices")
@pytest.mark.parametrize("target", ["none", "legacy", "per_thread", "handle"])
def test_a_dl_device_copy_to_another_gpu_is_ordered_on_the_consumers_stream_there(streams, target):
    """__dlpack__(dl_device=(CUDA, 1), copy=True, stream=s): s names a
    stream of cuda:1, where the consumer uses the copy (None: its legacy
    default stream)."""
    values = np.random.default_rng().random(N, dtype=np.float32)
    a = pending_on(streams.new(0), values=values)
    value, reader = (None, 1) if target == "none" else _target_stream(target, streams)
    cap = a.__dlpack__(max_version=(1, 3), dl_device=(2, 1), copy=True, stream=value)
    info = read_capsule(cap)
    assert info["device"] == (2, 1) and info["flags"] & 2
    assert as_f32(read_on(reader, info["data"], N * 4, device=1)).tolist() == values.tolist()
    del cap     # read while the capsule holds the copy


@pytest.mark.skipif("_devices() < 2", reason="needs two CUDA devices")
@pytest.mark.parametrize("device_id", [0, 1])
def test_a_dl_device_copy_into_managed_memory_with_stream_none_is_readable_by_the_host(streams, device_id):
    """Managed memory exported with stream=None may be read on the host
    (the stream model): a copy into it is waited for like any write."""
    values = np.random.default_rng().random(N, dtype=np.float32)
    a = pending_on(streams.new(0), values=values)
    cap = a.__dlpack__(max_version=(1, 3), dl_device=(13, device_id), copy=True)
    info = read_capsule(cap)
    assert info["device"] == (13, device_id) and info["flags"] & 2
    got = np.frombuffer(ctypes.string_at(info["data"], N * 4), dtype=np.float32)
    assert got.tolist() == values.tolist()
    del cap


# --- threads sharing one pending-work record -----------------------------------
#
# Each block has one record, read and replaced by every thread that writes
# or exports it. These tests start their own threads (8, as the free
# threading tests do); pytest-run-parallel runs them once.

ROUNDS = int(os.environ.get("DLPACK_REF_STRESS_ROUNDS", "40"))


@pytest.mark.thread_unsafe(reason="patches the shared runtime and starts its own threads")
def test_an_export_while_another_thread_turns_the_legacy_write_into_an_event(streams, monkeypatch):
    """Thread A exports a block whose last write is on the legacy stream
    and is paused inside that export, between reading the record and
    replacing it with an event; thread B exports the same block meanwhile.
    B's stream must still wait for the write (it did not: B saw a record
    with nothing pending, and read stale bytes)."""
    values = np.random.default_rng().random(N, dtype=np.float32)
    a = dr.asarray(values, device="cuda:0")      # copied in on the legacy stream
    c_a, c_b = streams.new(), streams.new()
    rt = _rt()
    take_event = rt.take_event
    a_thread, b_started = [], threading.Event()

    def paused_take_event(device_id):
        if threading.get_ident() in a_thread:
            b_started.wait(5)
            time.sleep(0.2)      # B runs its export now (or blocks on the record)
        return take_event(device_id)

    monkeypatch.setattr(rt, "take_event", paused_take_event, raising=False)
    got = {}

    def export_a():
        a_thread.append(threading.get_ident())
        a.__dlpack__(max_version=(1, 3), stream=c_a)

    def export_b():
        b_started.set()
        a.__dlpack__(max_version=(1, 3), stream=c_b)
        got["b"] = as_f32(read_on(c_b, a.data_ptr, N * 4))

    threads = [threading.Thread(target=export_a), threading.Thread(target=export_b)]
    threads[0].start()
    while not a_thread:
        time.sleep(0.001)
    threads[1].start()
    for t in threads:
        t.join(10)
    monkeypatch.undo()
    assert got["b"].tolist() == values.tolist()
    assert as_f32(read_on(c_a, a.data_ptr, N * 4)).tolist() == values.tolist()


@pytest.mark.thread_unsafe(reason="starts its own threads")
def test_eight_threads_writing_views_and_exporting_one_block_read_their_bytes(streams):
    """Every round, each of 8 threads fills its slice of one shared block
    from data still pending on its own non-blocking stream (an assignment
    into a view), exports the view and the whole block to another
    non-blocking stream of its own and reads its slice there; then one
    export per thread of a fresh view reads the whole block."""
    K = 256
    base = dr.zeros(N_THREADS * K, dtype="float32", device="cuda:0")
    own = [(streams.new(), streams.new()) for _ in range(N_THREADS)]
    rng = np.random.default_rng()
    rounds = [rng.random((N_THREADS, K), dtype=np.float32) for _ in range(ROUNDS)]
    barrier = threading.Barrier(N_THREADS, timeout=60)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)     # with the GIL: switch threads inside the record's updates

    def work(k):
        try:
            rounds_of(k)
        except BaseException:
            barrier.abort()     # the others stop waiting for this thread
            raise

    def rounds_of(k):
        s, c = own[k]
        for r in range(ROUNDS):
            mine = rounds[r][k]
            view = base[k * K:(k + 1) * K]
            view[...] = pending_on(s, values=mine)
            view.__dlpack__(max_version=(1, 3), stream=c)
            assert as_f32(read_on(c, view.data_ptr, K * 4)).tolist() == mine.tolist(), (k, r, "view")
            base.__dlpack__(max_version=(1, 3), stream=c)
            assert as_f32(read_on(c, view.data_ptr, K * 4)).tolist() == mine.tolist(), (k, r, "base")
            barrier.wait()
            whole = base[:]
            whole.__dlpack__(max_version=(1, 3), stream=2)
            assert as_f32(read_on(2, whole.data_ptr, N_THREADS * K * 4)).tolist() == \
                rounds[r].ravel().tolist(), (k, r, "whole")
            barrier.wait()

    try:
        run_threads(work)
    finally:
        sys.setswitchinterval(switch)


def test_tpu_pinned_memory_is_host_memory_to_the_cuda_layer(factory):
    """kDLTPUHost memory (host memory the TPU runtime pinned) is copied onto a
    GPU as the driver copies host memory, and cannot be copied onto: dlpack-ref
    does not allocate it."""
    a = dr.from_dlpack(factory.make(shape=(N,), device=(20, 0), fill=VALUES.tobytes()))
    g = dr.from_dlpack(a, device="cuda:0")
    assert g.device == dr.Device("cuda", 0) and g.data_ptr != a.data_ptr
    assert g.to_device("cpu").tolist() == VALUES.tolist()
    with pytest.raises(BufferError, match="cannot allocate memory on tpu_pinned:0"):
        g.to_device("tpu_pinned")
    del a, g
    gc.collect()
    assert factory.deleter_calls == 1
