"""Leaks: round trips each way keep RSS flat and give back every reference.

The workloads are those of tools/soak_leaks.py (a million round trips each
way, run by hand; its numbers are in docs/guarantees.md); CI runs 20,000.
"""

import gc
import importlib.util
import os
import pathlib
import sys

import pytest

import dlpack_ref

_SOAK_PATH = pathlib.Path(__file__).resolve().parents[1] / "tools" / "soak_leaks.py"
_spec = importlib.util.spec_from_file_location("soak_leaks", _SOAK_PATH)
soak_leaks = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("soak_leaks", soak_leaks)  # dataclasses look their module up there
_spec.loader.exec_module(soak_leaks)

ROUND_TRIPS = 20_000
# Leaking even one 64-byte managed block per round trip would grow RSS by
# 1.25 MiB over 20,000 trips; allocator noise stays far below this.
MAX_RSS_GROWTH = 1024 * 1024

WORKLOADS = soak_leaks.workloads()
# Under AddressSanitizer (tools/sanitize.sh) freed memory sits in a quarantine,
# so RSS says nothing there; the refcount checks still hold.
RSS_MEANINGFUL = not os.environ.get("DLREF_SANITIZER")


def rss_growth_ok(growth):
    return growth is None or not RSS_MEANINGFUL or growth < MAX_RSS_GROWTH


@pytest.mark.parametrize("workload", WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_round_trips_keep_rss_flat_and_refcounts_exact(workload):
    name, make_source, round_trip, identity = workload
    r = soak_leaks.soak(name, make_source, round_trip, identity, ROUND_TRIPS)
    assert r.same_data, f"{name}: the round trip did not end on the source's data"
    assert r.refcount_start == r.refcount_end, (
        f"{name}: source refcount went {r.refcount_start} -> {r.refcount_end} over {ROUND_TRIPS} round trips")
    assert rss_growth_ok(r.rss_growth_bytes), (
        f"{name}: RSS grew {r.rss_growth_bytes} bytes over {ROUND_TRIPS} round trips")


def test_expected_workloads_present():
    names = {w[0] for w in WORKLOADS}
    assert {"Array->capsule(versioned)->Array", "Array->capsule(legacy)->Array",
            "Array->copy=True->Array"} <= names
    if soak_leaks._numpy() is not None:
        assert {"numpy->Array->numpy", "Array->numpy->Array"} <= names
    if soak_leaks._torch() is not None:
        assert {"torch->Array->torch", "Array->torch->Array"} <= names


def _rss_growth_of(fn, n):
    for _ in range(1000):
        fn()
    gc.collect()
    start = soak_leaks.rss_bytes()
    for _ in range(n):
        fn()
    gc.collect()
    end = soak_leaks.rss_bytes()
    return None if start is None else end - start


def test_unconsumed_capsules_release_their_export():
    """A capsule dropped without being imported runs the deleter from its
    destructor: the exported Array's reference comes back."""
    a = dlpack_ref.zeros((4, 4), dtype="float32")
    start = sys.getrefcount(a)

    def drop():
        a.__dlpack__(max_version=(1, 3))
        a.__dlpack__()

    growth = _rss_growth_of(drop, ROUND_TRIPS)
    assert sys.getrefcount(a) == start
    assert rss_growth_ok(growth), f"RSS grew {growth} bytes"


def test_failed_imports_release_everything():
    """Error paths lose nothing either: a consumed capsule imported again and
    a read-only export refused as legacy leave refcounts and RSS as they were."""
    a = dlpack_ref.zeros((4, 4), dtype="float32")
    ro = dlpack_ref.from_dlpack(dlpack_ref.asarray(b"\x00" * 16))
    assert ro.readonly
    start_a, start_ro = sys.getrefcount(a), sys.getrefcount(ro)

    def fail():
        cap = a.__dlpack__(max_version=(1, 3))
        dlpack_ref.from_dlpack(cap)
        with pytest.raises(BufferError, match="already consumed"):
            dlpack_ref.from_dlpack(cap)
        with pytest.raises(BufferError, match="read-only"):
            ro.__dlpack__()
        with pytest.raises(dlpack_ref.CopyForbiddenError):
            dlpack_ref.from_dlpack(a, device="cuda:0", copy=False)

    growth = _rss_growth_of(fail, ROUND_TRIPS // 4)
    assert (sys.getrefcount(a), sys.getrefcount(ro)) == (start_a, start_ro)
    assert rss_growth_ok(growth), f"RSS grew {growth} bytes"


@pytest.mark.parametrize("importer", ["dlpack_ref", "numpy"])
def test_a_cycle_through_an_import_is_kept_until_broken_as_numpy_keeps_it(importer):
    # The manager's reference to the producer is a C pointer the collector
    # cannot see (docs/guarantees.md, "Reference cycles through a DLPack
    # tensor"); NumPy's own from_dlpack is the oracle. A memoryview, whose
    # exporter the collector sees, is collected.
    np = pytest.importorskip("numpy")
    import weakref

    class Owned(np.ndarray):
        pass

    from_dlpack = dlpack_ref.from_dlpack if importer == "dlpack_ref" else np.from_dlpack
    s = np.arange(4.0).view(Owned)
    alive = weakref.ref(s)
    s.keep = from_dlpack(s)
    keep = weakref.ref(s.keep)
    del s
    gc.collect()
    assert alive() is not None and keep() is not None      # never collected
    del alive().keep                                         # the program breaks the cycle
    gc.collect()
    assert alive() is None and keep() is None

    s = np.arange(4.0).view(Owned)
    alive = weakref.ref(s)
    s.keep = memoryview(s)
    del s
    gc.collect()
    assert alive() is None
