"""What dlpack-ref's pytest plugin costs every pytest start in an
environment where dlpack-ref is installed: ``pytest --collect-only`` of a
one-test project with the plugin (its entry point, ``_dlpack_ref_pytest``),
without it (``-p no:dlpack_ref``), and with ``dlpack_ref.conformance``
imported at start (what an entry point inside the package would cost),
interleaved round by round in a shuffled order, as medians, the median of
the paired differences and ratios. The budget: the plugin within 5 ms of
no plugin. Beside the clock, which a loaded machine moves by more than the
budget, two figures load moves less: the time the entry module's import
takes in an interpreter that has imported pytest, and the modules it adds
there (beside the same for ``dlpack_ref.conformance``).

    python benchmarks/bench_pytest_plugin.py [--rounds N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import runinfo

BUDGET_MS = 5.0
ARMS = {
    "without the plugin (-p no:dlpack_ref)": ["-p", "no:dlpack_ref"],
    "with the plugin": [],
    "with dlpack_ref.conformance imported at start": ["-p", "dlpack_ref.conformance"],
}


def _start_ms(project: str, extra: list[str]) -> float:
    command = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *extra]
    began = time.perf_counter()
    subprocess.run(command, cwd=project, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)
    return (time.perf_counter() - began) * 1e3


_IMPORT = """
import sys, time, pytest
before = set(sys.modules)
began = time.perf_counter()
import {module}
print((time.perf_counter() - began) * 1e6, len(set(sys.modules) - before - {{"{module}"}}))
"""


def import_cost(module: str) -> tuple[float, int]:
    """(µs, modules added) of importing ``module`` in an interpreter that
    has imported pytest, as a pytest start does when it loads the plugin."""
    done = subprocess.run([sys.executable, "-c", _IMPORT.format(module=module)], capture_output=True, text=True,
                          check=True, timeout=120)
    us, added = done.stdout.split()
    return float(us), int(added)


def measure(rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    order = list(ARMS)
    with tempfile.TemporaryDirectory() as project:
        with open(os.path.join(project, "test_one.py"), "w") as f:
            f.write("def test_one():\n    pass\n")
        for arm in ARMS:   # warm the file cache once, not timed
            _start_ms(project, ARMS[arm])
        for _ in range(rounds):
            random.shuffle(order)
            for arm in order:
                times[arm].append(_start_ms(project, ARMS[arm]))
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE (benchmarks/results/...)")
    args = p.parse_args(argv)
    began = runinfo.start()
    times = measure(args.rounds)
    base_arm, plugin_arm, eager_arm = ARMS
    base = times[base_arm]
    rows = {}
    print(f"{'pytest --collect-only, one test':48s} {'median':>9s} {'paired diff':>12s} {'ratio':>6s}")
    for arm, ts in times.items():
        diff = statistics.median(t - b for t, b in zip(ts, base))
        ratio = statistics.median(ts) / statistics.median(base)
        rows[arm] = {"median_ms": statistics.median(ts), "min_ms": min(ts), "paired_diff_ms": diff, "ratio": ratio}
        print(f"{arm:48s} {rows[arm]['median_ms']:7.1f}ms {diff:+10.1f}ms {ratio:6.3f}")
    cost = rows[plugin_arm]["paired_diff_ms"]
    verdict = "within" if cost <= BUDGET_MS else "over"
    print(f"the plugin costs {cost:+.1f} ms a start: {verdict} the {BUDGET_MS:.0f} ms budget")
    imports = {}
    for module in ("_dlpack_ref_pytest", "dlpack_ref.conformance"):
        costs = [import_cost(module) for _ in range(5)]
        imports[module] = {"import_us": statistics.median(c[0] for c in costs), "modules_added": costs[0][1]}
        print(f"import {module} after pytest: {imports[module]['import_us']:.0f} µs (median of 5), "
              f"{imports[module]['modules_added']} modules added")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**runinfo.record(began, settings={"rounds": args.rounds}, modules=["pytest"]),
                       "budget_ms": BUDGET_MS, "arms": rows, "imports": imports}, f, indent=1)
            f.write("\n")
    return 0 if cost <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
