"""Interleaved clock ratios of asarray's small calls and its 1 MiB copies
against NumPy's; callgrind_exchange.py counts the same
small calls in instructions, which load on the machine does not move.

    python benchmarks/bench_asarray.py [--rounds N]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import dlpack_ref as dr
from dlpack_ref.bench.timing import compare


def cases():
    """name -> (ours, numpy's, target ratio)."""
    kib = np.zeros(128)
    kib_array = dr.asarray(kib, copy=True)
    mib = np.random.default_rng(0).random(1 << 17)
    mib_array = dr.asarray(mib, copy=True)
    conv = np.zeros(10_000)
    return {
        "asarray(ndarray, copy=True) 1 KiB": (lambda: dr.asarray(kib, copy=True), lambda: np.array(kib, copy=True), 1.1),
        "asarray(Array, copy=True) 1 KiB": (lambda: dr.asarray(kib_array, copy=True), lambda: np.array(kib, copy=True), 1.1),
        "asarray(f64 1e4, dtype=float32)": (lambda: dr.asarray(conv, dtype="float32"), lambda: conv.astype(np.float32), 1.1),
        "asarray(3.0)": (lambda: dr.asarray(3.0), lambda: np.asarray(3.0), 1.1),
        "asarray(ndarray, copy=True) 1 MiB": (lambda: dr.asarray(mib, copy=True), lambda: np.array(mib, copy=True), 1.0),
        "asarray(Array, copy=True) 1 MiB": (lambda: dr.asarray(mib_array, copy=True), lambda: np.array(mib, copy=True), 1.0),
        "from_dlpack(ndarray, copy=True) 1 MiB": (lambda: dr.from_dlpack(mib, copy=True),
                                                 lambda: np.from_dlpack(mib, copy=True), 1.0),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=31)
    args = p.parse_args(argv)
    print(f"{'case':40s} {'dlpack_ref':>12s} {'numpy':>12s} {'ratio':>6s}  target")
    for name, (ours, theirs, target) in cases().items():
        best = compare({"ours": ours, "numpy": theirs}, rounds=args.rounds)
        a, b = best["ours"]["min_ns"], best["numpy"]["min_ns"]
        verdict = "pass" if a / b <= target else "miss"
        print(f"{name:40s} {a:10.0f}ns {b:10.0f}ns {a / b:6.2f}  <= {target} {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
