"""The cost of a real producer moved onto dlpack_ref.h: numkong as released
against numkong adopted (adoption/numkong/run.sh builds both), on the calls
a consumer makes of a small tensor (16 float32): ``__dlpack__()``,
``__dlpack__(max_version=(1, 3))``, ``__dlpack_device__()``, and the whole
import by ``numpy.from_dlpack`` and ``dlpack_ref.from_dlpack``, with
NumPy's own ndarray beside them.

    python benchmarks/adoption_producer.py [--work DIR] [--rounds N] [--loops N] [--json PATH]

Both builds are loaded into this one process (numkong's extension module,
each from its own venv's site-packages, under its own name), so the clock
is interleaved within every round (dlpack_ref.bench.timing.compare: the
calls alternate and each keeps its minimum). The instructions per call are
callgrind's, each case in a child of its own (dlpack_ref.bench.callgrind,
as benchmarks/callgrind_exchange.py counts). The target: adopted over
released <= 1.0 for every call. The result, with the run that made it
(benchmarks/runinfo.py), goes to benchmarks/results/adoption_producer.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import runinfo  # benchmarks/runinfo.py: this folder is first on sys.path

from dlpack_ref.bench import callgrind
from dlpack_ref.bench.timing import compare

HERE = os.path.dirname(os.path.abspath(__file__))
BUILDS = ("released", "adopted")

# Loads numkong's extension from a venv under the name numkong_<build>: the
# module is one C extension (numkong/_numkong*.so) whose init needs no
# package around it.
LOADER = """
import glob, importlib.machinery, importlib.util, sys
def load_numkong(venv, build):
    so = glob.glob(venv + '/lib/python*/site-packages/numkong/_numkong*.so')[0]
    loader = importlib.machinery.ExtensionFileLoader('numkong._numkong', so)
    spec = importlib.util.spec_from_file_location('numkong._numkong', so, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules.pop('numkong._numkong', None)
    return module
"""

# name -> statement; `t_<build>` is that build's tensor, `x` NumPy's.
CALLS = {
    "__dlpack__()": "{t}.__dlpack__()",
    "__dlpack__(max_version)": "{t}.__dlpack__(max_version=(1, 3))",
    "__dlpack_device__()": "{t}.__dlpack_device__()",
    "numpy.from_dlpack": "np.from_dlpack({t})",
    "dlpack_ref.from_dlpack": "dlpack_ref.from_dlpack({t})",
}


def setup_code(work: str) -> str:
    lines = [LOADER, "import numpy as np, dlpack_ref", "x = np.zeros(16, np.float32)"]
    for build in BUILDS:
        lines.append(f"nk_{build} = load_numkong({os.path.join(work, 'venv-' + build)!r}, {build!r})")
        lines.append(f"t_{build} = nk_{build}.zeros((16,), dtype='float32')")
    return "\n".join(lines)


def statements() -> dict[str, str]:
    out = {}
    for call, stmt in CALLS.items():
        for build in BUILDS:
            out[f"numkong {build} {call}"] = stmt.format(t=f"t_{build}")
        out[f"ndarray {call}"] = stmt.format(t="x")
    return out


def clock(setup: str, rounds: int) -> dict[str, dict]:
    namespace: dict = {}
    exec(setup, namespace)
    calls = {name: eval(f"lambda: {stmt}", namespace) for name, stmt in statements().items()}
    return compare(calls, rounds=rounds)


def instructions(setup: str, loops: int) -> dict[str, float]:
    counts, _ = callgrind.count("dlpack_ref.bench.callgrind:source_calls", [setup, statements()], loops)
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default=os.path.join(os.path.dirname(HERE), ".adoption-work", "numkong"),
                   help="adoption/numkong/run.sh's folder (its venvs venv-released/ and venv-adopted/)")
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--loops", type=int, default=2000)
    p.add_argument("--no-callgrind", action="store_true")
    p.add_argument("--json", default=os.path.join(HERE, "results", "adoption_producer.json"))
    args = p.parse_args(argv)
    for build in BUILDS:
        if not glob.glob(os.path.join(args.work, "venv-" + build, "lib", "python*", "site-packages", "numkong")):
            print(f"no numkong {build} build in {args.work}: run adoption/run.sh numkong first", file=sys.stderr)
            return 2
    setup = setup_code(args.work)
    began = runinfo.start()
    best = clock(setup, args.rounds)
    counts = {} if args.no_callgrind or callgrind.missing() else instructions(setup, args.loops)
    rows = []
    print(f"{'call':26s} {'released ns':>11s} {'adopted ns':>10s} {'ratio':>6s} {'ndarray ns':>10s}"
          f" {'released instr':>14s} {'adopted instr':>13s} {'ratio':>6s} {'ndarray instr':>13s}")
    for call in CALLS:
        r, a, n = (f"numkong released {call}", f"numkong adopted {call}", f"ndarray {call}")
        row = {"call": call,
               "ns": {"released": best[r]["min_ns"], "adopted": best[a]["min_ns"], "ndarray": best[n]["min_ns"]},
               "clock_ratio": best[a]["min_ns"] / best[r]["min_ns"]}
        if counts:
            row["instructions"] = {"released": counts[r], "adopted": counts[a], "ndarray": counts[n]}
            row["instruction_ratio"] = counts[a] / counts[r]
        rows.append(row)
        line = (f"{call:26s} {row['ns']['released']:11.0f} {row['ns']['adopted']:10.0f} {row['clock_ratio']:6.2f}"
                f" {row['ns']['ndarray']:10.0f}")
        if counts:
            line += (f" {counts[r]:14.0f} {counts[a]:13.0f} {row['instruction_ratio']:6.2f} {counts[n]:13.0f}")
        print(line)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        run = runinfo.record(began, modules=["numpy"], extra_versions={"numkong": "7.8.6 (released and adopted)"},
                             settings={"rounds": args.rounds, "loops": args.loops, "size": "16 float32",
                                       "interleaved": "both builds loaded in one process"})
        json.dump({**run, "rows": rows}, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
