"""Leak soak: many zero-copy round trips each way between dlpack-ref and
NumPy, dlpack-ref itself and PyTorch, reporting RSS growth and whether the
reference counts of the sources came back to their starting values.

    python tools/soak_leaks.py                  # a million round trips each way
    python tools/soak_leaks.py -n 20000 --json out.json

Exit status 0 when every workload keeps RSS growth under --max-rss-mib
(default 5) and every source's reference count returns to its start.
tests/test_leaks.py runs the same workloads with a shorter count in CI.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import asdict, dataclass

import dlpack_ref

VERSIONED = (1, 3)


def rss_bytes() -> int | None:
    """Resident set size of this process (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return None
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def _numpy():
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# Each workload: (name, make_source, one_round_trip(source) -> final object,
# identity(obj)). A round trip ends on the source's library so that the
# result's identity (its data address; its shape for copies) can be compared
# with the source's.
def workloads():
    """The round trips available with the libraries installed."""
    out = []
    np = _numpy()
    if np is not None:
        def ndarray():
            return np.arange(64, dtype=np.float32).reshape(8, 8)

        def ndarray_address(obj):
            return obj.__array_interface__["data"][0]
        out += [
            ("numpy->Array->numpy", ndarray, lambda src: np.from_dlpack(dlpack_ref.from_dlpack(src)),
             ndarray_address),
            ("Array->numpy->Array", _array, lambda src: dlpack_ref.from_dlpack(np.from_dlpack(src)), _address),
            # The buffer protocol both ways: asarray's checked buffer import,
            # and the Array's own export read back by NumPy.
            ("numpy->buffer->Array->buffer->numpy", lambda: ndarray()[:, ::2],
             lambda src: np.asarray(memoryview(dlpack_ref.asarray(memoryview(src)))), ndarray_address),
        ]
    out += [
        # Assignment from an overlapping view of itself: a temporary every time.
        ("Array[...]=Array[::-1] (overlap)", _array, _assign_reversed, _address),
        ("Array->capsule(versioned)->Array", _array,
         lambda src: dlpack_ref.from_dlpack(src.__dlpack__(max_version=VERSIONED)), _address),
        ("Array->capsule(legacy)->Array", _array, lambda src: dlpack_ref.from_dlpack(src.__dlpack__()), _address),
        # A copy never shares memory: compare shapes instead of pointers.
        ("Array->copy=True->Array", _array, lambda src: dlpack_ref.from_dlpack(src, copy=True), lambda obj: obj.shape),
    ]
    torch = _torch()
    if torch is not None:
        out += [
            ("torch->Array->torch", lambda: torch.arange(64, dtype=torch.float32).reshape(8, 8),
             lambda src: torch.from_dlpack(dlpack_ref.from_dlpack(src)), lambda obj: obj.data_ptr()),
            ("Array->torch->Array", _array, lambda src: dlpack_ref.from_dlpack(torch.from_dlpack(src)), _address),
        ]
    return out


def _array():
    return dlpack_ref.zeros((8, 8), dtype="float32")


def _address(a):
    return a.data_ptr


def _assign_reversed(a):
    a[...] = a[::-1]
    return a


@dataclass
class SoakResult:
    name: str
    round_trips: int
    seconds: float
    rss_growth_bytes: int | None
    refcount_start: int
    refcount_end: int
    same_data: bool

    @property
    def refcount_ok(self) -> bool:
        return self.refcount_start == self.refcount_end

    def ok(self, max_rss_bytes: int) -> bool:
        rss_ok = self.rss_growth_bytes is None or self.rss_growth_bytes < max_rss_bytes
        return rss_ok and self.refcount_ok and self.same_data


def soak(name, make_source, round_trip, pointer, n: int, warmup: int = 2000) -> SoakResult:
    """n round trips from one source. RSS is measured after a warm-up (caches,
    allocator arenas and interned objects settle there), refcounts around the
    whole loop."""
    src = make_source()
    gc.collect()
    refcount_start = sys.getrefcount(src)
    expected = pointer(src)
    same_data = pointer(round_trip(src)) == expected
    for _ in range(warmup):
        round_trip(src)
    gc.collect()
    rss_start = rss_bytes()
    t0 = time.perf_counter()
    for _ in range(n):
        round_trip(src)
    seconds = time.perf_counter() - t0
    same_data = same_data and pointer(round_trip(src)) == expected
    gc.collect()
    rss_end = rss_bytes()
    refcount_end = sys.getrefcount(src)
    growth = None if rss_start is None else rss_end - rss_start
    return SoakResult(name, n, seconds, growth, refcount_start, refcount_end, same_data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--round-trips", type=int, default=1_000_000)
    p.add_argument("--max-rss-mib", type=float, default=5.0)
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    limit = int(args.max_rss_mib * 1024 * 1024)
    results = []
    print(f"{'round trip':36} {'count':>9} {'seconds':>8} {'RSS growth':>12} {'refcount':>11} same data")
    for name, make, trip, ptr in workloads():
        r = soak(name, make, trip, ptr, args.round_trips)
        results.append(r)
        growth = "n/a" if r.rss_growth_bytes is None else f"{r.rss_growth_bytes / 1024:.0f} KiB"
        print(f"{r.name:36} {r.round_trips:9d} {r.seconds:8.2f} {growth:>12} "
              f"{r.refcount_start:>4} -> {r.refcount_end:<4} {r.same_data}  {'ok' if r.ok(limit) else 'FAIL'}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) | {"ok": r.ok(limit)} for r in results], f, indent=2)
    return 0 if all(r.ok(limit) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
