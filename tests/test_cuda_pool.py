"""The allocation model (docs/cuda.md): copies in a loop allocate and free
nothing after the first, memory is freed and reused in stream order, the
fallback without memory pools, and device-to-host copies into pinned
memory.

Marked ``cuda``: on the simulated driver (tests/support) freed pool memory
is poisoned when its free runs and work that runs after it is reported, so
a free or a reuse out of stream order shows up as stale bytes or a
violation; on a real GPU the same tests run unchanged (the counts of driver
calls need the simulator, the ``sim`` fixture).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref._cuda_memory import MAX_PITCH
from support import cudatest

pytestmark = cudatest.marks()

N = 1 << 14
VALUES = np.arange(N, dtype=np.float32)
# Driver calls that allocate or free outside a pool, and the pool growing.
PER_CALL = ("mem_alloc", "mem_free", "host_alloc", "host_free", "pool_grow", "pool_release")


def call(name, *args):
    """``cuda.bindings.driver.<name>(*args)`` with device 0's primary
    context current; its value (the call must succeed)."""
    from cuda.bindings import driver
    from dlpack_ref._cuda_driver import runtime
    rt = runtime()
    pushed = rt.enter(0)
    try:
        out = getattr(driver, name)(*args)
    finally:
        rt.leave(pushed)
    assert not out[0], (name, out[0])
    return out[1] if len(out) == 2 else (out[1:] or None)


def enum(kind, name):
    from cuda.bindings import driver
    return getattr(getattr(driver, kind), name)


@pytest.fixture
def stream_pair():
    """Two non-blocking streams of device 0, synchronized and destroyed after."""
    made = [int(call("cuStreamCreate", 1)) for _ in range(2)]
    yield made
    for s in made:
        call("cuStreamSynchronize", s)
        call("cuStreamDestroy", s)


def read_on(stream, ptr, nbytes):
    """The bytes at ``ptr`` as float32, as a consumer on ``stream`` reads them."""
    out = np.empty(nbytes, dtype=np.uint8)
    call("cuMemcpyAsync", out.ctypes.data, ptr, nbytes, stream)
    return out.view(np.float32)


def _pool_supported():
    attr = enum("CUdevice_attribute", "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED")
    return bool(call("cuDeviceGetAttribute", attr, call("cuDeviceGet", 0)))


# --- no allocation per call after warm-up ------------------------------------

def _copies(kind, stream):
    host = dr.asarray(VALUES)
    dev = host.to_device("cuda:0")
    if kind == "H2D":
        return lambda: host.to_device("cuda:0", stream=stream)
    if kind == "D2H":
        return lambda: dev.to_device("cpu", stream=stream)
    if kind == "D2D":
        return lambda: dev.copy()
    if kind == "copy=True":
        return lambda: dr.from_dlpack(dev.__dlpack__(max_version=(1, 3), copy=True, stream=stream))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["H2D", "D2H", "D2D", "copy=True"])
@pytest.mark.parametrize("on", ["legacy", "stream"])
def test_copies_in_a_loop_allocate_nothing_after_warm_up(sim, stream_pair, kind, on):
    stream = None if on == "legacy" else stream_pair[0]
    copy = _copies(kind, stream)

    def loop():
        results = []
        for i in range(20):
            out = copy()
            if i % 5 == 0:
                results.append(out)   # some stay alive while others are freed
        if stream is not None:
            call("cuStreamSynchronize", stream)
        for out in results:
            assert np.from_dlpack(out.to_device("cpu")).tolist() == VALUES.tolist()
        del results, out
        gc.collect()

    loop()                                             # warm-up
    before = sim.counters(*PER_CALL, "alloc_async", "free_async")
    loop()
    after = sim.counters(*PER_CALL, "alloc_async", "free_async")
    assert {k: after[k] - before[k] for k in PER_CALL} == {k: 0 for k in PER_CALL}
    if kind != "D2H" and _pool_supported():
        # device results come from the pool, in stream order
        assert after["alloc_async"] - before["alloc_async"] >= 20
        assert after["free_async"] - before["free_async"] >= 20


def test_the_default_pool_keeps_freed_memory(stream_pair):
    if not _pool_supported():
        pytest.skip("device 0 has no memory pools")
    dr.zeros(4, device="cuda:0")          # the pool is set up on first use
    dev = call("cuDeviceGet", 0)
    pool = call("cuDeviceGetDefaultMemPool", dev)
    threshold = call("cuMemPoolGetAttribute", pool, enum("CUmemPool_attribute", "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD"))
    assert int(threshold) >= int(call("cuDeviceTotalMem", dev)) // 4


# --- stream order of frees and reuse ----------------------------------------

# A size no other test allocates, so that the pool's only block of it is
# the one freed here.
M = 1_234_567
M_VALUES = np.arange(M, dtype=np.float32)


def test_memory_freed_under_a_pending_write_is_reused_after_it(sim, stream_pair):
    s, c = stream_pair
    a = dr.asarray(M_VALUES + 1).to_device("cuda:0", stream=s)   # pending on s
    ptr = a.data_ptr
    del a
    gc.collect()
    # The next allocation of the size gets the block (freed on the legacy
    # stream after s's write, allocated on c: the pool orders c after it).
    b = dr.asarray(M_VALUES).to_device("cuda:0", stream=c)
    assert b.data_ptr == ptr
    np.testing.assert_array_equal(read_on(c, b.data_ptr, M * 4), M_VALUES)
    # a's write had to run before the free (else: reported when s runs)
    call("cuStreamSynchronize", s)
    np.testing.assert_array_equal(read_on(c, b.data_ptr, M * 4), M_VALUES)


def test_a_pending_read_of_freed_memory_sees_the_old_values(stream_pair):
    s, c = stream_pair
    old = VALUES + 7
    a = dr.asarray(old).to_device("cuda:0")
    h = a.to_device("cpu", stream=c)                 # a read of a, pending on c
    del a
    gc.collect()
    new = [dr.asarray(VALUES).to_device("cuda:0", stream=s) for _ in range(3)]   # reuse, written on s
    call("cuStreamSynchronize", s)
    call("cuStreamSynchronize", c)
    assert np.from_dlpack(h).tolist() == old.tolist()
    for b in new:
        assert np.from_dlpack(b.to_device("cpu")).tolist() == VALUES.tolist()


def test_a_freed_block_reused_on_another_stream_is_not_overwritten_by_its_free(sim, stream_pair):
    s, c = stream_pair
    a = dr.asarray(M_VALUES + 3).to_device("cuda:0", stream=s)
    ptr = a.data_ptr
    del a
    gc.collect()
    b = dr.asarray(M_VALUES).to_device("cuda:0", stream=c)
    assert b.data_ptr == ptr
    # b's data is there on c and stays there once the free has run (a free
    # that ran after b's copy would have poisoned it).
    for each in (c, 1, s):
        call("cuStreamSynchronize", each)
    np.testing.assert_array_equal(read_on(c, b.data_ptr, M * 4), M_VALUES)


def test_a_cached_pinned_block_is_reused_after_its_pending_write(stream_pair):
    s, c = stream_pair
    old = dr.asarray(M_VALUES + 5).to_device("cuda:0", stream=s)
    h = old.to_device("cpu", stream=c)          # pending on c (after s)
    ptr = h.data_ptr
    del h
    gc.collect()                                  # its pinned block goes back, the copy still pending
    g = dr.asarray(M_VALUES).to_device("cuda:0").to_device("cpu")
    assert g.data_ptr == ptr
    np.testing.assert_array_equal(np.from_dlpack(g), M_VALUES)
    call("cuStreamSynchronize", c)               # the old copy ran before, not over g
    np.testing.assert_array_equal(np.from_dlpack(g), M_VALUES)


def test_the_simulator_reports_work_that_runs_after_an_async_free(sim, stream_pair):
    """The check the tests above rely on: a read left on another stream,
    unordered, runs after cuMemFreeAsync and is reported; the bytes were
    poisoned when the free ran."""
    if not _pool_supported():
        pytest.skip("device 0 has no memory pools")
    s, c = stream_pair
    out = np.zeros(64, dtype=np.uint8)
    ptr = call("cuMemAllocAsync", 64, s)
    call("cuMemsetD8Async", ptr, 1, 64, s)
    ev = call("cuEventCreate", 2)
    call("cuEventRecord", ev, s)
    call("cuStreamWaitEvent", c, ev, 0)
    pinned = call("cuMemHostAlloc", 64, 1)
    call("cuMemcpyAsync", pinned, ptr, 64, c)       # ordered after the memset, not before the free
    call("cuMemFreeAsync", ptr, s)
    call("cuStreamSynchronize", s)                  # the free runs: poison
    call("cuStreamSynchronize", c)                  # the copy runs after it
    ctypes.memmove(out.ctypes.data, int(pinned), 64)
    call("cuMemFreeHost", pinned)
    call("cuEventDestroy", ev)
    found = sim.violations()
    sim.clear()
    assert any("after cuMemFreeAsync" in v for v in found), found
    assert set(out.tolist()) <= {0, 0xA5}    # never the memset's 1s


def test_reuse_on_the_freeing_stream_needs_no_wait_and_poisons_nothing_new(sim, stream_pair):
    if not _pool_supported():
        pytest.skip("device 0 has no memory pools")
    s, _ = stream_pair
    first = call("cuMemAllocAsync", 4096, s)
    call("cuMemFreeAsync", first, s)
    second = call("cuMemAllocAsync", 4096, s)       # in s's order after the free
    call("cuMemsetD8Async", second, 9, 4096, s)
    out = np.zeros(4096, dtype=np.uint8)
    call("cuMemcpyAsync", out.ctypes.data, second, 4096, s)
    call("cuMemFreeAsync", second, s)
    call("cuStreamSynchronize", s)
    assert int(second) == int(first)
    assert set(out.tolist()) == {9}


# --- without memory pools -----------------------------------------------------

_FALLBACK = r"""
import gc, sys
sys.path.insert(0, {tests!r})
from support import cudasim
lib = cudasim.load(); sim = cudasim.Simulator(lib)
import numpy as np
import dlpack_ref as dr
values = np.arange(1 << 14, dtype=np.float32)
host = dr.asarray(values)
dev = host.to_device("cuda:0")
def loop():
    out = []
    for i in range(10):
        a = host.to_device("cuda:0")
        b = dev.copy()
        c = dev.to_device("cpu")
        out.append((a, b, c))
        del a, b, c
    return out
def check(kept):
    for a, b, c in kept[::3]:
        assert np.from_dlpack(a.to_device("cpu")).tolist() == values.tolist()
        assert np.from_dlpack(b.to_device("cpu")).tolist() == values.tolist()
        assert np.from_dlpack(c).tolist() == values.tolist()
check(loop()); gc.collect()     # warm-up
names = ("mem_alloc", "mem_free", "host_alloc", "host_free", "alloc_async", "free_async")
before = sim.counters(*names)
check(loop()); gc.collect()
loop(); gc.collect()
after = sim.counters(*names)
print(after["alloc_async"], *(after[k] - before[k] for k in names), len(sim.violations()))
"""


def test_without_memory_pools_a_cache_serves_the_copies(sim):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, DLPACK_REF_CUDA_SIM="1", CUDASIM_MEMORY_POOLS="0")
    out = subprocess.run([sys.executable, "-c", _FALLBACK.format(tests=here)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    # no cuMemAllocAsync ever; after warm-up no allocation or free at all
    # (a third of the results stayed alive, and then their blocks served
    # the next loop); no rule broken
    assert out.stdout.split() == ["0"] * 8


# --- device to host into pinned memory ---------------------------------------

def _is_pinned(ptr):
    kind = call("cuPointerGetAttribute", enum("CUpointer_attribute", "CU_POINTER_ATTRIBUTE_MEMORY_TYPE"), ptr)
    return int(kind) == int(enum("CUmemorytype", "CU_MEMORYTYPE_HOST"))


@pytest.mark.parametrize("stream", [None, -1, "handle"])
def test_device_to_host_lands_in_pinned_memory_with_the_values(stream_pair, stream):
    s = stream_pair[0] if stream == "handle" else stream
    big = np.random.default_rng(5).random((1 << 20) + 3, dtype=np.float32)
    a = dr.asarray(big).to_device("cuda:0")
    h = a.to_device("cpu", stream=s)
    if s not in (None, -1):
        call("cuStreamSynchronize", s)
    assert h.device == dr.Device("cpu")
    assert _is_pinned(h.data_ptr)
    np.testing.assert_array_equal(np.from_dlpack(h), big)


@pytest.mark.parametrize("index", [
    (slice(None, None, 2), slice(1, None)),          # rows skipped, 2-D copy
    (slice(None), slice(None, None, 3)),             # columns strided, per element
    (slice(None, None, -1), slice(None)),            # negative stride
    (slice(5, 6), slice(None)),                      # one row
])
@pytest.mark.parametrize("transpose", [False, True])
def test_strided_device_to_host_matches_numpy(index, transpose):
    base = np.random.default_rng(1).integers(0, 1 << 30, size=(300, 257), dtype=np.int32)
    a = dr.asarray(base, device="cuda:0")
    view, expected = a[index], base[index]
    if transpose:
        view, expected = view.permute_dims((1, 0)), expected.T
    for _ in range(2):                                # the second lands in a reused block
        h = view.to_device("cpu")
        np.testing.assert_array_equal(np.from_dlpack(h), expected)


def test_a_row_pitch_beyond_the_2d_limit_copies_by_rows():
    """A source whose rows are MAX_PITCH + 1 + 63 bytes apart: cuMemcpy2DAsync
    would refuse the pitch; the rows are copied one by one. Needs 2 GiB of
    device memory (on the simulator: of host memory, so it runs there only
    with DLPACK_REF_BIG_TESTS=1)."""
    from support import cudasim
    if cudasim.loaded() is not None and os.environ.get("DLPACK_REF_BIG_TESTS") != "1":
        pytest.skip("2 GiB of host memory on the simulator: set DLPACK_REF_BIG_TESTS=1")
    pitch = MAX_PITCH + 64
    a = dr.zeros(pitch + 64, dtype="uint8", device="cuda:0")
    marks = np.arange(64, dtype=np.uint8) + 1
    a[:64] = dr.asarray(marks)
    a[pitch:pitch + 64] = dr.asarray(marks[::-1].copy())
    view = a[::pitch]                                 # two elements, MAX_PITCH + 64 apart
    assert np.from_dlpack(view.to_device("cpu")).tolist() == [1, 64]
    assert np.from_dlpack(a[pitch - 1:pitch + 2].to_device("cpu")).tolist() == [0, 64, 63]
