"""Interleaved timing: the compared calls alternate within every round, and
each call's minimum over the rounds is kept, so that load on a shared
machine falls on all of them alike and the ratios stay put.

    from interleave import compare
    best = compare({"ours": f, "numpy": g}, rounds=31)   # name -> stats
"""

from __future__ import annotations

import gc
import statistics
import time


def _calibrate(fn, budget_s: float) -> int:
    """Calls per sample so that one sample takes about budget_s."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= budget_s or number >= 1 << 22:
            return number
        number = max(number * 2, int(number * budget_s / max(elapsed, 1e-9)))


def compare(calls: dict, rounds: int = 31, budget_s: float = 0.01, quiet_s: float = 0.0) -> dict:
    """name -> {"min_ns", "median_ns", "number"}: per-call wall time of each
    callable, the calls of one round run back to back in rotating order.
    Wall time, not the process's CPU time: a call split over threads (the
    worker pool, PyTorch) would be charged the sum of its threads' time.

    quiet_s: a sleep before every sample, for calls that run on threads.
    A library's idle workers keep spinning for a while after its call
    (PyTorch's OpenMP workers for about 10 ms), and would otherwise take
    a core from the next library's sample: each sample then starts on a
    quiet machine, whatever ran before it."""
    numbers = {name: _calibrate(fn, budget_s) for name, fn in calls.items()}
    samples = {name: [] for name in calls}
    names = list(calls)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                fn, number = calls[name], numbers[name]
                if quiet_s:
                    time.sleep(quiet_s)
                t0 = time.perf_counter_ns()
                for _ in range(number):
                    fn()
                t1 = time.perf_counter_ns()
                samples[name].append((t1 - t0) / number)
    finally:
        if gc_was:
            gc.enable()
    return {name: {"min_ns": min(s), "median_ns": statistics.median(s), "number": numbers[name]}
            for name, s in samples.items()}
