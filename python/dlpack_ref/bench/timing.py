"""Interleaved wall-clock timing: the compared calls alternate within every
round, in rotating order, and each keeps its minimum and median over the
rounds, so that load on a shared machine falls on all of them alike and the
ratios stay put.

    from dlpack_ref.bench.timing import compare
    best = compare({"ours": f, "numpy": g}, rounds=31)   # name -> stats
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Callable


def calibrate(fn: Callable[[], object], budget_s: float) -> int:
    """Calls of ``fn`` per sample so that one sample takes about ``budget_s``.

    Parameters
    ----------
    fn : callable
        Called with no argument.
    budget_s : float
        Seconds one sample should take.

    Returns
    -------
    int
        At least 1, at most 2**22.
    """
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= budget_s or number >= 1 << 22:
            return number
        number = max(number * 2, int(number * budget_s / max(elapsed, 1e-9)))


def compare(calls: dict[str, Callable[[], object]], rounds: int = 31, budget_s: float = 0.01,
            quiet_s: float = 0.0, on_round: Callable[[int], None] | None = None) -> dict[str, dict]:
    """Per-call wall time of each callable, the calls of one round run back
    to back in rotating order.

    Wall time, not the process's CPU time: a call split over threads (the
    worker pool, PyTorch) would be charged the sum of its threads' time.
    The cycle collector is off while the rounds run.

    Parameters
    ----------
    calls : dict of str to callable
        Name -> a callable of no argument.
    rounds : int
        Samples per call.
    budget_s : float
        Seconds one sample takes (its number of calls is calibrated once).
    quiet_s : float
        A sleep before every sample, for calls that run on threads. A
        library's idle workers keep spinning for a while after its call
        (PyTorch's OpenMP workers for about 10 ms), and would otherwise take
        a core from the next library's sample: each sample then starts on a
        quiet machine, whatever ran before it.
    on_round : callable, optional
        Called with the number of rounds done after each round (progress).

    Returns
    -------
    dict of str to dict
        Name -> ``{"min_ns", "median_ns", "number"}``: the least and the
        median per-call time over the samples, and the calls per sample.
    """
    if not calls:
        return {}
    numbers = {name: calibrate(fn, budget_s) for name, fn in calls.items()}
    samples: dict[str, list[float]] = {name: [] for name in calls}
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
            if on_round is not None:
                on_round(r + 1)
    finally:
        if gc_was:
            gc.enable()
    return {name: {"min_ns": min(s), "median_ns": statistics.median(s), "number": numbers[name]}
            for name, s in samples.items()}
