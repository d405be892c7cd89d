"""Where the worker pool starts to pay: each case timed on one thread and
split in two (every split forced, the pool's grain set to 1 byte), the two
interleaved (dlpack_ref.bench.timing.compare), over sizes in bytes moved (read plus
written), the whole sweep repeated (--runs) and each ratio the median over
the runs, so that a burst of load from other processes moves none of them.
The threshold is the smallest size from which two threads beat one by at
least 10 % (the geometric mean of the cases' ratios at most 0.9) and no
case is slower split, at that size and at every larger one. Where no size gains that much (a machine whose
other processes leave no core free), the break-even size stands in: the
smallest from which the geometric mean stays at most 1.05. The core's grain (DLREF_POOL_GRAIN in src/dlref_split.h: the least bytes a part
moves) is half of it. Results: benchmarks/results/pool_threshold.json (with
the machine, the load average at the start and the end, the settings and the
versions: benchmarks/runinfo.py), rendered into docs/benchmarks.md, "Worker
pool threshold", by tools/docs_figures.py.

    python benchmarks/pool_threshold.py [--quick] [--runs N] [--threads N] [--json PATH]

Copies and conversions of fewer than 2**14 elements keep the GIL and never
split (_NOGIL_ELEMENTS in src/_copies.pxi), so the sweep starts there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import runinfo

import dlpack_ref as dr
from dlpack_ref import _dlpack_ref as core
from dlpack_ref.bench.timing import compare

HERE = os.path.dirname(os.path.abspath(__file__))

KIB, MIB = 1 << 10, 1 << 20


def cases(moved: int) -> dict:
    """name -> a call that moves about `moved` bytes."""
    contiguous = dr.from_dlpack(np.ones(moved // 16))
    side = max(int((moved // 8) ** 0.5), 128)
    square = dr.from_dlpack(np.ones((side, side), np.float32))
    wide = dr.from_dlpack(np.ones((side, 2 * side), np.float32))
    f64 = np.ones(moved // 12)
    return {
        "Array.copy() float64": contiguous.copy,
        "a.T.copy() float32": lambda: square.T.copy(),
        "a[:, ::2].copy() float32": lambda: wide[:, ::2].copy(),
        "asarray(f64, dtype=float32)": lambda: dr.asarray(f64, dtype="float32"),
    }


def sweep(sizes, threads: int, rounds: int) -> list:
    rows = []
    for moved in sizes:
        for name, call in cases(moved).items():
            def one(call=call):
                dr.set_num_threads(1)
                call()

            def split(call=call):
                dr.set_num_threads(threads)
                call()
            stats = compare({"1 thread": one, f"{threads} threads": split}, rounds=rounds, budget_s=0.005)
            t1 = stats["1 thread"]["min_ns"]
            tn = stats[f"{threads} threads"]["min_ns"]
            rows.append({"bytes_moved": moved, "case": name, "one_ns": t1, "split_ns": tn, "ratio": tn / t1})
            print(f"  {moved // KIB:8d} KiB  {name:30s} 1 thread {t1:11.0f} ns  {threads} threads {tn:11.0f} ns  "
                  f"ratio {tn / t1:5.2f}", flush=True)
    return rows


def median_rows(runs: list) -> list:
    """One row per (size, case): the median ratio over the runs."""
    import statistics
    merged = []
    for i, row in enumerate(runs[0]):
        ratios = [run[i]["ratio"] for run in runs]
        merged.append({**row, "ratio": statistics.median(ratios), "ratios": ratios})
    return merged


def geomean_by_size(rows, sizes) -> dict:
    import math
    means = {}
    for moved in sizes:
        ratios = [r["ratio"] for r in rows if r["bytes_moved"] == moved]
        means[moved] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return means


def threshold(means: dict, limit: float, worst: dict | None = None) -> int | None:
    """The smallest size from which the geometric mean is at most `limit`
    at it and at every larger size (and, given `worst`, no case is slower
    split than on one thread there)."""
    found = None
    for moved in sorted(means, reverse=True):
        if means[moved] <= limit and (worst is None or worst[moved] <= 1.0):
            found = moved
        else:
            break
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    p.add_argument("--runs", type=int, default=5, help="sweeps, each ratio the median over them")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--json", default=os.path.join(HERE, "results", "pool_threshold.json"))
    args = p.parse_args(argv)
    if args.threads < 2:
        print("one core available: nothing to split")
        return 1
    sizes = [64 * KIB << i for i in range(10)]  # 64 KiB .. 32 MiB moved
    runs_asked, rounds = (1, 5) if args.quick else (args.runs, 21)
    began = runinfo.start()
    print(f"load average at start: {began['load_average'][0]:.2f} on {os.cpu_count()} CPUs, "
          f"{len(os.sched_getaffinity(0))} available; split in {args.threads}")
    grain = core._set_pool_grain(1)
    try:
        runs = []
        for run in range(runs_asked):
            print(f"run {run + 1}")
            runs.append(sweep(sizes, args.threads, rounds))
    finally:
        core._set_pool_grain(grain)
    rows = median_rows(runs)
    means = geomean_by_size(rows, sizes)
    print("median over the runs; geometric mean of the cases:")
    for moved, mean in means.items():
        print(f"  {moved // KIB:8d} KiB  " + "  ".join(f"{r['ratio']:5.2f}" for r in rows if r["bytes_moved"] == moved)
              + f"   geomean {mean:5.2f}")
    worst = {moved: max(r["ratio"] for r in rows if r["bytes_moved"] == moved) for moved in sizes}
    gain, even = threshold(means, 0.9, worst), threshold(means, 1.05)
    found = gain or even
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(f"10 % gain, no case slower, from: {gain} bytes moved" if gain else "10 % gain: not reached in the sweep")
    print(f"break-even from: {even} bytes moved" if even else "break-even: not reached in the sweep")
    if found:
        print(f"threshold {found} bytes moved: grain {found // 2} bytes (DLREF_POOL_GRAIN is {grain})")
    run = runinfo.record(began, modules=["numpy"], settings={
        "quick": args.quick, "threads": args.threads, "runs": len(runs), "rounds": rounds, "budget_s": 0.005,
        "sizes_bytes_moved": sizes, "gain_limit": 0.9, "break_even_limit": 1.05})
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({**run, "core_grain_bytes": grain, "gain_from_bytes_moved": gain,
                   "break_even_from_bytes_moved": even, "threshold_bytes_moved": found,
                   "geomean_by_size": {str(k): v for k, v in means.items()}, "rows": rows}, f, indent=2)
    print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
