"""The worker pool of host copies and conversions (src/dlref_pool.h): the
thread-count setting and its errors, no thread before the first parallel
copy, results and refused-value errors equal on one thread and split (NumPy
the oracle of values), concurrent copies from 8 threads, fork while a copy
runs, SIGINT during a long copy. The process-wide cases run in child
processes."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import dlpack_ref as dr  # noqa: E402
from dlpack_ref import _dlpack_ref as core  # noqa: E402

from support.threads import run_threads  # noqa: E402

CORES = len(os.sched_getaffinity(0))
MAX = 256


def run_child(body: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """body in a fresh interpreter (env: changes to this one's environment,
    None values removed); the last line it prints is JSON."""
    full_env = dict(os.environ)
    full_env.pop("DLPACK_REF_NUM_THREADS", None)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def child_json(body: str, env: dict | None = None, timeout: float = 120):
    run = run_child(body, env, timeout)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


@pytest.fixture
def restore_threads():
    before = dr.get_num_threads()
    yield
    dr.set_num_threads(before)


# --- the setting ---------------------------------------------------------------

def test_set_and_get_num_threads(restore_threads):
    dr.set_num_threads(3)
    assert dr.get_num_threads() == 3
    dr.set_num_threads(MAX)
    assert dr.get_num_threads() == MAX
    dr.set_num_threads(1)
    assert dr.get_num_threads() == 1


@pytest.mark.parametrize("bad", [2.0, "2", None, True, False, [2]])
def test_set_num_threads_refuses_other_types(bad, restore_threads):
    with pytest.raises(TypeError) as info:
        dr.set_num_threads(bad)
    assert str(info.value) == f"set_num_threads expects an int from 1 to {MAX}, got {type(bad).__name__} {bad!r}"


@pytest.mark.parametrize("bad", [0, -1, MAX + 1, 1 << 70])
def test_set_num_threads_refuses_out_of_range(bad, restore_threads):
    before = dr.get_num_threads()
    with pytest.raises(ValueError) as info:
        dr.set_num_threads(bad)
    assert str(info.value) == f"set_num_threads expects an int from 1 to {MAX}, got {bad}"
    assert dr.get_num_threads() == before


def test_default_is_the_cores_available_not_cpu_count():
    """With the process pinned to one core, the default is 1 whatever
    os.cpu_count says (the affinity mask, as PyTorch counts)."""
    got, _ = child_json("""
        import json, os
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        import dlpack_ref as dr
        print(json.dumps([dr.get_num_threads(), os.cpu_count()]))
    """)
    assert got[0] == 1
    got, _ = child_json("""
        import json, os
        import dlpack_ref as dr
        print(json.dumps(dr.get_num_threads()))
    """)
    assert got == min(CORES, MAX)


def test_env_var_is_read_at_first_use_not_at_import():
    """Set after the import, before the first get_num_threads: it counts;
    changed after that first read: it does not."""
    got, _ = child_json("""
        import json, os
        import dlpack_ref as dr
        os.environ["DLPACK_REF_NUM_THREADS"] = "5"
        first = dr.get_num_threads()
        os.environ["DLPACK_REF_NUM_THREADS"] = "7"
        print(json.dumps([first, dr.get_num_threads()]))
    """)
    assert got == [5, 5]


@pytest.mark.parametrize("value", ["1", "3", " 4 ", "\t2\t", "007", str(MAX)])
def test_env_var_sets_the_count(value):
    got, err = child_json("import dlpack_ref as dr; print(dr.get_num_threads())",
                          env={"DLPACK_REF_NUM_THREADS": value})
    assert got == int(value)
    assert "Warning" not in err


def test_empty_env_var_is_unset():
    got, err = child_json("import dlpack_ref as dr; print(dr.get_num_threads())",
                          env={"DLPACK_REF_NUM_THREADS": ""})
    assert got == min(CORES, MAX)
    assert err == ""


@pytest.mark.parametrize("value", ["0", "-2", "abc", "2.5", str(MAX + 1), "0x4", "1_6", "+4", "\uff14", "\u0664",
                                   "\u00b2", "4\u3000", "\u30004"])
def test_bad_env_var_warns_and_uses_the_default(value):
    got, _ = child_json("""
        import json, warnings
        import dlpack_ref as dr
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            n = dr.get_num_threads()
            again = dr.get_num_threads()
        print(json.dumps([n, again, [(w.category.__name__, str(w.message)) for w in caught]]))
    """, env={"DLPACK_REF_NUM_THREADS": value})
    n, again, caught = got
    default = min(CORES, MAX)
    assert n == again == default
    assert caught == [["RuntimeWarning",
                       f"DLPACK_REF_NUM_THREADS={value!r} is not a whole number from 1 to {MAX}; "
                       f"using the {default} core(s) available to this process"]]


# --- threads are started late, and only as many as needed -------------------------

def test_no_thread_at_import_nor_for_small_copies():
    got, _ = child_json("""
        import json, os
        import numpy as np
        def tasks():
            return len(os.listdir("/proc/self/task"))
        before = tasks()
        import dlpack_ref as dr
        from dlpack_ref import _dlpack_ref as core
        after_import = tasks()
        dr.set_num_threads(4)
        n = dr.get_num_threads()
        small = dr.from_dlpack(np.ones(1000))
        small.copy(); dr.asarray(small, dtype="float32")
        after_small = tasks()
        big = dr.from_dlpack(np.ones(4 << 20))
        out = big.copy()
        ok = bool((np.from_dlpack(out) == 1).all())
        print(json.dumps([before, after_import, after_small, core._pool_workers_started(), tasks(), ok]))
    """)
    before, after_import, after_small, workers, after_big, ok = got
    assert after_import == before
    assert after_small == before
    assert workers == 3
    assert after_big == before + 3
    assert ok


def test_one_thread_setting_starts_no_worker():
    got, _ = child_json("""
        import json, numpy as np, dlpack_ref as dr
        from dlpack_ref import _dlpack_ref as core
        dr.from_dlpack(np.ones(8 << 20)).copy()
        print(json.dumps(core._pool_workers_started()))
    """, env={"DLPACK_REF_NUM_THREADS": "1"})
    assert got == 0


# --- one thread and split give the same results and errors -------------------------

@pytest.fixture
def split_everything():
    """Every copy of 2**14 elements or more split in as many parts as threads."""
    grain = core._set_pool_grain(1)
    before = dr.get_num_threads()
    yield
    core._set_pool_grain(grain)
    dr.set_num_threads(before)


_kept = []


def _on_threads(n, fn):
    """("ok", the result as an ndarray) or (exception type, message) of fn
    run with n threads. A result NumPy cannot import (bfloat16, float8) is
    decoded to float32, which holds every value of those types exactly."""
    dr.set_num_threads(n)
    try:
        result = fn()
    except (ValueError, TypeError, BufferError) as exc:
        return (type(exc).__name__, str(exc))
    # Kept alive, so that the next result is not written over this one's
    # freed block, whose stale bytes would hide a part left uncopied.
    _kept.append(result)
    del _kept[:-4]
    try:
        return ("ok", np.from_dlpack(result).copy())
    except (BufferError, RuntimeError):  # NumPy: "Unsupported dtype in DLTensor."
        return ("ok", np.from_dlpack(dr.asarray(result, dtype="float32")).copy())


@st.composite
def strided_views(draw):
    """A NumPy view of at least 2**14 elements (the smallest copy the core
    hands to the pool): reversed and stepped axes, a permutation."""
    ndim = draw(st.integers(1, 4))
    steps = [draw(st.sampled_from([1, 1, 2, -1, -2])) for _ in range(ndim)]
    shape = [draw(st.integers(1, 24)) for _ in range(ndim - 1)]
    inner = int(np.prod(shape))
    shape.append(-(-(1 << 14) // inner) + draw(st.integers(0, 2)))
    base = np.arange(int(np.prod([n * abs(s) for n, s in zip(shape, steps)])), dtype=np.float64)
    base = base.reshape([n * abs(s) for n, s in zip(shape, steps)])
    view = base[tuple(slice(None, None, s) for s in steps)]
    return view.transpose(draw(st.permutations(range(ndim))))


VALUES = np.array([0.5, -1.5, 3.0, np.nan, np.inf, -np.inf, 1e10, -7.25, 0.0, -0.0, 250.0, 1e-3])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(view=strided_views(), seed=st.integers(0, 2 ** 32 - 1), threads=st.integers(2, 8),
       dtype=st.sampled_from(["float64", "float32", "int8", "uint16", "int64", "bool", "float16", "complex64"]))
def test_copy_and_native_conversion_equal_on_one_and_many_threads(split_everything, view, seed, threads, dtype):
    """Split over `threads` (whatever the cores), the copy and the conversion
    are byte for byte the one-thread result; NumPy is the oracle of values
    where its own result is defined (no NaN, inf or out-of-range value into
    an integer)."""
    rng = np.random.default_rng(seed)
    data = np.ascontiguousarray(view)
    data[...] = rng.choice(VALUES, size=data.shape)
    view[...] = data
    a = dr.from_dlpack(view)
    copy_one = _on_threads(1, a.copy)
    copy_many = _on_threads(threads, a.copy)
    assert copy_one[0] == copy_many[0] == "ok"
    assert copy_one[1].tobytes() == copy_many[1].tobytes()
    assert copy_one[1].tobytes() == view.copy().tobytes()
    one = _on_threads(1, lambda: dr.asarray(a, dtype=dtype))
    many = _on_threads(threads, lambda: dr.asarray(a, dtype=dtype))
    assert one[0] == many[0] == "ok"
    assert one[1].tobytes() == many[1].tobytes()
    kind = np.dtype(dtype).kind
    finite = np.ones(view.shape, bool)
    if kind in "iu":
        finite = np.isfinite(view) & (np.abs(view) < 100) & ((view >= 0) if kind == "u" else True)
    with np.errstate(all="ignore"):
        expected = view.astype(dtype)
    np.testing.assert_array_equal(many[1][finite], expected[finite])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(view=strided_views(), nan_every=st.integers(1, 5000), threads=st.integers(2, 8),
       dtype=st.sampled_from(["float6_e2m3fn", "float4_e2m1fn", "float8_e4m3fn", "bfloat16"]))
def test_refused_values_equal_on_one_and_many_threads(split_everything, view, nan_every, threads, dtype):
    """A type without NaN refuses each NaN: the same error on one thread and
    split, whose count is NumPy's count of NaNs; types with NaN store them
    and the results are byte-identical."""
    flat = np.arange(view.size, dtype=np.float64).reshape(view.shape) * 0.01
    flat[np.unravel_index(np.arange(0, view.size, nan_every), view.shape)] = np.nan
    view[...] = flat
    a = dr.from_dlpack(view)
    one = _on_threads(1, lambda: dr.asarray(a, dtype=dtype))
    many = _on_threads(threads, lambda: dr.asarray(a, dtype=dtype))
    if dtype in ("float6_e2m3fn", "float4_e2m1fn"):
        nans = int(np.isnan(view).sum())
        assert one == many == ("ValueError", f"{dtype} has no NaN: {nans} NaN value(s) cannot be stored")
    else:
        assert one[0] == many[0] == "ok"
        assert one[1].tobytes() == many[1].tobytes()


def test_split_of_a_short_outer_dimension(split_everything):
    """Dim 0 shorter than four parts: the split runs over dims 0 and 1
    (partial rows at the part boundaries); a transposed pair is tiled."""
    base = np.arange(3 * 7000 * 2, dtype=np.float32).reshape(3, 7000, 2)
    for view in (base, base[:, ::-1, :], base.transpose(2, 0, 1), base[:, :, 0], base.T):
        a = dr.from_dlpack(view)
        for n in (2, 3, 5, 7, 16):
            assert _on_threads(n, a.copy)[1].tobytes() == view.copy().tobytes(), (view.shape, view.strides, n)
            assert _on_threads(n, lambda: dr.asarray(a, dtype="float64"))[1].tobytes() == \
                view.astype(np.float64).tobytes()


# --- threads, fork, signals -------------------------------------------------------

def test_concurrent_copies_from_8_threads(restore_threads):
    """Eight threads copy and convert large arrays at once: one job holds the
    pool, the others run alone; every result is right."""
    dr.set_num_threads(max(CORES, 2))
    sources = [np.arange(k, k + (1 << 19), dtype=np.float64) for k in range(8)]

    def work(k):
        a = dr.from_dlpack(sources[k])
        t = dr.from_dlpack(sources[k].reshape(512, 1024))
        for _ in range(20):
            assert np.array_equal(np.from_dlpack(a.copy()), sources[k])
            assert np.array_equal(np.from_dlpack(dr.asarray(a, dtype="float32")), sources[k].astype(np.float32))
            assert np.array_equal(np.from_dlpack(t.T.copy()), sources[k].reshape(512, 1024).T)

    run_threads(work)


def test_fork_while_a_copy_runs_in_another_thread():
    """A thread of the parent copies without pause; the main thread forks
    five times. Each child copies with the pool (new workers there), checks
    the values and exits; none hangs (each is given 30 s)."""
    got, _ = child_json("""
        import json, os, threading, time
        import numpy as np, dlpack_ref as dr
        from dlpack_ref import _dlpack_ref as core
        dr.set_num_threads(4)
        src = np.arange(4 << 20, dtype=np.float64)
        a = dr.from_dlpack(src)
        stop = threading.Event()
        copies = [0]
        def copier():
            while not stop.is_set():
                a.copy(); a[::2].copy(); dr.asarray(a, dtype="float32")
                copies[0] += 1
        t = threading.Thread(target=copier); t.start()
        time.sleep(0.2)
        results = []
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                ok = np.array_equal(np.from_dlpack(a.copy()), src) and \
                     np.array_equal(np.from_dlpack(dr.asarray(a, dtype="float32")), src.astype(np.float32))
                os._exit(0 if ok and core._pool_workers_started() == 3 else 1)
            deadline = time.time() + 30
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    results.append(os.waitstatus_to_exitcode(status))
                    break
                if time.time() > deadline:
                    os.kill(pid, 9); os.waitpid(pid, 0)
                    results.append("hung")
                    break
                time.sleep(0.01)
        stop.set(); t.join()
        print(json.dumps([results, copies[0] > 0]))
    """, timeout=240)
    assert got == [[0, 0, 0, 0, 0], True]


def test_sigint_during_a_long_copy_leaves_no_work_and_no_memory():
    """SIGINT arrives while 512 MiB copies run split over the pool: the copy
    in flight finishes, KeyboardInterrupt raises after it, the output is
    freed (RSS back to the source's), no part is left running (the next
    copy is right) and the workers are the only extra threads."""
    got, _ = child_json("""
        import json, os, signal, threading, time, gc
        import numpy as np, dlpack_ref as dr
        from dlpack_ref import _dlpack_ref as core
        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
        def tasks():
            return len(os.listdir("/proc/self/task"))
        dr.set_num_threads(2)
        src = np.ones(64 << 20)
        a = dr.from_dlpack(src)
        threads_before = tasks()
        baseline = rss()
        # SIGINT every 0.2 s until the loop is interrupted: one timed signal
        # could fall before the loop on a slow build (debug, sanitizers).
        # The first raises KeyboardInterrupt as Python's own handler does;
        # the rest, which may land after it, are ignored.
        fired = []
        def once(signum, frame):
            if not fired:
                fired.append(signum)
                raise KeyboardInterrupt
        signal.signal(signal.SIGINT, once)
        looping, done = threading.Event(), threading.Event()
        def send():
            looping.wait()
            while not done.wait(0.2):
                os.kill(os.getpid(), signal.SIGINT)
        killer = threading.Thread(target=send)
        interrupted = False
        killer.start()
        deadline = time.monotonic() + 120
        try:
            try:
                while time.monotonic() < deadline:
                    looping.set()
                    y = a.copy()
                    del y
            except KeyboardInterrupt:
                interrupted = True
        finally:
            done.set()
        killer.join()
        gc.collect()
        after = rss()
        z = a[::2].copy()
        right = bool((np.from_dlpack(z) == 1).all())
        print(json.dumps([interrupted, (after - baseline) >> 20, right,
                          tasks() - threads_before, core._pool_workers_started()]))
    """, timeout=240)
    interrupted, grown_mib, right, new_threads, workers = got
    assert interrupted
    assert grown_mib < 64
    assert right
    assert workers == 1
    assert new_threads == 1
