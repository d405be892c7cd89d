"""Strided copies (one routine for copy(), copy=True exports and imports,
assignment and to_device) against NumPy, for every item size and the
layouts the kernel treats apart: dense (one memcpy), dense inner runs,
fixed-size moves, tiled transposes; plus allocation alignment and the fast
paths of small calls."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dlpack_ref as dr

np = pytest.importorskip("numpy")

from test_asarray import HEAD_VIEWS  # noqa: E402 - NumPy first: that file needs it

VIEWS = {
    "dense": lambda x: x,
    "transpose": lambda x: x.T,
    "reversed": lambda x: x[::-1],
    "step2": lambda x: x[::2],
    "column_step": lambda x: x[:, ::3],
    "both_negative": lambda x: x[::-2, ::-1],
    "transpose_of_slice": lambda x: x[3:, 1:-2].T,
    "transpose_reversed": lambda x: x.T[::-1],
    "transpose_reversed_columns": lambda x: x.T[:, ::-1],
    "reversed_columns": lambda x: x[:, ::-1],
    "row": lambda x: x[5],
    "column": lambda x: x[:, 7],
}


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("shape", [(67, 45), (8, 8), (300, 9)])
def test_copy_matches_numpy(dtype, view, shape):
    base = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    expected = VIEWS[view](base)
    a = VIEWS[view](dr.from_dlpack(base))
    c = a.copy()
    assert c.shape == expected.shape and c.data_ptr != base.ctypes.data
    assert np.array_equal(np.asarray(c), expected)
    assert np.asarray(c).flags.c_contiguous


@pytest.mark.parametrize("axes", [(2, 0, 1), (1, 2, 0), (0, 2, 1), (2, 1, 0)])
def test_three_d_permutations(axes):
    base = np.arange(5 * 33 * 20, dtype=np.float32).reshape(5, 33, 20)
    c = dr.from_dlpack(base).permute_dims(axes).copy()
    assert np.array_equal(np.asarray(c), base.transpose(axes))


def test_copy_true_both_ways():
    base = np.arange(1000, dtype=np.float64)[::3]
    a = dr.asarray(base, copy=True)
    assert np.array_equal(np.asarray(a), base) and a.data_ptr != base.ctypes.data
    exported = np.from_dlpack(dr.from_dlpack(base), copy=True)
    assert np.array_equal(exported, base) and exported.ctypes.data != base.ctypes.data
    back = dr.from_dlpack(dr.asarray(base), copy=True)
    assert np.array_equal(np.asarray(back), base)


class _Recording:
    """A NumPy array behind a producer that records the keywords of each
    __dlpack__ call; ``refuse_in_place`` refuses every request without
    copy=True (BufferError), as a producer that can only hand out copies."""

    def __init__(self, x, refuse_in_place=False):
        self.x, self.refuse_in_place, self.calls = x, refuse_in_place, []

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if self.refuse_in_place and kwargs.get("copy") is not True:
            raise BufferError("this producer hands out copies only")
        return self.x.__dlpack__(**kwargs)


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("view", ["dense", "reversed_columns", "transpose"])
def test_copy_true_of_cpu_memory_is_made_here_from_the_tensor_in_place(device, view):
    # The producer is asked for its tensor in place (no copy=, no dl_device)
    # and the copy is dlpack-ref's own, on the worker pool: a fresh, writable,
    # C-contiguous allocation of the same values.
    base = np.arange(67 * 45, dtype=np.float32).reshape(67, 45)
    x = VIEWS[view](base)
    x.flags.writeable = False
    producer = _Recording(x)
    out = dr.from_dlpack(producer, device=device, copy=True)
    assert producer.calls == [{"max_version": (1, 3)}]
    assert out.data_ptr != base.ctypes.data and not out.readonly
    assert dr._dlpack_ref._host_memory_holders(out) == 1
    assert out.strides == tuple(s // 4 for s in np.ascontiguousarray(x).strides)
    assert np.array_equal(np.asarray(out), x)


def test_copy_true_asks_for_the_producers_copy_when_it_refuses_to_export_in_place():
    x = np.arange(10.0)
    producer = _Recording(x, refuse_in_place=True)
    out = dr.from_dlpack(producer, copy=True)
    assert producer.calls == [{"max_version": (1, 3)}, {"max_version": (1, 3), "copy": True}]
    assert out.data_ptr != x.ctypes.data and out.tolist() == x.tolist()


@pytest.mark.parametrize("n", [1 << 7, 1 << 21])
def test_copy_true_of_numpy_is_memory_dlpack_ref_allocated(n):
    # The result owns host memory the core allocated (its C count has one
    # holder, the Array), not a tensor NumPy copied and handed over.
    from dlpack_ref._dlpack_ref import _host_memory_holders
    x = np.arange(n, dtype=np.float64)
    out = dr.from_dlpack(x, copy=True)
    assert out.data_ptr != x.ctypes.data and np.array_equal(np.asarray(out), x)
    assert _host_memory_holders(out) == 1


# --- from_dlpack(ndarray, copy=True): the DLPack route's copy, with no export ---------

def _copy_outcome(make_copy):
    """What a copy=True import gives: the result's dtype, shape, strides,
    values, writability and owner of its memory, or the refusal."""
    try:
        out = make_copy()
    except Exception as exc:   # noqa: BLE001 - the outcome compared is the exception
        return type(exc), str(exc)
    return (out.dtype, out.shape, out.strides, out.device, out.tolist(), out.readonly,
            dr._dlpack_ref._host_memory_holders(out))


def _head_copies_of(make_copy):
    """(the outcome of make_copy, how many ndarray head reads it made)."""
    before = dr._dlpack_ref._ndarray_head_copies()
    outcome = _copy_outcome(make_copy)
    return outcome, dr._dlpack_ref._ndarray_head_copies() - before


@pytest.mark.thread_unsafe(reason="counts the core's head reads, which other threads' copies add to")
@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("dtype", ["?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "F", "D"])
@pytest.mark.parametrize("view", sorted(HEAD_VIEWS))
def test_copy_true_of_an_ndarray_is_read_from_it_as_the_dlpack_route_copies(view, dtype, device):
    # An exact ndarray copied on the host is read from its own fields, with
    # no __dlpack__ call; what comes back is exactly what the DLPack route
    # (NumPy's tensor in place, copied here) gives for the same memory.
    dr.from_dlpack(np.arange(3.0), copy=True)   # the head's layout is checked on a non-empty array
    x = HEAD_VIEWS[view]((np.arange(6 * 5 * 7) % 97).astype(dtype).reshape(6, 5, 7))
    got, head_reads = _head_copies_of(lambda: dr.from_dlpack(x, device=device, copy=True))
    assert head_reads == 1
    assert got == _copy_outcome(lambda: dr.from_dlpack(_Recording(x), device=device, copy=True))
    assert got[5] is False and got[6] == 1   # writable, memory of its own
    if x.size:
        assert dr.from_dlpack(x, copy=True).data_ptr != x.ctypes.data


class _OwnDLPack(np.ndarray):
    """An ndarray subclass whose own __dlpack__ must be the one asked."""

    def __dlpack__(self, **kwargs):
        raise BufferError(f"this subclass exports nothing ({sorted(kwargs)})")


@pytest.mark.thread_unsafe(reason="counts the core's head reads, which other threads' copies add to")
@pytest.mark.parametrize("make", [
    lambda: np.arange(3, dtype=">f8"),
    lambda: np.arange(3, dtype=np.longdouble),
    lambda: np.array([1, None], dtype=object),
    lambda: np.array(["2020-01-01"], dtype="M8[D]"),
    lambda: np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]),
    lambda: np.ndarray((3,), np.float64, buffer=bytearray(40), strides=(12,)),
    lambda: np.arange(3.0).view(_OwnDLPack),
], ids=["big-endian", "longdouble", "object", "datetime", "structured", "strides-not-items", "subclass"])
def test_copy_true_of_an_ndarray_the_head_read_leaves_to_numpy_gets_numpys_answer(make):
    # Whatever NumPy's own export could answer otherwise (a type, byte order
    # or strides it refuses or describes its own way, an overridden
    # __dlpack__) takes the DLPack route: NumPy's result or refusal, as before.
    dr.from_dlpack(np.arange(3.0), copy=True)
    got, head_reads = _head_copies_of(lambda: dr.from_dlpack(make(), copy=True))
    assert head_reads == 0
    assert got == _copy_outcome(lambda: dr.from_dlpack(_Recording(make()), copy=True))


def test_copy_true_of_an_ndarray_takes_the_dlpack_route_under_a_numpy_that_refuses_read_only_exports():
    # Before NumPy 2.1 its __dlpack__ has no max_version and refuses to
    # export a read-only array: there the head read, which would copy one,
    # is not taken, so every array gets NumPy's own answer.
    script = (
        "import numpy as np, dlpack_ref as dr\n"
        "np.__version__ = '2.0.2'\n"
        "x = np.arange(4.0)\n"
        "out = dr.from_dlpack(x, copy=True)\n"
        "assert out.tolist() == [0.0, 1.0, 2.0, 3.0] and out.data_ptr != x.ctypes.data\n"
        "assert dr._dlpack_ref._ndarray_head_copies() == 0, dr._dlpack_ref._ndarray_head_copies()\n"
        "dr.asarray(x, copy=True)\n"   # asarray's copy asks no export of NumPy: read from the head still
        "assert dr._dlpack_ref._ndarray_head_copies() == 1\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_assignment_with_broadcasting_and_steps():
    dst = dr.zeros((6, 8), dtype="int32")
    dst[::2, 1::2] = dr.asarray([1, 2, 3, 4], dtype="int32")
    expected = np.zeros((6, 8), np.int32)
    expected[::2, 1::2] = [1, 2, 3, 4]
    assert np.array_equal(np.asarray(dst), expected)
    dst[:, ::-1] = dr.from_dlpack(np.arange(48, dtype=np.int32).reshape(6, 8).T.copy().T)
    expected[:, ::-1] = np.arange(48, dtype=np.int32).reshape(6, 8)
    assert np.array_equal(np.asarray(dst), expected)


def test_high_ndim_copy():
    base = np.arange(2 ** 12, dtype=np.int16).reshape((2,) * 12).transpose(tuple(range(11, -1, -1)))
    c = dr.from_dlpack(base).copy()
    assert np.array_equal(np.asarray(c), base)
    ones = np.zeros((1,) * 64, np.float32)
    assert dr.from_dlpack(ones).copy().shape == (1,) * 64


def test_empty_and_zero_d():
    assert dr.from_dlpack(np.zeros((0, 5))).T.copy().shape == (5, 0)
    z = dr.asarray(4.5).copy()
    assert z.shape == () and float(z) == 4.5


@pytest.mark.parametrize("nbytes", [1, 255, 4096, 2 << 20, (4 << 20) + 3])
def test_allocations_stay_256_byte_aligned(nbytes):
    a = dr.empty(nbytes, dtype="uint8")
    assert a.data_ptr % 256 == 0
    dr.zeros(nbytes, dtype="uint8")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "int64", "complex64"])
@pytest.mark.parametrize("columns", [4099, 1 << 20])
def test_reversed_runs_past_the_streaming_size(dtype, columns, threads):
    """From 16 MiB of destination on, dense runs and reversed runs of 4- and
    8-byte items take the non-temporal store loops: every alignment of a
    row's start and every remainder come out as NumPy's, on one thread or
    split."""
    itemsize = np.dtype(dtype).itemsize
    rows = -(-(17 << 20) // (columns * itemsize))
    base = np.random.default_rng(1).integers(0, 1 << 30, (rows, columns + 1)).astype(dtype)
    a = dr.from_dlpack(base)
    before = dr.get_num_threads()
    dr.set_num_threads(threads)
    try:
        for index in [(slice(None), slice(-2, None, -1)), (slice(None, None, -1), slice(None, 0, -1)),
                      (slice(None), slice(1, None)), (slice(None, None, -1), slice(None, -1))]:
            assert base[index].nbytes >= 16 << 20
            assert np.array_equal(np.asarray(a[index].copy()), base[index])
    finally:
        dr.set_num_threads(before)


def test_large_copy_is_exact():
    base = np.random.default_rng(0).integers(0, 255, 3 << 20, dtype=np.uint8)
    c = dr.from_dlpack(base).copy()
    assert np.array_equal(np.asarray(c), base)


def test_small_call_fast_paths_keep_semantics():
    a = dr.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert a.to_device("cpu") is a and a.to_device((1, 0)) is a
    b = dr.from_dlpack(a, device="cpu")
    assert b is not a and b.data_ptr == a.data_ptr
    assert dr.from_dlpack(np.arange(3.0), device="cpu").tolist() == [0.0, 1.0, 2.0]
    v = a[1, 2]
    assert v.shape == () and v.data_ptr == a.data_ptr + 5 * 8 and float(v) == 6.0
    assert a[1, 1:].tolist() == [5.0, 6.0] and a[-2, 0].tolist() == 1.0
    with pytest.raises(IndexError, match="only integers"):
        a[1, 1.5]
