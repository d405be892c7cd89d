"""Interpreter shutdown: tensors that outlive the interpreter.

Each case runs in a fresh interpreter and must exit with status 0, print
nothing on stderr, and (where it can be observed) show that the deleter
returned. The deleter of an export of host memory dlpack-ref allocated
touches no Python at all (it gives back its count of the memory and frees
its block); after finalization the deleter of an export of memory a Python
object owns cannot touch Python: it leaks the exported Array's reference on
purpose (the process is ending).
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

TESTS = pathlib.Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses the C library's atexit and pthreads")


def run_script(body, *, timeout=60):
    """Run body in a new interpreter that can import tests/test_threads.py."""
    prelude = f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONFAULTHANDLER="1"))


def assert_clean_exit(r, marker=None):
    assert r.returncode == 0, f"exit status {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.stderr == "", r.stderr
    if marker is not None:
        assert marker in r.stdout, f"{marker!r} not printed:\n{r.stdout}"


def test_deleter_called_after_finalization():
    """A C library that still owns a tensor when the process exits calls its
    deleter from a C atexit handler, after Py_FinalizeEx: the deleter of
    memory dlpack-ref allocated frees it with no Python; that of memory a
    Python object owns must see that Python is gone and return without
    touching it. A second handler, registered first so that it runs last,
    proves the deleters returned."""
    r = run_script("""
        import array, ctypes
        import dlpack_ref
        from test_threads import take_ownership

        libc = ctypes.CDLL(None)
        try:
            cxa_atexit = libc.__cxa_atexit
        except AttributeError:
            print("SKIP: no __cxa_atexit"); raise SystemExit(0)
        cxa_atexit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        libc.strdup.restype = ctypes.c_void_p
        libc.strdup.argtypes = [ctypes.c_char_p]
        puts = ctypes.cast(libc.puts, ctypes.c_void_p).value

        # Handlers run last-registered first: the marker prints after the deleters.
        assert cxa_atexit(puts, libc.strdup(b"after-deleters"), None) == 0
        for max_version in [(1, 3), None]:
            for a in [dlpack_ref.zeros((1000,), dtype="float64"), dlpack_ref.asarray(array.array("d", bytes(8000)))]:
                deleter, address = take_ownership(a.__dlpack__(max_version=max_version))
                assert cxa_atexit(deleter, address, None) == 0
        del a
        print("script end", flush=True)
    """)
    if "SKIP:" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert_clean_exit(r, "after-deleters")
    assert r.stdout.index("script end") < r.stdout.index("after-deleters")


FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()


@pytest.mark.skipif(FREE_THREADED, reason=(
    "free-threaded CPython: a foreign thread that attaches a thread state while the "
    "interpreter finalizes can crash inside CPython (seen once in two CI runs on 3.13t, "
    "exit -11); docs/guarantees.md states the guarantee for GIL builds only"))
@pytest.mark.skipif((3, 14) <= sys.version_info < (3, 15) or (hasattr(sys, "gettotalrefcount")
                                                               and sys.version_info < (3, 15)), reason=(
    "CPython 3.14 and debug builds before 3.15: a foreign thread already waiting in "
    "PyGILState_Ensure when finalization tears the interpreter down can abort inside CPython, "
    "with no dlpack-ref code involved (3.14: 'Fatal Python error: tstate_delete_common: NULL "
    "interpreter', exit -6/-11; debug: pystate.c unbind_gilstate_tstate); 3.15 releases "
    "through PEP 788's interpreter views instead; docs/guarantees.md"))
@pytest.mark.parametrize("switch_interval", [1e-6, 0.005, 100.0], ids=["eager", "default", "never"])
def test_foreign_threads_release_while_the_interpreter_exits(switch_interval):
    """Memory a Python object owns. Foreign threads (started with
    pthread_create while the GIL is held, so they wait for it inside the
    deleter) race the main thread's exit. On 3.11 to 3.13, depending on
    timing, a deleter runs before finalization, waits forever for a GIL that
    is never released (the thread dies with the process), or finds Python
    finalizing and leaks; on 3.15 it attaches through a view of the
    exporting interpreter holding a guard (finalization waits for it) or,
    once no guard can be had, leaks. Whichever it is: a clean exit, every
    time (50 runs on 3.15)."""
    for _ in range(EXIT_RACE_ROUNDS):
        assert_clean_exit(_foreign_threads_at_exit(switch_interval, OWNED_BY_PYTHON), "main exits")


@pytest.mark.parametrize("switch_interval", [1e-6, 0.005, 100.0], ids=["eager", "default", "never"])
def test_foreign_threads_release_memory_allocated_here_while_the_interpreter_exits(switch_interval):
    """Host memory dlpack-ref allocated is owned by a C reference count: the
    deleters on foreign threads touch no Python, so they finish whatever the
    interpreter is doing (no window, on every CPython and on free-threaded
    builds): a clean exit, every time (20 runs at each interval)."""
    for _ in range(20):
        assert_clean_exit(_foreign_threads_at_exit(switch_interval, ALLOCATED_HERE), "main exits")


# On 3.15 the race is CPython's to win or lose no more: run it many times.
EXIT_RACE_ROUNDS = 50 if sys.version_info >= (3, 15) else 1
ALLOCATED_HERE = 'dlpack_ref.zeros((64,), dtype="float32")'
OWNED_BY_PYTHON = 'dlpack_ref.asarray(array.array("f", bytes(256)))'


def _foreign_threads_at_exit(switch_interval, make):
    return run_script(f"""
        import array, ctypes, sys
        import dlpack_ref
        from test_threads import take_ownership

        sys.setswitchinterval({switch_interval!r})
        # PyDLL: the GIL stays held during the call, so the threads start
        # and, where the deleter takes the GIL, block in it until the main
        # thread lets the GIL go.
        libc = ctypes.PyDLL(None)
        create = libc.pthread_create
        create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        keep = []
        for i in range(16):
            a = {make}
            deleter, address = take_ownership(a.__dlpack__(max_version=(1, 3)))
            tid = ctypes.c_ulong()
            assert create(ctypes.byref(tid), None, deleter, address) == 0
            keep.append(tid)
        print("main exits", flush=True)
    """)


def test_live_exchanges_at_exit():
    """Arrays, capsules and foreign views still alive in module globals and
    in a reference cycle when the interpreter exits are torn down without a
    crash: unconsumed capsules (ours and NumPy's), Arrays over NumPy and
    PyTorch memory, NumPy and PyTorch views of Arrays."""
    r = run_script("""
        import dlpack_ref
        import numpy as np
        try:
            import torch
        except ImportError:
            torch = None

        src = dlpack_ref.zeros((8, 8), dtype="float32")
        unconsumed = [src.__dlpack__(max_version=(1, 3)), src.__dlpack__(), np.ones(3).__dlpack__()]
        views = [np.from_dlpack(src), dlpack_ref.from_dlpack(np.arange(5.0))]
        if torch is not None:
            views += [torch.from_dlpack(src), dlpack_ref.from_dlpack(torch.ones(4))]

        class Cycle:
            pass
        c = Cycle()
        c.self = c
        c.arrays = [dlpack_ref.from_dlpack(src.__dlpack__(max_version=(1, 3))), src[1:3]]
        del c
        print("script end", flush=True)
    """)
    assert_clean_exit(r, "script end")


def test_daemon_threads_exchanging_during_exit():
    """Daemon threads still exporting and importing when the main thread
    exits are stopped by the interpreter at a safe point: no crash, no
    message."""
    r = run_script("""
        import threading, time
        import dlpack_ref

        src = dlpack_ref.zeros((32,), dtype="int64")

        def churn():
            while True:
                dlpack_ref.from_dlpack(src.__dlpack__(max_version=(1, 3)))
                dlpack_ref.from_dlpack(src.__dlpack__())

        for _ in range(4):
            threading.Thread(target=churn, daemon=True).start()
        time.sleep(0.2)
        print("main exits", flush=True)
    """)
