"""GPU benchmarks of dlpack-ref's CUDA layer, side by side with the
baselines users would compare against, in one process:

1. ``to_device`` bandwidth for H2D, D2H and D2D against a raw
   ``cuMemcpyAsync`` of the same size on the legacy stream between buffers
   allocated once (goal: >= 95%). The to_device figure includes allocating
   (and later freeing) its result, which is what a user pays.
2. The cost of a synchronized exchange, ``Array.__dlpack__(stream=s)`` with
   the array's work on another stream (an event recorded and waited on),
   against CuPy's ``ndarray.__dlpack__(stream=s)`` doing the same
   (goal: <= 1.0x).

    python benchmarks/bench_gpu.py [--json PATH] [--quick] [--simulator]

Prints a table; writes JSON to PATH (or $OUT/bench_gpu.json when $OUT is set).
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


def bandwidth(sizes, repeat):
    rt = runtime()
    d = rt.driver
    pushed = rt.enter(0)
    rows = []
    try:
        def sync():
            check(d.cuStreamSynchronize(1), "cuStreamSynchronize")

        for nbytes in sizes:
            host = np.ones(nbytes, dtype=np.uint8)
            dev_a = check(d.cuMemAlloc(nbytes), "cuMemAlloc")
            dev_b = check(d.cuMemAlloc(nbytes), "cuMemAlloc")
            host_out = np.empty(nbytes, dtype=np.uint8)
            raw = {
                "H2D": lambda: check(d.cuMemcpyAsync(dev_a, host.ctypes.data, nbytes, 1), "cuMemcpyAsync"),
                "D2H": lambda: check(d.cuMemcpyAsync(host_out.ctypes.data, dev_a, nbytes, 1), "cuMemcpyAsync"),
                "D2D": lambda: check(d.cuMemcpyAsync(dev_b, dev_a, nbytes, 1), "cuMemcpyAsync"),
            }
            src_host = dr.asarray(host)
            src_dev = src_host.to_device("cuda:0")
            ours = {
                "H2D": lambda: src_host.to_device("cuda:0"),
                "D2H": lambda: src_dev.to_device("cpu"),
                "D2D": lambda: src_dev.copy(),
            }
            for kind in ("H2D", "D2H", "D2D"):
                t_raw = _timeit(raw[kind], repeat, sync)
                t_ours = _timeit(ours[kind], repeat, sync)
                rows.append({"copy": kind, "bytes": nbytes,
                             "raw_GBps": nbytes / t_raw / 1e9, "to_device_GBps": nbytes / t_ours / 1e9,
                             "ratio": t_raw / t_ours})
            check(d.cuMemFree(dev_a), "cuMemFree")
            check(d.cuMemFree(dev_b), "cuMemFree")
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
    sizes = [1 << 20, 64 << 20, 256 << 20] if not args.quick else [1 << 20, 64 << 20]
    repeat = 5 if args.quick else 15
    results = {"driver": "simulator" if args.simulator else "real",
               "bandwidth": bandwidth(sizes, repeat), "exchange": exchange(repeat)}

    print(f"{'copy':5} {'bytes':>12} {'raw GB/s':>10} {'to_device GB/s':>15} {'ratio':>7}  goal >= 0.95")
    for r in results["bandwidth"]:
        flag = "ok" if r["ratio"] >= 0.95 else "BELOW"
        print(f"{r['copy']:5} {r['bytes']:12d} {r['raw_GBps']:10.2f} {r['to_device_GBps']:15.2f} "
              f"{r['ratio']:7.3f}  {flag}")
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
