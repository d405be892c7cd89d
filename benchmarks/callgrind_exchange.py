"""Instructions per call of each benchmarked exchange and short copy or
conversion call, counted by callgrind.

Wall-clock timings on a shared machine wander by tens of percent; the number
of instructions a call executes does not. Each case runs in a process of its
own under callgrind, counted as ``dlpack-ref bench --instructions`` counts
(``dlpack_ref.bench.callgrind``: N and 2N calls in a C loop, collected only
inside it, the loop's own cost subtracted).

    python benchmarks/callgrind_exchange.py [--loops N] [--only NAME ...] [--annotate NAME]

``--annotate NAME`` keeps the 2N profile of that case and prints
``callgrind_annotate`` of it (where the instructions go). The JSON carries the
run beside the counts (the command, the machine, the versions, the loops:
benchmarks/runinfo.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import runinfo  # benchmarks/runinfo.py: this folder is first on sys.path

from dlpack_ref.bench import callgrind

# name -> (setup, statement); setup runs once, the statement N times.
CASES = {
    "numpy.from_dlpack(numpy)": ("import numpy as np\nx = np.zeros(16, np.float32)", "np.from_dlpack(x)"),
    "dlpack_ref.from_dlpack(numpy)": ("import numpy as np, dlpack_ref\nx = np.zeros(16, np.float32)", "dlpack_ref.from_dlpack(x)"),
    "dlpack_ref.from_dlpack(dlpack_ref)": ("import numpy as np, dlpack_ref\na = dlpack_ref.zeros(16, dtype='float32')",
        "dlpack_ref.from_dlpack(a)"),
    "ndarray.__dlpack__()": ("import numpy as np\nx = np.zeros(16, np.float32)", "x.__dlpack__()"),
    "Array.__dlpack__()": ("import dlpack_ref\na = dlpack_ref.zeros(16, dtype='float32')", "a.__dlpack__()"),
    "numpy.from_dlpack(dlpack_ref)": ("import numpy as np, dlpack_ref\na = dlpack_ref.zeros(16, dtype='float32')",
        "np.from_dlpack(a)"),
    "dlpack_ref.from_dlpack(torch)": ("import torch, dlpack_ref\nt = torch.zeros(16)", "dlpack_ref.from_dlpack(t)"),
    "tvm_ffi.from_dlpack(torch)": ("import torch, tvm_ffi\nt = torch.zeros(16)", "tvm_ffi.from_dlpack(t)"),
    "torch.from_dlpack(torch)": ("import torch\nt = torch.zeros(16)", "torch.from_dlpack(t)"),
    # Short calls of copies and conversions.
    "dlpack_ref.asarray(3.0)": ("import dlpack_ref", "dlpack_ref.asarray(3.0)"),
    "numpy.asarray(3.0)": ("import numpy as np", "np.asarray(3.0)"),
    "dlpack_ref.asarray([1.0, 2.0, 3.0])": ("import dlpack_ref", "dlpack_ref.asarray([1.0, 2.0, 3.0])"),
    "dlpack_ref.asarray(100 floats)": ("import dlpack_ref\nv = [float(i) for i in range(100)]",
        "dlpack_ref.asarray(v)"),
    "float(Array[1, 2])": ("import dlpack_ref\na = dlpack_ref.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])", "float(a[1, 2])"),
    "float(ndarray[1, 2])": ("import numpy as np\nx = np.arange(6.0).reshape(2, 3)", "float(x[1, 2])"),
    "Array.to_device('cpu')": ("import dlpack_ref\na = dlpack_ref.zeros(16)", "a.to_device('cpu')"),
    "ndarray.to_device('cpu')": ("import numpy as np\nx = np.zeros(16)", "x.to_device('cpu')"),
    "dlpack_ref.from_dlpack(numpy, device='cpu')": ("import numpy as np, dlpack_ref\nx = np.zeros(16)",
        "dlpack_ref.from_dlpack(x, device='cpu')"),
    "numpy.from_dlpack(numpy, device='cpu')": ("import numpy as np\nx = np.zeros(16)", "np.from_dlpack(x, device='cpu')"),
    "Array.copy() 1 KiB": ("import dlpack_ref\na = dlpack_ref.zeros(128)", "a.copy()"),
    "ndarray.copy() 1 KiB": ("import numpy as np\nx = np.zeros(128)", "x.copy()"),
    "dlpack_ref.asarray(ndarray 1 KiB, copy=True)": ("import numpy as np, dlpack_ref\nx = np.zeros(128)",
        "dlpack_ref.asarray(x, copy=True)"),
    "dlpack_ref.asarray(Array 1 KiB, copy=True)": ("import dlpack_ref\na = dlpack_ref.zeros(128)",
        "dlpack_ref.asarray(a, copy=True)"),
    "numpy.array(ndarray 1 KiB, copy=True)": ("import numpy as np\nx = np.zeros(128)", "np.array(x, copy=True)"),
    # No target: NumPy hands back its own input, dlpack_ref imports it.
    "dlpack_ref.asarray(ndarray)": ("import numpy as np, dlpack_ref\nx = np.zeros(128)", "dlpack_ref.asarray(x)"),
    "dlpack_ref.asarray(Array)": ("import dlpack_ref\na = dlpack_ref.zeros(128)", "dlpack_ref.asarray(a)"),
    "numpy.asarray(ndarray)": ("import numpy as np\nx = np.zeros(128)", "np.asarray(x)"),
    "dlpack_ref.asarray(float64 1e4, dtype=float32)": ("import numpy as np, dlpack_ref\nx = np.zeros(10000)",
        "dlpack_ref.asarray(x, dtype='float32')"),
    "dlpack_ref.asarray(float64 1e4, dtype=dlpack_ref.float32)": (
        "import numpy as np, dlpack_ref\nx = np.zeros(10000)\nf = dlpack_ref.float32",
        "dlpack_ref.asarray(x, dtype=f)"),
    "ndarray.astype(float32) 1e4": ("import numpy as np\nx = np.zeros(10000)", "x.astype(np.float32)"),
    "dlpack_ref.from_dlpack(ndarray 1 KiB, copy=True)": ("import numpy as np, dlpack_ref\nx = np.zeros(128)",
        "dlpack_ref.from_dlpack(x, copy=True)"),
    "numpy.from_dlpack(ndarray 1 KiB, copy=True)": ("import numpy as np\nx = np.zeros(128)",
        "np.from_dlpack(x, copy=True)"),
    "dlpack_ref.from_dlpack(torch) ndim 64": ("import torch, dlpack_ref\nt = torch.zeros((1,) * 64)", "dlpack_ref.from_dlpack(t)"),
    "tvm_ffi.from_dlpack(torch) ndim 64": ("import torch, tvm_ffi\nt = torch.zeros((1,) * 64)", "tvm_ffi.from_dlpack(t)"),
}

# Modules whose versions the counts depend on (callgrind_adopter.py sets its own).
MODULES = ["numpy", "torch", "tvm_ffi"]
# Versions of what is not a module (callgrind_adopter.py adds the compilers).
EXTRA_VERSIONS: dict = {}

# The targets: (case, reference case, most allowed ratio).
TARGETS = [
    ("dlpack_ref.from_dlpack(numpy)", "numpy.from_dlpack(numpy)", 1.0),
    ("dlpack_ref.from_dlpack(dlpack_ref)", "numpy.from_dlpack(numpy)", 0.6),
    ("Array.__dlpack__()", "ndarray.__dlpack__()", 1.0),
    ("numpy.from_dlpack(dlpack_ref)", "numpy.from_dlpack(numpy)", 1.1),
    ("dlpack_ref.from_dlpack(torch)", "tvm_ffi.from_dlpack(torch)", 1.0),
    ("dlpack_ref.from_dlpack(torch)", "torch.from_dlpack(torch)", 0.1),
    ("dlpack_ref.asarray(3.0)", "numpy.asarray(3.0)", 1.1),
    ("float(Array[1, 2])", "float(ndarray[1, 2])", 3.0),
    ("Array.to_device('cpu')", "ndarray.to_device('cpu')", 3.0),
    ("dlpack_ref.from_dlpack(numpy, device='cpu')", "numpy.from_dlpack(numpy, device='cpu')", 3.0),
    ("Array.copy() 1 KiB", "ndarray.copy() 1 KiB", 1.1),
    ("dlpack_ref.from_dlpack(torch) ndim 64", "tvm_ffi.from_dlpack(torch) ndim 64", 1.0),
    # asarray's dispatch.
    ("dlpack_ref.asarray(ndarray 1 KiB, copy=True)", "numpy.array(ndarray 1 KiB, copy=True)", 1.1),
    ("dlpack_ref.asarray(Array 1 KiB, copy=True)", "numpy.array(ndarray 1 KiB, copy=True)", 1.1),
    ("dlpack_ref.asarray(float64 1e4, dtype=float32)", "ndarray.astype(float32) 1e4", 1.1),
    ("dlpack_ref.asarray(float64 1e4, dtype=dlpack_ref.float32)", "ndarray.astype(float32) 1e4", 1.1),
    ("dlpack_ref.from_dlpack(ndarray 1 KiB, copy=True)", "numpy.from_dlpack(ndarray 1 KiB, copy=True)", 1.1),
]


def measure(name: str, loops: int, keep: str | None = None) -> tuple[float, float]:
    """Instructions per call of one case (in a child of its own, under
    callgrind), and the loop's own cost that was subtracted."""
    setup, stmt = CASES[name]
    counts, loop_cost = callgrind.count("dlpack_ref.bench.callgrind:source_calls", [setup, {name: stmt}], loops,
                                        keep={name: keep} if keep else None)
    return counts[name], loop_cost


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loops", type=int, default=2000)
    p.add_argument("--only", nargs="*", help="case names (default: all)")
    p.add_argument("--annotate", help="print callgrind_annotate of this case")
    p.add_argument("--json", default=None,
                   help="where to write the counts (default: results/callgrind.json, for a run of every case)")
    args = p.parse_args(argv)
    why = callgrind.missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    names = args.only or list(CASES)
    began = runinfo.start()
    results, loop_cost = {}, None
    # The kept profile's path, set apart from the loop's per-case `keep`
    # (None for every case but the annotated one, whatever its position).
    annotated = os.path.join(tempfile.gettempdir(), "callgrind.annotate.out") if args.annotate else None
    if annotated is not None and os.path.exists(annotated):
        os.remove(annotated)   # a previous run's profile is not this one's
    for name in names:
        keep = annotated if name == args.annotate else None
        try:
            results[name], loop_cost = measure(name, args.loops, keep)
        except RuntimeError as exc:
            print(f"{name:38s} skipped ({exc})")
            continue
        print(f"{name:38s} {results[name]:10.0f} instructions/call", flush=True)
    if loop_cost is not None:
        print(f"{'(loop overhead, subtracted)':38s} {loop_cost:10.0f} instructions/call")
    print()
    for case, ref, limit in TARGETS:
        if case in results and ref in results:
            ratio = results[case] / results[ref]
            verdict = "pass" if ratio <= limit else "FAIL"
            print(f"{case:38s} / {ref:28s} = {ratio:5.2f} (target <= {limit}) {verdict}")
    if args.json is None and not args.only:
        args.json = os.path.join(os.path.dirname(__file__), "results", "callgrind.json")
    if args.json is not None:   # a partial run (--only) writes only where it is told to
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            run = runinfo.record(began, modules=MODULES, extra_versions=EXTRA_VERSIONS,
                                 settings={"loops": args.loops, "cases": names})
            json.dump({**run, "loops": args.loops, "loop_overhead": loop_cost, "instructions_per_call": results},
                      f, indent=2)
    if annotated is not None and os.path.exists(annotated):
        subprocess.run(["callgrind_annotate", "--inclusive=yes", annotated], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
