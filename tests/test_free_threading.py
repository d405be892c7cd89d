"""Stress under free threading: many threads exporting, importing and
consuming the same capsules and Arrays at once, with exact reference and
deleter counts afterwards.

With the GIL these tests mostly interleave at bytecode boundaries; on a
free-threaded CPython (3.13t) the threads really run at once, which is what
can break a check-then-rename of a capsule, a cache written by two threads
or a counter changed without its lock. The normal suite runs them short;
the free-threading CI lane sets DLPACK_REF_STRESS_ROUNDS higher.
"""

import gc
import json
import os
import subprocess
import sys
import sysconfig
import threading

import pytest

import dlpack_ref
import dlpack_ref.cuda
from support.threads import N_THREADS, run_threads
from dlpack_ref.testing import NAME_USED_LEGACY, NAME_USED_VERSIONED, CapsuleFactory, ForeignProducer, capsule_name

ROUNDS = int(os.environ.get("DLPACK_REF_STRESS_ROUNDS", "40"))
CAPSULES_PER_ROUND = 16
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

# The tests start their own threads and count over all of them: running one
# of them in several pytest-run-parallel threads at once would mix the counts.
pytestmark = pytest.mark.thread_unsafe(reason="starts its own threads and counts over all of them")


def contest(make_capsules, rounds):
    """Every round, all threads try to import every capsule of one batch, in
    different orders. Returns, per capsule, how many threads won it, and the
    set of error messages the losers got."""
    wins, losses = [], set()
    for _ in range(rounds):
        batch = make_capsules()
        won = [[] for _ in range(N_THREADS)]
        lost = [[] for _ in range(N_THREADS)]

        def consume(k):
            order = range(len(batch)) if k % 2 else range(len(batch) - 1, -1, -1)
            for i in order:
                try:
                    won[k].append((i, dlpack_ref.from_dlpack(batch[i])))
                except BufferError as exc:
                    lost[k].append(str(exc))

        run_threads(consume)
        per_capsule = [0] * len(batch)
        for results in won:
            for i, _ in results:
                per_capsule[i] += 1
        wins.extend(per_capsule)
        losses.update(msg for msgs in lost for msg in msgs)
        assert all(capsule_name(c) in (NAME_USED_VERSIONED, NAME_USED_LEGACY) for c in batch)
        del won, batch
    return wins, losses


def test_exactly_one_thread_wins_a_contested_foreign_capsule():
    """Hand-built capsules with counted deleters (a second owner would show
    as a second deleter call, without crashing): each has exactly one winner,
    the losers get "already consumed", every deleter runs exactly once."""
    factory = CapsuleFactory()
    ids = []

    def make():
        batch = []
        for j in range(CAPSULES_PER_ROUND):
            batch.append(factory.make(shape=(3,), versioned=bool(j % 2)))
            ids.append(factory.last_id)
        return batch

    wins, losses = contest(make, ROUNDS)
    gc.collect()
    assert wins == [1] * len(wins)
    assert all("already consumed" in msg for msg in losses) and losses
    assert [factory.calls_for(i) for i in ids] == [1] * len(ids)
    assert factory.deleter_calls == len(ids) and factory.live == 0


def _contest_own_exports(rounds):
    """dlpack-ref's own capsules contested (a second owner would be a double
    free, hence run in a child process): returns the figures as a dict."""
    src = dlpack_ref.zeros((4, 4), dtype="float32")
    gc.collect()
    start = sys.getrefcount(src)

    def make():
        return [src.__dlpack__(max_version=(1, 3)) if j % 2 else src.__dlpack__()
                for j in range(CAPSULES_PER_ROUND)]

    wins, losses = contest(make, rounds)
    gc.collect()
    return {"wins": sorted(set(wins)), "n": len(wins), "refcount_delta": sys.getrefcount(src) - start,
            "losses_say_consumed": all("already consumed" in m for m in losses),
            "gil_enabled": sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True}


def test_exactly_one_thread_wins_a_contested_dlpack_ref_capsule():
    child = subprocess.run([sys.executable, __file__, "contest-own", str(ROUNDS)],
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"child died ({child.returncode}): {child.stderr[-2000:]}"
    figures = json.loads(child.stdout)
    assert figures["wins"] == [1] and figures["n"] == ROUNDS * CAPSULES_PER_ROUND
    assert figures["refcount_delta"] == 0 and figures["losses_say_consumed"]
    if FREE_THREADED:
        assert not figures["gil_enabled"], "the child ran with the GIL: it proved nothing"


def test_threads_share_arrays_views_and_foreign_capsules():
    """Every thread exports the same Array (versioned, legacy, through
    views), imports it back, imports a shared NumPy array and hand-built
    capsules, and releases half of what it made on another thread. The
    sources end at their starting reference counts, every foreign deleter ran
    once."""
    np = pytest.importorskip("numpy")
    src = dlpack_ref.asarray([[8 * r + c for c in range(8)] for r in range(8)], dtype="int64")
    src_np = np.arange(64, dtype=np.float32).reshape(8, 8)
    factory = CapsuleFactory()
    handoff = [[] for _ in range(N_THREADS)]
    handoff_lock = threading.Lock()
    gc.collect()
    start = [sys.getrefcount(src), sys.getrefcount(src_np)]

    def work(k):
        for i in range(ROUNDS):
            row = src[i % 8]
            keep = [
                dlpack_ref.from_dlpack(src.__dlpack__(max_version=(1, 3))),
                dlpack_ref.from_dlpack(src.__dlpack__()),
                dlpack_ref.from_dlpack(src),
                dlpack_ref.from_dlpack(src[1:7:2, ::-1]),
                dlpack_ref.from_dlpack(row),
                np.from_dlpack(src.T),
                dlpack_ref.from_dlpack(src_np),
                dlpack_ref.from_dlpack(src_np[::2]),
                dlpack_ref.from_dlpack(factory.make(shape=(2, 2))),
            ]
            src.__dlpack__(max_version=(1, 3))  # dropped unconsumed
            assert keep[0].data_ptr == src.data_ptr and keep[6].data_ptr == src_np.ctypes.data
            assert keep[4].tolist() == list(range(8 * (i % 8), 8 * (i % 8) + 8))
            assert keep[5][0, 1] == 8 and keep[7].shape == (4, 8)
            with handoff_lock:
                theirs = handoff[(k + 1) % N_THREADS]
                handoff[(k + 1) % N_THREADS] = []
                handoff[k].append(keep[::2])
            del theirs[:]  # released by another thread than made it

    run_threads(work)
    handoff.clear()
    gc.collect()
    assert [sys.getrefcount(src), sys.getrefcount(src_np)] == start
    assert factory.deleter_calls == N_THREADS * ROUNDS and factory.live == 0


def test_exchange_api_type_cache_written_by_many_threads():
    """Fresh types looked up from all threads at once: one answer per type,
    and the cache holds exactly one reference to the table's capsule per
    type (a lost race drops its entry whole)."""
    api = dlpack_ref.Array.__dlpack_c_exchange_api__
    n_types = 50 * max(1, ROUNDS // 10)
    with_api = [type(f"WithAPI{i}", (), {"__dlpack_c_exchange_api__": api}) for i in range(n_types)]
    without = [type(f"Plain{i}", (), {}) for i in range(n_types)]
    types = [t for pair in zip(with_api, without) for t in pair]
    a = dlpack_ref.zeros((3,))
    gc.collect()
    start = sys.getrefcount(api)
    seen = [None] * N_THREADS

    def look(k):
        order = types if k % 2 else types[::-1]
        seen[k] = [dlpack_ref.exchange_api_version(t) for t in order][:: 1 if k % 2 else -1]
        for _ in range(ROUNDS):
            assert dlpack_ref.from_dlpack(a).data_ptr == a.data_ptr

    run_threads(look)
    expected = [(1, 3) if t in with_api else None for t in types]
    assert all(s == expected for s in seen)
    gc.collect()
    assert sys.getrefcount(api) == start + n_types


def test_stream_context_counter_entered_and_left_by_many_threads():
    """All threads enter and leave consumer-stream contexts (nested, each
    thread its own context objects) while importing from one producer:
    every import inside a context asks the producer's device exactly once
    (its request depends on it), the plain one outside asks none, each takes
    exactly one capsule, and afterwards every deleter ran once."""
    factory = CapsuleFactory()
    producer = ForeignProducer(factory, shape=(2,))
    queries = []
    producer.__dlpack_device__ = lambda: queries.append(None) or producer.device  # list.append: atomic without the GIL

    def work(k):
        for i in range(ROUNDS):
            with dlpack_ref.cuda.stream(2 if (i + k) % 2 else 1):
                with dlpack_ref.cuda.stream(-1):
                    dlpack_ref.from_dlpack(producer)
                dlpack_ref.from_dlpack(producer)

    run_threads(work)
    dlpack_ref.from_dlpack(producer)  # outside every context
    n = 2 * N_THREADS * ROUNDS + 1
    assert len(queries) == n - 1 and len(producer.calls) == n
    assert all(call == {"max_version": (1, 3)} for call in producer.calls)
    gc.collect()
    assert factory.deleter_calls == n and factory.live == 0


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (3.13t+)")
def test_import_in_a_fresh_interpreter_keeps_the_gil_disabled():
    """With default settings (no PYTHON_GIL) and warnings as errors: the
    import neither re-enables the GIL nor warns."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    child = subprocess.run([sys.executable, "-W", "error", "-c",
                            "import sys, dlpack_ref, dlpack_ref.testing, dlpack_ref.cuda; "
                            "print(sys._is_gil_enabled())"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False" and child.stderr == ""


if __name__ == "__main__" and sys.argv[1:2] == ["contest-own"]:
    print(json.dumps(_contest_own_exports(int(sys.argv[2]))))
