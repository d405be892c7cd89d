"""The CUDA layer on a real GPU: the stream x device x copy matrix for real,
and exchange with CuPy, PyTorch and JAX on CUDA in both directions with
pointer checks. Marked ``cuda``; where no driver is installed they run on the simulated
driver of tests/support (see tests/conftest.py), and skip with the reason
only where cuda-python is missing."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref import cuda
from support import cudatest

_why = cudatest.unavailable()
pytestmark = cudatest.marks()


def _driver():
    from cuda.bindings import driver
    return driver


def _check(out):
    assert not out[0], out[0]
    return out[1] if len(out) == 2 else None


@pytest.fixture
def stream():
    d = _driver()
    from dlpack_ref._cuda_driver import runtime
    rt = runtime()
    pushed = rt.enter(0)
    try:
        s = _check(d.cuStreamCreate(1))  # CU_STREAM_NON_BLOCKING
    finally:
        rt.leave(pushed)
    yield int(s)
    _check(d.cuStreamSynchronize(s))
    _check(d.cuStreamDestroy(s))


def _device_count():
    from dlpack_ref._cuda_driver import runtime
    return runtime().device_count if _why is None else 0


DEVICES = ["cpu", "cuda:0", "cuda_managed:0", "cpu_pinned"]


@pytest.mark.parametrize("copy", [None, True, False])
@pytest.mark.parametrize("target", DEVICES)
@pytest.mark.parametrize("source", DEVICES)
def test_dl_device_copy_matrix(source, target, copy):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = dr.asarray(values, device=source)
    in_place = dr.can_access(target, source) and copy is not True
    if not in_place and copy is False:
        with pytest.raises(dr.CopyForbiddenError):
            a.__dlpack__(max_version=(1, 3), dl_device=dr.Device(target).__dlpack_device__(), copy=False)
        return
    b = dr.from_dlpack(a, device=target, copy=copy)
    if in_place:
        assert b.data_ptr == a.data_ptr
    else:
        assert b.data_ptr != a.data_ptr
    assert np.from_dlpack(b.to_device("cpu")).tolist() == values.tolist()


@pytest.mark.parametrize("stream_kind", ["none", "legacy", "per_thread", "handle", "minus_one"])
def test_cuda_to_cpu_is_readable_per_the_stream_rule(stream, stream_kind):
    a = dr.asarray(np.arange(1 << 20, dtype=np.float32), device="cuda:0")
    value = {"none": None, "legacy": 1, "per_thread": 2, "handle": stream, "minus_one": -1}[stream_kind]
    cap = a.__dlpack__(max_version=(1, 3), dl_device=(1, 0), stream=value)
    if value not in (None, -1):
        # With a stream the copy is only enqueued: the consumer synchronizes it.
        from dlpack_ref._cuda_driver import runtime
        runtime().synchronize(value, 0)
    out = np.from_dlpack(dr.from_dlpack(cap))
    assert out[-1] == (1 << 20) - 1 and out[12345] == 12345


def test_strided_copies_every_direction():
    base = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    for device in ("cuda:0", "cuda_managed:0", "cpu_pinned"):
        a = dr.asarray(base, device=device)
        view = a[1:, ::2, ::-3].permute_dims((2, 0, 1))
        expected = base[1:, ::2, ::-3].transpose(2, 0, 1)
        assert np.from_dlpack(view.to_device("cpu")).tolist() == expected.tolist()
        assert np.from_dlpack(view.to_device("cuda:0").to_device("cpu")).tolist() == expected.tolist()


def test_memory_is_returned(stream):
    d = _driver()
    from dlpack_ref._cuda_driver import runtime
    rt = runtime()
    pushed = rt.enter(0)
    def round_trip():
        arrays = [dr.empty((64 << 20,), dtype="uint8", device="cuda:0") for _ in range(8)]
        caps = [a.__dlpack__(max_version=(1, 3), stream=stream) for a in arrays]
        views = [dr.from_dlpack(c) for c in caps]
        del arrays, caps, views
        gc.collect()
        _check(d.cuStreamSynchronize(1))
        return _check_pair(d.cuMemGetInfo())[0]

    try:
        # Freed memory stays in the device's memory pool (or cache) for
        # reuse: after a first round, more rounds take no more memory.
        warm = round_trip()
        free_after = min(round_trip(), round_trip())
    finally:
        rt.leave(pushed)
    assert free_after >= warm - (16 << 20)


def _check_pair(out):
    assert not out[0]
    return out[1], out[2]


@pytest.mark.skipif("_device_count() < 2", reason="needs two CUDA devices")
def test_peer_copy():
    a = dr.asarray(np.arange(10.0), device="cuda:0")
    b = a.to_device("cuda:1")
    assert b.device == dr.Device("cuda", 1)
    assert np.from_dlpack(b.to_device("cpu")).tolist() == list(np.arange(10.0))


# --- interop --------------------------------------------------------------

def test_cupy_both_ways():
    cp = pytest.importorskip("cupy")
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    a = dr.from_dlpack(x)
    assert a.data_ptr == x.data.ptr and a.device == dr.Device("cuda", 0)
    y = cp.from_dlpack(a)
    assert y.data.ptr == a.data_ptr
    s = cp.cuda.Stream(non_blocking=True)
    with cuda.stream(s.ptr), s:
        b = dr.from_dlpack(x)          # CuPy orders its work before s
        assert b.data_ptr == x.data.ptr
    s.synchronize()
    z = dr.asarray(np.arange(5, dtype=np.int64), device="cuda:0")
    assert cp.asnumpy(cp.from_dlpack(z)).tolist() == [0, 1, 2, 3, 4]
    host = dr.from_dlpack(x, device="cpu")
    assert np.from_dlpack(host).tolist() == cp.asnumpy(x).tolist()


def test_torch_both_ways():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    a = dr.from_dlpack(t)
    assert a.data_ptr == t.data_ptr()
    back = torch.from_dlpack(a)
    assert back.data_ptr() == a.data_ptr and back.device.type == "cuda"
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), cuda.stream(s.cuda_stream):
        b = dr.from_dlpack(t)
        assert b.data_ptr == t.data_ptr()
    s.synchronize()
    z = dr.asarray(np.arange(6, dtype=np.int32).reshape(2, 3), device="cuda:0")
    assert torch.from_dlpack(z).cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert torch.from_dlpack(z).data_ptr() == z.data_ptr


def test_jax_both_ways():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX without CUDA")
    import jax.numpy as jnp
    x = jax.device_put(jnp.arange(8, dtype=jnp.float32), gpu)
    a = dr.from_dlpack(x)
    assert a.data_ptr == x.unsafe_buffer_pointer() and a.device == dr.Device("cuda", 0)
    z = dr.asarray(np.arange(8, dtype=np.float32), device="cuda:0")
    y = jnp.from_dlpack(z)
    assert y.unsafe_buffer_pointer() == z.data_ptr
    assert np.asarray(y).tolist() == list(range(8))
