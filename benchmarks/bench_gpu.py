"""GPU benchmarks of dlpack-ref's CUDA layer, side by side with the
baselines users would compare against, in one process:

1. ``to_device`` bandwidth for H2D (from pageable and from pinned
   memory), D2H and D2D (``copy`` / ``copy=True``) against a raw
   ``cuMemcpyAsync`` of the same size between buffers allocated once, on
   the legacy stream and on a non-blocking stream, interleaved, as ratios
   (goal: >= 95%). D2H's raw copy goes into pinned memory, where
   to_device's result lands; the raw copy into pageable memory is shown
   beside it. The to_device figure includes taking its result from the
   memory pool or cache and giving it back, which is what a user pays; on
   the simulator the driver allocations per call after warm-up are shown
   (they must be 0).
2. The cost of a synchronized exchange, ``Array.__dlpack__(stream=s)`` with
   the array's work on another stream (an event recorded and waited on),
   against CuPy's ``ndarray.__dlpack__(stream=s)`` doing the same
   (goal: <= 1.0x).

    python benchmarks/bench_gpu.py [--json PATH] [--quick] [--simulator]

Prints a table; writes JSON to PATH (or $OUT/bench_gpu.json when $OUT is set),
with the run that made it (the command, the machine, the load average at the
start and the end, the settings and the versions: benchmarks/runinfo.py).
Exits 1 when CUDA cannot be used. ``--simulator`` runs on the simulated
driver of tests/support (checks that the script works; its numbers mean
nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import runinfo  # benchmarks/runinfo.py: this folder is first on sys.path

import dlpack_ref as dr
from dlpack_ref import cuda
from dlpack_ref._cuda_driver import check, runtime


def _timeit(fn, repeat, sync):
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _interleaved(calls, rounds, sync, warm=None):
    """name -> (min, median) wall seconds of ``fn(); sync()``; the calls
    alternate within each round (rotating order) after one warm-up call
    each (then ``warm()`` is called), so that load and clocks fall on all
    of them alike."""
    for fn in calls.values():
        fn()
        sync()
    if warm is not None:
        warm()
    names = list(calls)
    samples = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            calls[n]()
            sync()
            samples[n].append(time.perf_counter() - t0)
    return {n: (min(v), statistics.median(v)) for n, v in samples.items()}


def _simulator():
    """The loaded simulator (its allocation counters), or None on a GPU."""
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from support import cudasim
    except ImportError:
        return None
    lib = cudasim.loaded()
    return cudasim.Simulator(lib) if lib is not None else None


_ALLOCS = ("mem_alloc", "mem_free", "host_alloc", "host_free", "pool_grow")


def bandwidth(sizes, rounds):
    """to_device against raw cuMemcpyAsync between buffers allocated once,
    per direction, size and stream (the legacy default stream, and a
    non-blocking stream passed as ``stream=``). D2H: the raw copy goes into
    pinned memory (what to_device's result is), and the raw copy into
    pageable memory is shown beside it (``pageable_GBps``). The to_device
    figure includes taking its result from the pool or cache and giving it
    back, which is what a user pays."""
    rt = runtime()
    d = rt.driver
    sim = _simulator()
    pushed = rt.enter(0)
    rows = []
    try:
        user_stream = int(check(d.cuStreamCreate(1), "cuStreamCreate"))
        for nbytes in sizes:
            host = np.ones(nbytes, dtype=np.uint8)
            host_out = np.empty(nbytes, dtype=np.uint8)
            dev_a = check(d.cuMemAlloc(nbytes), "cuMemAlloc")
            dev_b = check(d.cuMemAlloc(nbytes), "cuMemAlloc")
            pinned = check(d.cuMemHostAlloc(nbytes, 0), "cuMemHostAlloc")
            src_host = dr.asarray(host)
            src_pinned = src_host.to_device("cpu_pinned")
            src_dev = src_host.to_device("cuda:0")
            for label, s in (("legacy", 1), ("stream", user_stream)):
                ours_stream = None if s == 1 else s

                def sync(s=s):
                    check(d.cuStreamSynchronize(s), "cuStreamSynchronize")

                cases = {
                    "H2D": (lambda: check(d.cuMemcpyAsync(dev_a, host.ctypes.data, nbytes, s), "cuMemcpyAsync"),
                            lambda: src_host.to_device("cuda:0", stream=ours_stream)),
                    "H2D pinned": (lambda: check(d.cuMemcpyAsync(dev_a, pinned, nbytes, s), "cuMemcpyAsync"),
                                   lambda: src_pinned.to_device("cuda:0", stream=ours_stream)),
                    "D2H": (lambda: check(d.cuMemcpyAsync(pinned, dev_a, nbytes, s), "cuMemcpyAsync"),
                            lambda: src_dev.to_device("cpu", stream=ours_stream)),
                    "D2D": (lambda: check(d.cuMemcpyAsync(dev_b, dev_a, nbytes, s), "cuMemcpyAsync"),
                            lambda: src_dev.__dlpack__(max_version=(1, 3), copy=True, stream=ours_stream)
                            if ours_stream is not None else src_dev.copy()),
                }
                for kind, (raw, ours) in cases.items():
                    calls = {"raw": raw, "ours": ours}
                    if kind == "D2H":
                        calls["pageable"] = lambda: check(
                            d.cuMemcpyAsync(host_out.ctypes.data, dev_a, nbytes, s), "cuMemcpyAsync")
                    before = {}
                    t = _interleaved(calls, rounds, sync, lambda: before.update(sim.counters(*_ALLOCS) if sim else {}))
                    row = {"copy": kind, "stream": label, "bytes": nbytes,
                           "raw_GBps": nbytes / t["raw"][0] / 1e9, "to_device_GBps": nbytes / t["ours"][0] / 1e9,
                           "ratio": t["raw"][0] / t["ours"][0], "ratio_median": t["raw"][1] / t["ours"][1]}
                    if "pageable" in t:
                        row["pageable_GBps"] = nbytes / t["pageable"][0] / 1e9
                    if sim:
                        after = sim.counters(*_ALLOCS)
                        # driver allocations and frees per to_device after its warm-up call
                        row["driver_allocs_per_call"] = sum(after[k] - before[k] for k in _ALLOCS) / rounds
                    rows.append(row)
            del src_host, src_pinned, src_dev
            check(d.cuMemFree(dev_a), "cuMemFree")
            check(d.cuMemFree(dev_b), "cuMemFree")
            check(d.cuMemFreeHost(pinned), "cuMemFreeHost")
        check(d.cuStreamSynchronize(user_stream), "cuStreamSynchronize")
        check(d.cuStreamDestroy(user_stream), "cuStreamDestroy")
    finally:
        rt.leave(pushed)
    return rows


def exchange(repeat, inner=200):
    try:
        import cupy as cp
    except ImportError:
        return {"skipped": "CuPy is not installed"}
    producer = cp.cuda.Stream(non_blocking=True)
    consumer = cp.cuda.Stream(non_blocking=True)
    with producer:
        x = cp.zeros(1024, dtype=cp.float32)
    with cuda.stream(producer.ptr):
        a = dr.from_dlpack(x)         # our Array's last write is on the producer stream too
    s = consumer.ptr

    def ours():
        for _ in range(inner):
            a.__dlpack__(stream=s, max_version=(1, 3))

    def theirs():
        with producer:
            for _ in range(inner):
                x.__dlpack__(stream=s, max_version=(1, 3))

    def sync():
        consumer.synchronize()

    t_ours = _timeit(ours, repeat, sync) / inner
    t_cupy = _timeit(theirs, repeat, sync) / inner
    return {"dlpack_ref_us": t_ours * 1e6, "cupy_us": t_cupy * 1e6, "ratio": t_ours / t_cupy}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write results here (default $OUT/bench_gpu.json when $OUT is set)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    p.add_argument("--simulator", action="store_true", help="run on the simulated driver of tests/support")
    args = p.parse_args(argv)
    if args.simulator:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from support import cudasim
        cudasim.load()
    try:
        cuda.require()
    except cuda.CUDAUnavailableError as exc:
        print(f"bench_gpu: CUDA cannot be used: {exc}")
        return 1
    sizes = [1 << 20, 16 << 20, 64 << 20, 256 << 20] if not args.quick else [1 << 20, 16 << 20, 64 << 20]
    repeat = 5 if args.quick else 15
    began = runinfo.start()
    results = {"driver": "simulator" if args.simulator else "real",
               "bandwidth": bandwidth(sizes, repeat), "exchange": exchange(repeat)}
    results = {**runinfo.record(began, modules=["numpy", "cupy", "cuda.bindings"],
                                settings={"quick": args.quick, "sizes": sizes, "repeat": repeat,
                                          "simulator": args.simulator}), **results}

    print(f"{'copy':10} {'stream':6} {'bytes':>10} {'raw GB/s':>9} {'to_device GB/s':>14} {'ratio':>6} "
          f"{'median':>6}  goal >= 0.95   (D2H: raw into pinned; pageable GB/s; sim: driver allocs/call)")
    for r in results["bandwidth"]:
        flag = "ok" if r["ratio"] >= 0.95 else "BELOW"
        extra = f"  pageable {r['pageable_GBps']:.2f}" if "pageable_GBps" in r else ""
        if "driver_allocs_per_call" in r:
            extra += f"  allocs/call {r['driver_allocs_per_call']:.3f}"
        print(f"{r['copy']:10} {r['stream']:6} {r['bytes']:10d} {r['raw_GBps']:9.2f} {r['to_device_GBps']:14.2f} "
              f"{r['ratio']:6.3f} {r['ratio_median']:6.3f}  {flag}{extra}")
    ex = results["exchange"]
    if "skipped" in ex:
        print(f"exchange: skipped ({ex['skipped']})")
    else:
        flag = "ok" if ex["ratio"] <= 1.0 else "ABOVE"
        print(f"synchronized exchange __dlpack__(stream=s): dlpack_ref {ex['dlpack_ref_us']:.2f} us, "
              f"CuPy {ex['cupy_us']:.2f} us, ratio {ex['ratio']:.3f}  goal <= 1.0 {flag}")

    path = args.json or (os.path.join(os.environ["OUT"], "bench_gpu.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
