"""Every way data enters an Array, fed what a hostile or buggy library would feed it.

Each case that could crash runs in a child interpreter (``sys.executable -c``):
the test asserts on its exit status and on what it printed, so a crash is a
failed test, not a dead pytest. The child prints ``OK`` as its last line when
every assertion in it held. The classes follow docs/guarantees.md: crashes,
wrong data, hangs, buffer exporters, the exchange-API path, lying producers,
integer overflow and the rest.
"""

from __future__ import annotations

import gc
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref.testing import ForeignProducer

TESTS = pathlib.Path(__file__).resolve().parent
INT64_MAX = 2**63 - 1

# Imported by every child: the hostile exporter, the capsule factory and a
# helper that asserts the exception type and a fragment of its message.
PRELUDE = """
import ctypes, gc, struct, sys
import numpy as np
import dlpack_ref as dr
from dlpack_ref.testing import CapsuleFactory, ForeignProducer
from support.hostile_buffer import HostileBuffer

def refused(exc_type, fragment, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        assert fragment in str(exc), f"{fragment!r} not in {str(exc)!r}"
        return exc
    except BaseException as exc:
        raise AssertionError(f"expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from exc
    raise AssertionError(f"expected {exc_type.__name__} ({fragment!r}), nothing was raised")
"""


def run_child(body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    code = PRELUDE + textwrap.dedent(body) + "\nprint('OK')\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=str(TESTS))


def assert_child_ok(body: str, timeout: float = 120) -> None:
    try:
        r = run_child(body, timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the child did not finish within {timeout} s (a hang)") from exc
    assert r.returncode == 0 and r.stdout.splitlines()[-1:] == ["OK"], (
        f"child exited with status {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")


# --- crashes: the 64-dimension limit on every path ----------------------------

def test_indexing_past_64_dimensions_is_an_index_error():
    assert_child_ok("""
        a = dr.zeros(())
        for n in (65, 100, 1000):
            refused(IndexError, "64", a.__getitem__, (None,) * n)
            refused(IndexError, "64", a.__setitem__, (None,) * n, 1.0)
            # NumPy agrees that this is an IndexError.
            refused(IndexError, "", np.zeros(()).__getitem__, (None,) * n)
        b = a[(None,) * 64]
        assert b.shape == (1,) * 64
        b[...] = 1.0
        assert float(b) == 1.0 and float(a) == 1.0
        c = dr.zeros((2,) * 4)[(None,) * 60]
        assert c.ndim == 64
        c[...] = 2.0
        assert c.copy().tolist() == np.full((1,) * 60 + (2,) * 4, 2.0).tolist()
        refused(IndexError, "64", c.__getitem__, (None, Ellipsis))
    """)


def test_array_new_cannot_make_an_uninitialised_array():
    assert_child_ok("""
        refused(TypeError, "cannot be created directly", dr.Array.__new__, dr.Array)
        refused(TypeError, "", object.__new__, dr.Array)
    """)


# --- silent wrong data: overlapping assignment --------------------------------

def _pair(values, dtype="float64"):
    return dr.asarray(values, dtype=dtype), np.asarray(values, dtype=dtype)


def test_assignment_from_a_reversed_view_of_itself():
    a, n = _pair(list(range(10)))
    a[...] = a[::-1]
    n[...] = n[::-1]
    assert a.tolist() == n.tolist() == list(range(9, -1, -1))


def test_assignment_from_the_transpose_of_itself():
    values = [[float(3 * i + j) for j in range(3)] for i in range(3)]
    b, n = _pair(values)
    b[...] = b.T
    n[...] = n.T
    assert b.tolist() == n.tolist()


@pytest.mark.parametrize("dst, src", [(slice(1, None), slice(None, -1)), (slice(None, -1), slice(1, None)),
                                      (slice(2, 9), slice(0, 7)), (slice(0, 7), slice(3, 10))])
def test_assignment_between_shifted_overlapping_slices(dst, src):
    c, n = _pair(list(range(10)))
    c[dst] = c[src]
    n[dst] = n[src]
    assert c.tolist() == n.tolist()


def test_assignment_from_a_broadcast_row_of_itself():
    values = [[float(4 * i + j) for j in range(4)] for i in range(4)]
    a, n = _pair(values)
    a[...] = a[1]
    n[...] = n[1]
    assert a.tolist() == n.tolist()


def test_assignment_through_an_aliasing_capsule_view():
    # The source is another Array object over the same memory (from_dlpack of
    # an Array is an alias), so overlap is detected by address, not identity.
    a, n = _pair([[1.0, 2.0], [3.0, 4.0]])
    alias = dr.from_dlpack(a)
    assert alias.data_ptr == a.data_ptr and alias is not a
    a[...] = alias.T
    n[...] = n.T.copy()
    assert a.tolist() == n.tolist()


# --- hangs: exchange-API tables with a prev_api cycle --------------------------

CYCLE_PRELUDE = """
from dlpack_ref.testing import DLPackExchangeAPI, DLPackExchangeAPIHeader
PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))

def producer_type(table):
    cap = PyCapsule_New(ctypes.addressof(table), b"dlpack_exchange_api", None)
    inner = dr.asarray([1.0, 2.0, 3.0])
    calls = []
    def dunder(self, **kw):
        calls.append(kw)
        return inner.__dlpack__(**kw)
    cls = type("Cyclic", (), {"__dlpack_c_exchange_api__": cap, "__dlpack__": dunder,
                              "__dlpack_device__": lambda self: (1, 0)})
    return cls, calls

def link(a, b):
    a.header.prev_api = ctypes.cast(ctypes.pointer(b), ctypes.POINTER(DLPackExchangeAPIHeader))
"""


@pytest.mark.parametrize("shape", ["self", "two", "long"])
def test_a_prev_api_cycle_is_detected_and_the_table_ignored(shape):
    assert_child_ok(CYCLE_PRELUDE + textwrap.dedent(f"""
        shape = {shape!r}
        tables = [DLPackExchangeAPI() for _ in range(2 if shape != "long" else 10_000)]
        for t in tables:
            t.header.version.major = 2     # not readable: the walk goes on to prev_api
        if shape == "self":
            link(tables[0], tables[0])
        elif shape == "two":
            link(tables[0], tables[1]); link(tables[1], tables[0])
        else:
            # A chain longer than any real one (no cycle): bounded too.
            for a, b in zip(tables, tables[1:]):
                link(a, b)
        cls, calls = producer_type(tables[0])
        assert dr.exchange_api_version(cls) is None
        a = dr.from_dlpack(cls())
        assert a.tolist() == [1.0, 2.0, 3.0] and len(calls) == 1
    """), timeout=60)


# --- buffer exporters ----------------------------------------------------------

# (keyword arguments of HostileBuffer, the exception asarray must raise, a
# fragment of its message). Each runs in a child; the refcount check shows the
# refused buffer was released exactly once.
BAD_BUFFERS = {
    "suboffsets": (dict(shape=(2, 2), suboffsets=(0, -1)), BufferError, "suboffsets"),
    "null-buf": (dict(shape=(4,), data=None), BufferError, "NULL"),
    "null-shape-ndim-2": (dict(shape=None, ndim=2), BufferError, "shape"),
    "ndim-negative": (dict(ndim=-1), BufferError, "ndim=-1"),
    "ndim-65": (dict(shape=(1,) * 65), BufferError, "ndim=65"),
    "format-f-itemsize-8": (dict(shape=(2,), itemsize=8, fmt=b"f"), BufferError, "item size 8"),
    "format-d-itemsize-4": (dict(shape=(2,), itemsize=4, fmt=b"d"), BufferError, "item size 4"),
    "itemsize-0": (dict(shape=(2,), itemsize=0, fmt=b"B"), BufferError, "item size 0"),
    "negative-extent": (dict(shape=(-3,), strides=(4,)), BufferError, "-3"),
    "extent-product-overflows": (dict(shape=(2**62, 4), strides=(0, 0), data=4096), BufferError, "int64"),
    "stride-span-overflows": (dict(shape=(4,), strides=(2**62,)), BufferError, "2**63"),
    "strides-not-multiple": (dict(shape=(2,), strides=(3,)), BufferError, "multiples"),
    "getbuffer-fails-silently": (dict(fail=True), BufferError, "no exception"),
}


# A debug CPython checks every slot's result itself: a getbuffer that fails
# without an exception aborts the process inside PyObject_GetBuffer, before
# any caller sees the -1. There the test asserts CPython's own verdict.
DEBUG_PYTHON = hasattr(sys, "gettotalrefcount")


@pytest.mark.parametrize("case", sorted(BAD_BUFFERS))
def test_a_malformed_buffer_is_refused(case):
    kwargs, exc, fragment = BAD_BUFFERS[case]
    if case == "getbuffer-fails-silently" and DEBUG_PYTHON:
        r = run_child(f"dr.asarray(HostileBuffer(**{kwargs!r}))")
        assert r.returncode == -6 and "Slot getbuffer of type HostileBuffer failed without setting an exception" \
            in r.stderr, (r.returncode, r.stderr[-2000:])
        return
    assert_child_ok(f"""
        b = HostileBuffer(**{kwargs!r})
        refs = sys.getrefcount(b)
        refused({exc.__name__}, {fragment!r}, dr.asarray, b)
        refused({exc.__name__}, {fragment!r}, dr.asarray, b, copy=True)
        gc.collect()
        assert sys.getrefcount(b) == refs, ("buffer not released once", sys.getrefcount(b), refs)
    """)


def test_a_null_buf_is_accepted_for_an_empty_buffer():
    assert_child_ok("""
        b = HostileBuffer(shape=(0, 3), data=None)
        a = dr.asarray(b)
        assert a.shape == (0, 3) and a.tolist() == [] and a.size == 0
    """)


def test_a_valid_hostile_buffer_is_read_exactly():
    assert_child_ok("""
        # Negative strides over the middle of the memory, float64.
        values = struct.pack("6d", *range(6))
        b = HostileBuffer(shape=(2, 3), strides=(24, 8), itemsize=8, fmt=b"d", fill=values)
        assert dr.asarray(b).tolist() == [[0, 1, 2], [3, 4, 5]]
        rev = HostileBuffer(shape=(3,), strides=(-8,), itemsize=8, fmt=b"d", data=None)
        rev._memory = ctypes.create_string_buffer(values, 48)
        rev._spec["buf"] = ctypes.addressof(rev._memory) + 40
        assert dr.asarray(rev).tolist() == [5.0, 4.0, 3.0]
        # A NULL format means unsigned bytes ("B").
        u8 = HostileBuffer(shape=(3,), itemsize=1, fmt=None, fill=b"abc")
        a = dr.asarray(u8)
        assert str(a.dtype) == "uint8" and a.tolist() == [97, 98, 99]
        # A read-only exporter gives a read-only Array.
        ro = HostileBuffer(shape=(2,), itemsize=8, fmt=b"d", fill=struct.pack("2d", 1, 2), readonly=True)
        assert dr.asarray(ro).readonly
    """)


# --- the exchange-API path is __dlpack__'s exact stand-in -----------------------

def test_a_subclass_overriding_dunder_dlpack_wins_over_the_inherited_table():
    torch = pytest.importorskip("torch")

    class G(torch.Tensor):
        def __dlpack__(self, *args, **kwargs):
            raise BufferError("no export")

    x = torch.arange(3.0).as_subclass(G)
    assert dr.exchange_api_version(G) is None
    with pytest.raises(BufferError, match="no export"):
        dr.from_dlpack(x)
    with pytest.raises(BufferError, match="no export"):
        np.from_dlpack(x)


def test_a_subclass_that_does_not_override_uses_the_table():
    torch = pytest.importorskip("torch")

    class Plain(torch.Tensor):
        pass

    assert dr.exchange_api_version(Plain) == (1, 3)
    t = torch.arange(3.0).as_subclass(Plain)
    assert dr.from_dlpack(t).data_ptr == t.data_ptr()


def _borrower(table_attribute, dunder):
    meta = type("Meta", (type,), {"__dlpack_c_exchange_api__": table_attribute})
    return meta("Borrower", (), {"__dlpack__": dunder, "__dlpack_device__": lambda self: (1, 0)})


def test_an_exchange_api_attribute_that_raises_falls_back_to_dunder_dlpack():
    inner = dr.asarray([1.0, 2.0])

    def broken(cls):
        raise RuntimeError("attribute lookup failed")

    cls = _borrower(property(broken), lambda self, **kw: inner.__dlpack__(**kw))
    with pytest.raises(RuntimeError):
        cls.__dlpack_c_exchange_api__
    assert dr.exchange_api_version(cls) is None
    assert dr.from_dlpack(cls()).data_ptr == inner.data_ptr


def test_a_table_error_falls_back_to_dunder_dlpack():
    # dlpack-ref's own table refuses objects that are not Arrays (TypeError);
    # the consumer must then give __dlpack__'s answer.
    inner = dr.asarray([1.0, 2.0])
    cls = type("Borrower", (), {"__dlpack_c_exchange_api__": dr.Array.__dlpack_c_exchange_api__,
                                "__dlpack__": lambda self, **kw: inner.__dlpack__(**kw),
                                "__dlpack_device__": lambda self: (1, 0)})
    assert dr.from_dlpack(cls()).data_ptr == inner.data_ptr
    refusing = type("Refusing", (cls,), {"__dlpack__": lambda self, **kw: (_ for _ in ()).throw(BufferError("mine"))})
    with pytest.raises(BufferError, match="mine"):
        dr.from_dlpack(refusing())


def test_a_table_returning_minus_one_without_an_exception_falls_back():
    assert_child_ok(CYCLE_PRELUDE + textwrap.dedent("""
        FROM_PY_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
        silent = FROM_PY_T(lambda obj, out: -1)
        table = DLPackExchangeAPI()
        table.header.version.major, table.header.version.minor = 1, 3
        table.managed_tensor_from_py_object_no_sync = ctypes.cast(silent, ctypes.c_void_p).value
        cls, calls = producer_type(table)
        assert dr.exchange_api_version(cls) == (1, 3)
        assert dr.from_dlpack(cls()).tolist() == [1.0, 2.0, 3.0] and len(calls) == 1
    """))


@pytest.mark.parametrize("make", ["sparse", "meta"])
def test_torch_table_errors_come_out_as_dunder_dlpack_gives_them(make):
    torch = pytest.importorskip("torch")
    t = torch.arange(3.0).to_sparse() if make == "sparse" else torch.empty(3, device="meta")
    with pytest.raises(BufferError) as dunder:
        t.__dlpack__(max_version=(1, 3))
    with pytest.raises(BufferError) as ours:
        dr.from_dlpack(t)
    assert str(ours.value) == str(dunder.value)


@pytest.fixture(scope="module")
def fresh_table_libs(tmp_path_factory):
    """Paths of the compiled hostile table (with its fresh-table maker) and
    of the Cython API demo (the header's import and consumer calls)."""
    from support import hostile_table
    from support.build_ext import build_api_demo
    folder = tmp_path_factory.mktemp("fresh_table")
    return hostile_table.build(folder)._name, build_api_demo(folder).__file__


FRESH_TABLE_CHILD = """
import importlib.util
from support import hostile_table
lib = ctypes.PyDLL({lib!r})
spec = importlib.util.spec_from_file_location("api_demo", {demo!r})
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
source = np.arange(4.0)
P = hostile_table.fresh_table_type(lib, source)
"""


def test_a_table_whose_capsule_is_made_afresh_on_each_access_is_kept_alive_while_used(fresh_table_libs):
    # A descriptor hands out a new capsule, owning a new table, each time the
    # attribute is read; its destructor poisons the table. Reading the
    # attribute twice and using the table of a capsule nobody kept crashed.
    lib, demo = fresh_table_libs
    assert_child_ok(FRESH_TABLE_CHILD.format(lib=lib, demo=demo) + textwrap.dedent("""
        for _ in range(3):                          # the core: its per-type entry keeps one capsule
            a = dr.from_dlpack(P())
            assert a.tolist() == [0.0, 1.0, 2.0, 3.0] and a.data_ptr == source.ctypes.data
        made, released, exports = hostile_table.fresh_counts(lib)
        assert exports == 3, exports                # through the table, every time
        assert dr.exchange_api_version(P) == (1, 3)
        for call in (demo.describe, lambda x: demo.consume(x)[0]):   # the header's two table paths
            before = hostile_table.fresh_counts(lib)
            for _ in range(3):
                d = call(P())
                assert d[0] == source.ctypes.data and d[1] == (4,), d
            made, released, exports = hostile_table.fresh_counts(lib)
            assert exports - before[2] == 3, (before, exports)
            assert made - before[0] == released - before[1] == 3   # each capsule held while used, then freed
        assert demo.consume(P(), copy=True)[2] is False            # numpy copied as asked
    """))


# --- lying producers -------------------------------------------------------------

class Liar:
    """A producer whose __dlpack_device__ says ``device`` and whose capsule
    is a CapsuleFactory tensor on ``capsule_device``."""

    def __init__(self, factory, device, capsule_device=(1, 0)):
        self.factory = factory
        self.device = device
        self.capsule_device = capsule_device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        return self.factory.make(shape=(2,), dtype=(2, 64, 1), device=self.capsule_device)


@pytest.mark.parametrize("device", ["garbage", (1,), (1, 0, 0), (1.0, 0), ("cpu", 0), (1, None), [1, 0]],
                         ids=["str", "short", "long", "float-type", "str-type", "none-id", "list"])
@pytest.mark.parametrize("kwargs", [{}, {"copy": True}, {"copy": False}, {"device": "cpu"}],
                         ids=["plain", "copy", "no-copy", "device"])
def test_an_unusable_dlpack_device_answer_is_never_trusted_the_tensor_says_where_it_is(factory, device, kwargs):
    # The plain request never asks __dlpack_device__; a request built on it
    # takes the plain request's tensor when the answer names no device, and
    # copies it here when asked: every path accepts what the plain one does.
    a = dr.from_dlpack(Liar(factory, device), **kwargs)
    assert a.device == dr.Device("cpu") and a.shape == (2,)
    assert (a.data_ptr != factory.last_data) == bool(kwargs.get("copy"))
    del a
    gc.collect()
    assert factory.deleter_calls == 1 and factory.live == 0


@pytest.mark.parametrize("kwargs", [{"copy": True}, {"copy": False}], ids=["copy", "no-copy"])
def test_a_request_refuses_a_capsule_on_another_device_than_announced(factory, kwargs):
    # The request was built on the announced device: a tensor elsewhere was
    # not made for it.
    with pytest.raises(BufferError, match="__dlpack_device__"):
        dr.from_dlpack(Liar(factory, (1, 0), capsule_device=(13, 0)), **kwargs)
    gc.collect()
    assert factory.deleter_calls == 1 and factory.live == 0


def test_the_plain_request_takes_the_capsules_device_whatever_is_announced(factory):
    a = dr.from_dlpack(Liar(factory, (1, 0), capsule_device=(13, 0)))
    assert a.device == dr.Device("cuda_managed:0") and a.data_ptr == factory.last_data
    del a
    gc.collect()
    assert factory.deleter_calls == 1 and factory.live == 0


@pytest.mark.parametrize("kwargs", [{}, {"copy": True}, {"copy": False}, {"device": "cpu"},
                                    {"device": "cpu", "copy": True}])
def test_a_producer_without_dlpack_device_is_refused_on_every_path(factory, kwargs):
    class NoDevice:
        def __dlpack__(self, **kw):
            return factory.make(shape=(2,), dtype=(2, 64, 1))

    with pytest.raises(TypeError, match="__dlpack_device__"):
        dr.from_dlpack(NoDevice(), **kwargs)


class CopyRefuser:
    """A producer that cannot copy (tvm-ffi: BufferError 'copy not yet supported')."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if kwargs.get("copy"):
            raise BufferError("copy not yet supported")
        kwargs.pop("copy", None)
        return self.inner.__dlpack__(**kwargs)


@pytest.mark.parametrize("kwargs", [{"copy": True}, {"copy": True, "device": "cpu"}])
def test_copy_true_works_against_a_producer_that_cannot_copy(kwargs):
    inner = dr.asarray([1.0, 2.0, 3.0])
    x = CopyRefuser(inner)
    a = dr.from_dlpack(x, **kwargs)
    assert a.tolist() == [1.0, 2.0, 3.0] and a.data_ptr != inner.data_ptr
    # CPU memory: asked for in place, copied here (the producer's copy is
    # never asked for, so its refusal never comes).
    assert len(x.calls) == 1 and "copy" not in x.calls[0]
    a[0] = 9.0
    assert inner.tolist() == [1.0, 2.0, 3.0]


def test_copy_true_against_tvm_ffi():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    src = dr.asarray([1.0, 2.0, 3.0])
    t = tvm_ffi.from_dlpack(src)
    for kwargs in ({"copy": True}, {"copy": True, "device": "cpu"}):
        a = dr.from_dlpack(t, **kwargs)
        assert a.tolist() == [1.0, 2.0, 3.0] and a.data_ptr != src.data_ptr


def test_every_keyword_combination_accepts_the_plain_paths_producers(factory):
    inner = dr.asarray([1.0, 2.0])
    producers = [inner, np.asarray([1.0, 2.0]), ForeignProducer(factory, shape=(2,), dtype=(2, 64, 1),
                                                                fill=np.asarray([1.0, 2.0]).tobytes()),
                 ForeignProducer(factory, legacy_only=True, shape=(2,), dtype=(2, 64, 1),
                                 fill=np.asarray([1.0, 2.0]).tobytes()), CopyRefuser(inner)]
    for x in producers:
        for kwargs in ({}, {"copy": True}, {"copy": None}, {"device": "cpu"}, {"device": (1, 0)},
                       {"device": "cpu", "copy": True}, {"device": "cpu", "copy": None}):
            assert dr.from_dlpack(x, **kwargs).tolist() == [1.0, 2.0], (type(x).__name__, kwargs)


# --- integer overflow --------------------------------------------------------------

def test_a_stride_0_capsule_has_true_nbytes_within_the_byte_rule(factory):
    # The extents' byte size must fit int64 even when strides are 0 (the
    # rule of docs/semantics.md), so nbytes is never negative.
    cap = factory.make(shape=(INT64_MAX,), strides=(0,), dtype=(2, 32, 1))
    with pytest.raises(BufferError, match="2\\*\\*63 bytes"):
        dr.from_dlpack(cap)
    assert factory.deleter_calls == 1
    a = dr.from_dlpack(factory.make(shape=(2**55,), strides=(0,), dtype=(2, 32, 1)))
    assert a.size == 2**55 and a.nbytes == 2**57 and memoryview(a).nbytes == 2**57
    assert a[2**55 - 1].tolist() == 0.0 and a[::2**54].shape == (2,)


@pytest.mark.parametrize("step", [2**61, 2**62, 2**62 + 1, 2**63 - 1])
def test_a_stride_that_never_steps_has_no_byte_stride(step):
    """An axis of extent 1 may keep any int64 stride; in bytes it would
    overflow int64 (undefined in C: the sanitizer lane found tolist doing
    it), so every byte view of it (buffer, copies, conversions) says 0, as
    NumPy's does for n[::2**62]."""
    a, n = dr.asarray([float(i) for i in range(10)]), np.arange(10.0)
    v = a[::step]
    assert v.shape == (1,)
    assert memoryview(v).strides == ((0,) if v.strides[0] * 8 >= 2**63 else (v.strides[0] * 8,))
    assert v.tolist() == np.asarray(memoryview(v)).tolist() == n[::step].tolist() == [0.0]
    assert v.copy().tolist() == dr.asarray(v, dtype="float32").tolist() == [0.0]
    b = dr.zeros(1)
    b[...] = v
    assert b.tolist() == [0.0]


def test_an_empty_array_with_huge_strides_copies_and_lists(factory):
    # Nothing is ever read of an empty array, so its strides are free too.
    a = dr.from_dlpack(factory.make(shape=(0, 3), strides=(2**62, 2**62 + 1), dtype=(2, 64, 1)))
    assert a.tolist() == [] and a.copy().shape == (0, 3) and memoryview(a).strides == (0, 0)
    assert dr.asarray(a, dtype="float32").shape == (0, 3)


@pytest.mark.parametrize("step", [2**62, 2**63, 2**70, -(2**63), -(2**70), 10**100, -(10**100)])
def test_any_python_int_is_a_slice_step(step):
    a, n = dr.asarray([float(i) for i in range(10)]), np.arange(10.0)
    v = a[::step]
    assert v.shape == n[::step].shape == (1,)
    assert v.tolist() == n[::step].tolist()
    w, m = a[::2][::step], n[::2][::step]
    assert w.tolist() == m.tolist()
    # Every view exports and imports again (no stride dlpack-ref refuses).
    for view in (v, w, a[3:3:step], a[::-1][::step]):
        assert dr.from_dlpack(view.__dlpack__(max_version=(1, 3))).tolist() == view.tolist()


def test_huge_slice_bounds_are_clamped():
    a, n = dr.asarray([float(i) for i in range(5)]), np.arange(5.0)
    for s in (slice(-(2**100), 2**100), slice(2**100, -(2**100), -1), slice(2**64, None), slice(None, -(2**64))):
        assert a[s].tolist() == n[s].tolist()


@pytest.mark.parametrize("shape", [(INT64_MAX, INT64_MAX, 0), (0, INT64_MAX, INT64_MAX), (INT64_MAX, 0, 5)])
def test_an_empty_shape_with_huge_extents_is_accepted(factory, shape):
    a = dr.zeros(shape)
    assert a.shape == shape and a.size == 0 and a.nbytes == 0
    b = dr.from_dlpack(a.__dlpack__(max_version=(1, 3)))
    assert b.shape == shape and b.size == 0
    c = dr.from_dlpack(factory.make(shape=shape, dtype=(2, 64, 1)))
    assert c.shape == shape and c.size == 0
    # Indexing and copying an empty array touch no memory and overflow nothing.
    assert a[1:].shape == (max(shape[0] - 1, 0),) + shape[1:] and a.copy().shape == shape


# --- the rest ------------------------------------------------------------------------

def test_inspect_of_a_non_capsule_is_a_type_error():
    class ReturnsInt:
        def __dlpack__(self, **kwargs):
            return 3

    with pytest.raises(TypeError, match="capsule"):
        dr.inspect(ReturnsInt())
    with pytest.raises(TypeError, match="object"):
        dr.inspect(object())
