"""Threads: concurrent exports, imports and releases; deleters called from
threads that do not hold the GIL (a ctypes call releases it) and from a
thread Python never saw (started with pthread_create); the per-type
exchange-API cache under concurrent lookups; the free-threading declaration.
"""

import ctypes
import gc
import pathlib
import queue
import sys
import sysconfig
import threading
import weakref

import pytest

import dlpack_ref
from dlpack_ref.testing import (
    NAME_USED_LEGACY,
    NAME_USED_VERSIONED,
    NAME_VERSIONED,
    CapsuleFactory,
    DELETER_T,
    c_api,
    capsule_name,
    read_capsule,
)

N_THREADS = 8
ROUNDS = 500

_SetName = c_api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
# PyCapsule_SetName stores the pointer: the names must outlive the capsules.
_USED_NAMES = {NAME_VERSIONED: ctypes.c_char_p(NAME_USED_VERSIONED),
               b"dltensor": ctypes.c_char_p(NAME_USED_LEGACY)}


def take_ownership(capsule):
    """What a C consumer does: rename the capsule used_* so that its
    destructor leaves the tensor alone, and keep the tensor's address and
    deleter, which it now must call exactly once. Returns (deleter, address)."""
    fields = read_capsule(capsule)
    name = capsule_name(capsule)
    assert name in _USED_NAMES, f"not an unconsumed DLPack capsule: {name!r}"
    assert _SetName(capsule, _USED_NAMES[name]) == 0
    return fields["deleter"], fields["address"]


def _numpy():
    return pytest.importorskip("numpy")


def test_exports_imports_and_releases_from_8_threads():
    """Every thread exports, imports (capsules versioned and legacy, the
    Array itself, NumPy, PyTorch, foreign capsules) and hands half of its
    results to another thread to release. Afterwards every source has exactly
    its starting reference count and every foreign deleter ran once."""
    np = _numpy()
    torch = sys.modules.get("torch") or pytest.importorskip("torch")
    src = dlpack_ref.zeros((16, 16), dtype="float32")
    src_np = np.arange(64, dtype=np.int32).reshape(8, 8)
    src_torch = torch.arange(64, dtype=torch.float64)
    factory = CapsuleFactory()
    gc.collect()
    start = [sys.getrefcount(o) for o in (src, src_np, src_torch)]
    handoff = queue.Queue()
    errors = []
    barrier = threading.Barrier(N_THREADS)

    def work():
        try:
            barrier.wait()
            for i in range(ROUNDS):
                keep = [
                    dlpack_ref.from_dlpack(src.__dlpack__(max_version=(1, 3))),
                    dlpack_ref.from_dlpack(src.__dlpack__()),
                    dlpack_ref.from_dlpack(src),
                    np.from_dlpack(src),
                    dlpack_ref.from_dlpack(src_np),
                    torch.from_dlpack(src),
                    dlpack_ref.from_dlpack(src_torch),
                    dlpack_ref.from_dlpack(factory.make(shape=(3,))),
                ]
                src.__dlpack__(max_version=(1, 3))  # dropped unconsumed
                assert keep[0].data_ptr == src.data_ptr and keep[4].data_ptr == src_np.ctypes.data
                handoff.put(keep[::2])
                try:
                    del handoff.get_nowait()[:]  # released by another thread than made it
                except queue.Empty:
                    pass
        except BaseException as exc:  # reported below, with its thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    while not handoff.empty():
        del handoff.get_nowait()[:]
    gc.collect()
    assert [sys.getrefcount(o) for o in (src, src_np, src_torch)] == start
    assert factory.deleter_calls == N_THREADS * ROUNDS
    assert factory.live == 0


def _allocated_here(n=4):
    """An Array on host memory dlpack-ref allocated: a C reference count owns it."""
    return dlpack_ref.zeros((n,), dtype="float64")


def _owned_by_python(n=4):
    """An Array on memory a Python object owns (an array.array's buffer)."""
    import array
    return dlpack_ref.asarray(array.array("d", [0.0] * n))


MEMORY = {"allocated here": _allocated_here, "owned by a Python object": _owned_by_python}


def _holders(a):
    """Holders of the count of a's memory (the Array, each export); None for
    memory a Python object owns."""
    from dlpack_ref._dlpack_ref import _host_memory_holders
    return _host_memory_holders(a)


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_an_export_of_memory_allocated_here_holds_a_count_not_the_array(legacy):
    """Host memory dlpack-ref allocated is owned by a C reference count: an
    export holds a count of it, not the Array (which is freed as soon as it
    is dropped), and its deleter, called on a thread without the GIL (a
    ctypes call releases it), only gives the count back."""
    a = _allocated_here()
    alive = weakref.ref(a)
    assert _holders(a) == 1
    deleter, address = take_ownership(a.__dlpack__() if legacy else a.__dlpack__(max_version=(1, 3)))
    assert _holders(a) == 2
    view = a[1:]
    assert _holders(view) == 2        # a view knows the same count
    t = threading.Thread(target=DELETER_T(deleter), args=(address,))
    t.start()
    t.join()
    assert _holders(view) == 1
    del view
    deleter, address = take_ownership(a.__dlpack__() if legacy else a.__dlpack__(max_version=(1, 3)))
    del a
    assert alive() is None, "the export kept the Array alive; it should hold only the memory"
    DELETER_T(deleter)(address)


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_deleter_called_through_ctypes_without_the_gil(legacy):
    """Memory a Python object owns: the deleter runs on a Python thread
    without the GIL, takes it, and drops the last reference to the exported
    Array, which is freed."""
    a = _owned_by_python()
    assert _holders(a) is None
    alive = weakref.ref(a)
    cap = a.__dlpack__() if legacy else a.__dlpack__(max_version=(1, 3))
    deleter, address = take_ownership(cap)
    del a, cap
    assert alive() is not None, "the export must keep the Array alive"
    t = threading.Thread(target=DELETER_T(deleter), args=(address,))
    t.start()
    t.join()
    assert alive() is None, "the deleter did not release the exported Array"


@pytest.mark.parametrize("memory", sorted(MEMORY))
def test_deleter_called_concurrently_from_8_threads_without_the_gil(memory):
    a = MEMORY[memory]()
    start = sys.getrefcount(a)
    owned = [take_ownership(a.__dlpack__(max_version=(1, 3))) for _ in range(N_THREADS * 50)]
    if memory == "allocated here":
        assert sys.getrefcount(a) == start and _holders(a) == 1 + len(owned)
    else:
        assert sys.getrefcount(a) == start + len(owned)

    def release(chunk):
        for deleter, address in chunk:
            DELETER_T(deleter)(address)

    threads = [threading.Thread(target=release, args=(owned[i::N_THREADS],)) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sys.getrefcount(a) == start
    if memory == "allocated here":
        assert _holders(a) == 1


def _libc_pthread():
    if sys.platform == "win32":
        pytest.skip("pthreads: POSIX only")
    libc = ctypes.CDLL(None)
    try:
        create, join = libc.pthread_create, libc.pthread_join
    except AttributeError:
        pytest.skip("pthread_create is not exported by the C library here")
    create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    return create, join


@pytest.mark.parametrize("memory", sorted(MEMORY))
def test_deleter_called_from_a_thread_python_never_saw(memory):
    """A foreign library's own thread (pthread_create with the deleter as its
    start routine: same calling convention for one pointer argument) has no
    Python thread state at all. The deleter of memory dlpack-ref allocated
    gives its count back with no Python (the Arrays are long gone); that of
    memory a Python object owns creates a thread state to drop its
    reference to the Array."""
    create, join = _libc_pthread()
    arrays = [MEMORY[memory]() for _ in range(N_THREADS)]
    alive = [weakref.ref(a) for a in arrays]
    owned = [take_ownership(a.__dlpack__(max_version=(1, 3))) for a in arrays]
    del arrays
    if memory == "allocated here":
        assert all(ref() is None for ref in alive)
    else:
        assert all(ref() is not None for ref in alive)
    tids = []
    for deleter, address in owned:
        tid = ctypes.c_ulong()
        assert create(ctypes.byref(tid), None, deleter, address) == 0
        tids.append(tid)
    for tid in tids:
        assert join(tid, None) == 0  # CDLL call: the GIL is released while joining
    assert all(ref() is None for ref in alive)


def test_the_deleter_of_memory_allocated_here_never_needs_the_gil():
    """A foreign thread runs the deleter while the main thread holds the GIL
    and waits for that thread (PyDLL calls keep the GIL): a deleter that took
    the GIL would wait forever. In a child process, so that such a deadlock
    fails this test instead of hanging the run."""
    import subprocess
    import textwrap
    script = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
        import dlpack_ref
        from test_threads import take_ownership
        libc = ctypes.PyDLL(None)
        create, join = libc.pthread_create, libc.pthread_join
        create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
        a = dlpack_ref.zeros((64,), dtype="float32")
        for max_version in [(1, 3), None]:
            deleter, address = take_ownership(a.__dlpack__(max_version=max_version))
            tid = ctypes.c_ulong()
            assert create(ctypes.byref(tid), None, deleter, address) == 0
            assert join(tid, None) == 0
        from dlpack_ref._dlpack_ref import _host_memory_holders
        print(_host_memory_holders(a))
    """)
    if sys.platform == "win32":
        pytest.skip("pthreads: POSIX only")
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the deleter waited for the GIL that the joining thread holds")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "1"


def test_imported_foreign_tensor_released_from_another_thread():
    """An Array holding a foreign tensor, exported again and released on a
    GIL-free thread: the chain ends in the foreign deleter, exactly once."""
    f = CapsuleFactory()
    inner = dlpack_ref.from_dlpack(f.make(shape=(5,)))
    deleter, address = take_ownership(inner.__dlpack__(max_version=(1, 3)))
    del inner
    assert f.deleter_calls == 0
    t = threading.Thread(target=DELETER_T(deleter), args=(address,))
    t.start()
    t.join()
    assert f.deleter_calls == 1 and f.live == 0


def test_exchange_api_cache_under_concurrent_lookups():
    """Fresh types looked up from 8 threads at once: every thread sees the
    same answer (the cache is written once per type; a lost race only
    recomputes the same entry)."""
    torch = sys.modules.get("torch") or pytest.importorskip("torch")
    api = dlpack_ref.Array.__dlpack_c_exchange_api__
    with_api = [type(f"WithAPI{i}", (), {"__dlpack_c_exchange_api__": api}) for i in range(200)]
    without = [type(f"Plain{i}", (), {}) for i in range(200)]
    types = [t for pair in zip(with_api, without) for t in pair]
    results = [None] * N_THREADS
    barrier = threading.Barrier(N_THREADS)
    tensor = torch.arange(8, dtype=torch.float32)

    def look(k):
        barrier.wait()
        order = types if k % 2 else types[::-1]
        seen = {t: dlpack_ref.exchange_api_version(t) for t in order}
        assert dlpack_ref.from_dlpack(tensor).data_ptr == tensor.data_ptr()
        results[k] = seen

    threads = [threading.Thread(target=look, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = {t: ((1, 3) if t in with_api else None) for t in types}
    assert all(r == expected for r in results)


def test_module_declares_free_threading_compatibility():
    """The core is compiled with freethreading_compatible=True, so that a
    free-threaded CPython keeps the GIL off when it imports it."""
    pyx = pathlib.Path(__file__).resolve().parents[1] / "src" / "_dlpack_ref.pyx"
    if not pyx.exists():
        pytest.skip("the source tree is not next to the tests")
    header = pyx.read_text().split('"""', 1)[0]
    assert "freethreading_compatible=True" in header


@pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="needs a free-threaded CPython (3.13t+)")
def test_import_keeps_the_gil_disabled():
    assert not sys._is_gil_enabled(), "importing dlpack_ref re-enabled the GIL"
