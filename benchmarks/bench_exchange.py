"""Zero-copy exchange latency between array libraries, side by side, in one process.

    python benchmarks/bench_exchange.py [--quick] [--json PATH] [--png PATH]

Prints, and saves as JSON (benchmarks/results/exchange.json) and a PNG chart
of the matrix (when matplotlib is installed):
- the per-call latency of ``consumer.from_dlpack(producer_array)`` for every
  producer x consumer pair among dlpack_ref, numpy, torch, jax,
  array_api_strict and tvm_ffi (a 16-element float32 array; the result is
  dropped each call), min and median over repeats of timeit;
- ``x.__dlpack__()`` and ``x.__dlpack_device__()`` alone for each producer;
- the peak memory of a 256 MiB zero-copy round trip (tracemalloc and RSS);
- the targets of the exchange issue, as ratios of the two calls measured
  again interleaved (dlpack_ref.bench.timing: they alternate within every
  round and each keeps its minimum), so machine load falls on both alike.

Wall-clock numbers on a shared machine wander; benchmarks/callgrind_exchange.py
counts instructions per call, a stable second measure of the same targets.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import resource
import statistics
import sys
import timeit
import tracemalloc

from dlpack_ref.bench.timing import compare

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARIES = ["dlpack_ref", "numpy", "torch", "jax", "array_api_strict", "tvm_ffi"]
N = 16

# The targets: (case, reference case, most allowed ratio). A case is
# "consumer<-producer" for from_dlpack, or "producer.__dlpack__()".
TARGETS = [
    ("dlpack_ref<-numpy", "numpy<-numpy", 1.0),
    ("dlpack_ref<-dlpack_ref", "numpy<-numpy", 0.6),
    ("dlpack_ref.__dlpack__()", "numpy.__dlpack__()", 1.0),
    ("numpy<-dlpack_ref", "numpy<-numpy", 1.1),
    ("dlpack_ref<-torch", "tvm_ffi<-torch", 1.0),
    ("dlpack_ref<-torch", "torch<-torch", 0.1),
]


def load_libraries() -> dict:
    """name -> (module, make(n) -> a float32 array of n zeros, from_dlpack)."""
    libs = {}
    for name in LIBRARIES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if name == "dlpack_ref":
            make = lambda n, m=mod: m.zeros(n, dtype="float32")
        elif name == "numpy":
            make = lambda n, m=mod: m.zeros(n, dtype=m.float32)
        elif name == "torch":
            make = lambda n, m=mod: m.zeros(n, dtype=m.float32)
        elif name == "jax":
            import jax.numpy as jnp
            make = lambda n, m=jnp: m.zeros(n, dtype=m.float32)
            mod = jnp
        elif name == "array_api_strict":
            make = lambda n, m=mod: m.zeros(n, dtype=m.float32)
        elif name == "tvm_ffi":
            import numpy
            make = lambda n, m=mod: m.from_dlpack(numpy.zeros(n, dtype=numpy.float32))
        libs[name] = (mod, make, mod.from_dlpack)
    return libs


def time_call(fn, quick: bool) -> dict:
    """min and median nanoseconds per call over timeit repeats."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()               # >= 0.2 s per repeat
    if quick:
        number = max(1, number // 4)
    runs = timer.repeat(repeat=5 if quick else 15, number=number)
    per_call = [r / number * 1e9 for r in runs]
    return {"min_ns": min(per_call), "median_ns": statistics.median(per_call), "number": number}


def bench_matrix(libs: dict, quick: bool) -> dict:
    results = {}
    arrays = {name: make(N) for name, (_, make, _) in libs.items()}
    for consumer, (_, _, from_dlpack) in libs.items():
        for producer, x in arrays.items():
            key = f"{consumer}<-{producer}"
            try:
                from_dlpack(x)
            except Exception as exc:  # noqa: BLE001 - a pair that does not exchange is reported, not fatal
                results[key] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                continue
            results[key] = time_call(lambda f=from_dlpack, x=x: f(x), quick)
    for producer, x in arrays.items():
        for method in ("__dlpack__", "__dlpack_device__"):
            key = f"{producer}.{method}()"
            fn = getattr(x, method, None)
            if fn is None:
                results[key] = {"error": f"no {method}"}
                continue
            results[key] = time_call(fn, quick)
    return results


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def bench_memory(libs: dict) -> dict:
    """Peak extra memory of numpy -> dlpack_ref -> numpy (and torch) with 256 MiB."""
    import numpy as np
    import dlpack_ref
    n = 256 * 2**20 // 4
    out = {}
    base = np.ones(n, dtype=np.float32)
    for name, back in [("numpy", np.from_dlpack)] + ([("torch", libs["torch"][2])] if "torch" in libs else []):
        gc.collect()
        rss0 = rss_bytes()
        tracemalloc.start()
        a = dlpack_ref.from_dlpack(base)
        y = back(a)
        z = dlpack_ref.from_dlpack(y)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss1 = rss_bytes()
        same = z.data_ptr == base.ctypes.data
        out[f"numpy->dlpack_ref->{name}->dlpack_ref"] = {
            "bytes": base.nbytes, "tracemalloc_peak_bytes": peak, "rss_growth_bytes": rss1 - rss0,
            "zero_copy": same}
        del a, y, z
    return out


def _call_of(libs: dict, arrays: dict, key: str):
    """The callable a matrix key names: "consumer<-producer" or "producer.method()"."""
    if "<-" in key:
        consumer, producer = key.split("<-")
        from_dlpack, x = libs[consumer][2], arrays[producer]
        return lambda: from_dlpack(x)
    producer, method = key[:-2].split(".", 1)
    return getattr(arrays[producer], method)


def ratios(libs: dict, results: dict, quick: bool) -> list:
    """Each target's two calls measured again, interleaved (alternating
    within every round, minimum over the rounds), so that machine load
    falls on both alike; the matrix cells, timed one after the other, only
    describe."""
    arrays = {name: make(N) for name, (_, make, _) in libs.items()}
    rows = []
    for case, ref, limit in TARGETS:
        c, r = results.get(case, {}), results.get(ref, {})
        if "min_ns" not in c or "min_ns" not in r:
            rows.append({"case": case, "reference": ref, "limit": limit, "ratio": None, "pass": None})
            continue
        both = compare({case: _call_of(libs, arrays, case), ref: _call_of(libs, arrays, ref)},
                       rounds=9 if quick else 41)
        ratio = both[case]["min_ns"] / both[ref]["min_ns"]
        rows.append({"case": case, "reference": ref, "limit": limit, "ratio": ratio, "pass": ratio <= limit,
                     "interleaved_min_ns": {case: both[case]["min_ns"], ref: both[ref]["min_ns"]}})
    return rows


def print_report(libs, results, memory, target_rows) -> None:
    names = list(libs)
    width = max(len(n) for n in names) + 2
    print(f"from_dlpack latency, ns per call (min / median), {N}-element float32, result dropped")
    print("rows: consumer, columns: producer")
    print(" " * width + "".join(f"{p:>18s}" for p in names))
    for consumer in names:
        cells = []
        for producer in names:
            r = results[f"{consumer}<-{producer}"]
            cells.append(f"{r['min_ns']:8.0f} /{r['median_ns']:7.0f}" if "min_ns" in r else f"{'n/a':>17s}")
        print(f"{consumer:<{width}s}" + "".join(f"{c:>18s}" for c in cells))
    print()
    print("producer methods alone, ns per call (min / median)")
    for producer in names:
        parts = []
        for method in ("__dlpack__", "__dlpack_device__"):
            r = results[f"{producer}.{method}()"]
            parts.append(f"{method}() {r['min_ns']:7.0f} /{r['median_ns']:7.0f}" if "min_ns" in r else
                         f"{method}() n/a")
        print(f"  {producer:<{width}s}" + "   ".join(parts))
    print()
    print("256 MiB zero-copy round trip, peak extra memory")
    for key, m in memory.items():
        print(f"  {key}: tracemalloc peak {m['tracemalloc_peak_bytes'] / 2**20:.3f} MiB, "
              f"RSS growth {m['rss_growth_bytes'] / 2**20:.3f} MiB, zero-copy {m['zero_copy']}")
    print()
    print("targets (ratio of min latencies, the two calls interleaved)")
    for row in target_rows:
        if row["ratio"] is None:
            print(f"  {row['case']:28s} / {row['reference']:22s}  not measured")
        else:
            verdict = "pass" if row["pass"] else "FAIL"
            print(f"  {row['case']:28s} / {row['reference']:22s} = {row['ratio']:5.2f}  "
                  f"(target <= {row['limit']})  {verdict}")


def save_chart(libs, results, path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    import numpy as np
    names = list(libs)
    grid = np.full((len(names), len(names)), np.nan)
    for i, consumer in enumerate(names):
        for j, producer in enumerate(names):
            r = results[f"{consumer}<-{producer}"]
            if "min_ns" in r:
                grid[i, j] = r["min_ns"]
    fig, ax = plt.subplots(figsize=(8, 6.5))
    im = ax.imshow(np.log10(grid), cmap="viridis_r")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("producer")
    ax.set_ylabel("consumer (from_dlpack)")
    for i in range(len(names)):
        for j in range(len(names)):
            text = "n/a" if np.isnan(grid[i, j]) else f"{grid[i, j]:.0f}"
            ax.text(j, i, text, ha="center", va="center", color="white" if not np.isnan(grid[i, j]) and
                    grid[i, j] > np.nanmedian(grid) else "black", fontsize=8)
    fig.colorbar(im, ax=ax, label="log10(ns per call, min)")
    ax.set_title(f"from_dlpack latency, {N}-element float32 (ns, min)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def versions(libs) -> dict:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in libs:
        mod = importlib.import_module(name)
        out[name] = getattr(mod, "__version__", "?")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    p.add_argument("--json", default=os.path.join(HERE, "results", "exchange.json"))
    p.add_argument("--png", default=os.path.join(HERE, "results", "exchange.png"))
    args = p.parse_args(argv)
    libs = load_libraries()
    gc.collect()
    results = bench_matrix(libs, args.quick)
    memory = bench_memory(libs)
    target_rows = ratios(libs, results, args.quick)
    print_report(libs, results, memory, target_rows)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"versions": versions(libs), "n": N, "quick": args.quick, "latency": results,
                   "memory": memory, "targets": target_rows}, f, indent=2)
    print(f"\nsaved {args.json}")
    if save_chart(libs, results, args.png):
        print(f"saved {args.png}")
    else:
        print("matplotlib is not installed: no chart (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
