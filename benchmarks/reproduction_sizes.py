"""The size of the reproduction ``check --explain`` prints for each rule,
as if every rule failed: with NumPy's adapter for the producer and consumer
rules, with dlpack-ref's for the CUDA rules (NumPy makes no CUDA arrays,
and a reproduction carries no adapter that makes none); lines by rule, and
by side their least, median and most.

    python benchmarks/reproduction_sizes.py

writes benchmarks/results/reproduction_sizes.json, from which
tools/docs_figures.py writes the sizes docs/conformance.md gives. The sizes
depend on the code alone (the rules, the helpers they call, the adapter),
not on the machine: rerun it after a change to any of them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import runinfo  # benchmarks/runinfo.py: this folder is first on sys.path

from dlpack_ref.conformance.reproduce import reproduction_lines

HERE = os.path.dirname(os.path.abspath(__file__))
#: The library whose adapter each side's reproductions are measured with.
LIBRARIES = {"producer": "numpy", "consumer": "numpy", "cuda": "dlpack_ref"}


def summary(lines: dict[str, dict[str, int]]) -> dict[str, dict]:
    """By side: the number of rules, and the least, median and most lines."""
    return {side: {"rules": len(by_rule), "min": min(by_rule.values()),
                   "median": statistics.median(by_rule.values()), "max": max(by_rule.values())}
            for side, by_rule in lines.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=os.path.join(HERE, "results", "reproduction_sizes.json"))
    args = p.parse_args(argv)
    began = runinfo.start()
    lines = {side: reproduction_lines(library)[side] for side, library in LIBRARIES.items()}
    result = {**runinfo.record(began, settings={"libraries": LIBRARIES, "adapter": "known"}, modules=["numpy"]),
              "libraries": LIBRARIES, "sides": summary(lines), "lines": lines}
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    for side, s in result["sides"].items():
        print(f"{side}: {s['rules']} rules, {s['min']} to {s['max']} lines (median {s['median']:g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
