"""fork(): a child has only the thread that forked, so every lock another
thread held at that moment stays held there forever. No lock of dlpack-ref
may be left so (docs/guarantees.md, "fork"): the stream-context count is an
atomic (no lock), the header's interned names are published without one,
the worker pool re-creates its own (pthread_atfork, tests/test_pool.py), and
every Python lock is made anew in the child (os.register_at_fork). A CUDA
runtime loaded by the parent is not used by the child (CUDA's own rule).

Each case runs in a fresh interpreter that forks; a child that does not
finish within its time is killed and counted as hung.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest

import dlpack_ref as dr

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.fork and os.pidfd_open (Linux)")

# Forks a child running `child` (a function of no argument returning an exit
# status) and waits for it at most `seconds`: its exit status, or "hung".
WAIT_FOR = """
import json, os, select, sys, threading, time
import numpy as np
import dlpack_ref as dr
import dlpack_ref.cuda

def forked(child, seconds=20.0):
    pid = os.fork()
    if pid == 0:
        try:
            status = child()
        except BaseException as exc:
            print(f"child raised {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 3
        os._exit(status)
    # Waits without holding the GIL (a polling loop would fight the
    # parent's other threads for it at every wake-up).
    fd = os.pidfd_open(pid)
    try:
        finished = select.select([fd], [], [], seconds)[0]
    finally:
        os.close(fd)
    if not finished:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return "hung"
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
"""


def run_forking(body: str, timeout: float = 300):
    """The JSON that the last line of ``body`` (run after WAIT_FOR in a fresh
    interpreter) prints."""
    out = subprocess.run([sys.executable, "-c", WAIT_FOR + textwrap.dedent(body)], capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.thread_unsafe(reason="forks")
def test_children_forked_while_threads_enter_and_leave_stream_contexts_never_hang():
    # Four threads enter and leave consumer-stream contexts without pause; the
    # main thread forks 1000 times, and each child enters one and imports. The
    # count of entered contexts was kept under a threading.Lock, which a child
    # forked while another thread held it could never take (seen on 3.13t:
    # 4 hung children in about 3,300).
    got = run_forking("""
        sys.setswitchinterval(1e-5)   # GIL builds: the forking thread gets the GIL back at once
        stop = threading.Event()
        def toggle():
            while not stop.is_set():
                with dr.cuda.stream(1):
                    pass
        threads = [threading.Thread(target=toggle) for _ in range(4)]
        for t in threads:
            t.start()
        def child():
            with dr.cuda.stream(1):
                ok = dr.from_dlpack(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
            return 0 if ok and dr.from_dlpack(np.arange(2.0)).tolist() == [0.0, 1.0] else 1
        outcomes = [forked(child) for _ in range(1000)]
        stop.set()
        for t in threads:
            t.join()
        print(json.dumps({str(k): outcomes.count(k) for k in set(outcomes)}))
    """)
    assert got == {"0": 1000}


HELD_AT_FORK = {
    # what a thread holds when the main thread forks: what the child then does
    "the CUDA loader's lock": ("from dlpack_ref import _cuda_driver as held_module; lock = held_module._load_lock",
                               "dr.cuda.is_available() in (True, False)"),
    "a pending-work record's lock": ("from dlpack_ref._cuda_streams import PendingWork; record = PendingWork(); "
                                     "lock = record.lock",
                                     "record.lock.acquire(timeout=5) and record.idle"),
    "the capsule factory's lock": ("from dlpack_ref.testing import factory as held_module; lock = held_module._LOCK",
                                   "dr.from_dlpack(held_module.CapsuleFactory().make(shape=(2,))).shape == (2,)"),
}


@pytest.mark.thread_unsafe(reason="forks")
@pytest.mark.parametrize("held", sorted(HELD_AT_FORK))
def test_a_lock_held_by_another_thread_at_fork_is_free_in_the_child(held):
    setup, use = HELD_AT_FORK[held]
    got = run_forking(f"""
        {setup}
        holding, release = threading.Event(), threading.Event()
        def hold():
            with lock:
                holding.set()
                release.wait()
        t = threading.Thread(target=hold)
        t.start()
        holding.wait()
        outcome = forked(lambda: 0 if ({use}) else 1, seconds=15)
        release.set()
        t.join()
        print(json.dumps(outcome))
    """)
    assert got == 0


@pytest.mark.thread_unsafe(reason="forks the test process")
def test_a_child_forked_after_cuda_was_loaded_refuses_cuda_and_leaves_the_parents_memory(sim):
    pytest.importorskip("cuda.bindings")
    a = dr.asarray([1.0, 2.0], device="cuda:0")   # loads the runtime, allocates through it
    assert dr.cuda.is_available()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns into pytest
        status = 1
        try:
            os.close(read)
            report = {"available": dr.cuda.is_available()}
            try:
                dr.asarray([1.0], device="cuda:0")
            except dr.cuda.CUDAUnavailableError as exc:
                report["refused"] = str(exc)
            from dlpack_ref import _cuda_driver
            report["forked_after_init"] = _cuda_driver.forked_after_init
            del a          # its memory is the parent's context's: dropped without a driver call
            gc.collect()
            os.write(write, json.dumps(report).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = json.loads(pipe.read() or "{}")
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert report["available"] is False and report["forked_after_init"] is True
    assert "forked after its parent initialized CUDA" in report["refused"]
    assert "'spawn' or 'forkserver'" in report["refused"]
    assert a.tolist() == [1.0, 2.0]   # the parent's CUDA is untouched
