"""Copies and dtype conversions side by side with NumPy, torch and ml_dtypes,
in one process, the compared calls interleaved (dlpack_ref.bench.timing).

    python benchmarks/bench_copies.py [--quick] [--big] [--only TEXT] [--json PATH] [--png PATH]
    python benchmarks/bench_copies.py --instructions-only   # the counts alone

Prints every case with its best reference (NumPy, PyTorch at its default
threads, ml_dtypes; ``from_dlpack(ndarray, copy=True)`` beside NumPy's
``x.copy()`` and PyTorch's ``t.clone()``), the measured ratio and its target (copies and
conversions of NumPy data: 1.0 from 1 MiB on, 1.1 below; ``from_dlpack(x, copy=True)``
against ``numpy.from_dlpack(x, copy=True)`` and ``x.copy()``: own_copy_cases), the same case
with dlpack_ref on one thread against NumPy beside it, the peak memory of conversions (VmHWM of
this process, reset before each), and saves benchmarks/results/copies.json
(with the command, the machine, the load average at the start and the end,
the settings and the versions: benchmarks/runinfo.py; tools/docs_figures.py
renders it into docs/benchmarks.md) and a chart benchmarks/results/copies.png
(drawn by this run, or removed when matplotlib is missing: a chart never
shows another run's numbers). ``--big`` adds the 1 GiB copies
(about 4 GiB of memory). The 1 KiB copies of host memory at the cost of
x's own (OWN_COPY_1KIB) are also counted in instructions per call, the
figure the load does not move (callgrind, where valgrind is installed), and
saved to benchmarks/results/copies_instructions.json (``--no-instructions``
leaves that out; ``--instructions-only`` counts without timing). Instruction counts of the other short calls:
benchmarks/callgrind_exchange.py.
"""

from __future__ import annotations

import argparse
import array
import gc
import json
import os
import sys

import numpy as np
import runinfo  # benchmarks/runinfo.py: this folder is first on sys.path

import dlpack_ref as dr
from dlpack_ref.bench.chart import pyplot_or_remove
from dlpack_ref.bench.timing import compare

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch
except ImportError:  # the torch references are left out
    torch = None
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def copy_cases(big: bool) -> list:
    """(group, case, ours, {reference name: call}, target ratio)."""
    cases = []
    for size in [KIB, MIB, 64 * MIB] + ([GIB] if big else []):
        n = np.ones(size // 8)
        a = dr.from_dlpack(n)
        t = torch.from_numpy(n) if torch is not None else None
        with_torch = (lambda refs, call: {**refs, "torch": call} if torch is not None else refs)
        label = f"{size // MIB} MiB" if size >= MIB else "1 KiB"
        cases.append(("contiguous copy", f"Array.copy() {label}", a.copy,
                      with_torch({"numpy": n.copy}, lambda t=t: t.clone()), size_target(size)))
        cases.append(("contiguous copy", f"asarray(ndarray, copy=True) {label}",
                      lambda n=n: dr.asarray(n, copy=True),
                      with_torch({"numpy": lambda n=n: np.array(n, copy=True)},
                                 lambda n=n: torch.tensor(n)), size_target(size)))
        cases.append(("contiguous copy", f"numpy.from_dlpack(Array, copy=True) {label}",
                      lambda a=a: np.from_dlpack(a, copy=True), {"numpy": lambda n=n: np.from_dlpack(n, copy=True)},
                      size_target(size)))
        # The consumer's copy=True of another library's CPU array: asked for
        # in place and copied by dlpack_ref on its pool, against the copies
        # users would make instead.
        cases.append(("contiguous copy", f"from_dlpack(ndarray, copy=True) {label}",
                      lambda n=n: dr.from_dlpack(n, copy=True),
                      with_torch({"numpy": n.copy}, lambda t=t: t.clone()), size_target(size)))
        cases += own_copy_cases(size, n)
    n2 = np.ones((2048, 2048), np.float32)
    a2 = dr.from_dlpack(n2)
    t2 = torch.from_numpy(n2) if torch is not None else None
    strided = {
        "a.T.copy() 2048x2048 float32": (lambda: a2.T.copy(), lambda: n2.T.copy(), lambda: t2.T.contiguous()),
        "a[::-1].copy()": (lambda: a2[::-1].copy(), lambda: n2[::-1].copy(), lambda: t2.flip(0)),
        "a[::2].copy()": (lambda: a2[::2].copy(), lambda: n2[::2].copy(), lambda: t2[::2].contiguous()),
        "a[:, ::2].copy()": (lambda: a2[:, ::2].copy(), lambda: n2[:, ::2].copy(), lambda: t2[:, ::2].contiguous()),
        "a[:, ::-1].copy()": (lambda: a2[:, ::-1].copy(), lambda: n2[:, ::-1].copy(), lambda: t2.flip(1)),
    }
    for name, (ours, nref, tref) in strided.items():
        refs = {"numpy": nref}
        if torch is not None:
            refs["torch"] = tref
        cases.append(("strided copy", name, ours, refs, size_target(n2.nbytes)))
    return cases


# The 1 KiB copies of host memory at the cost of x's own copy, as source:
# timed here on the same statements that callgrind counts in a child of its
# own (count_instructions). (case, ours, reference name, reference, target)
OWN_COPY_SETUP = "import numpy as np, dlpack_ref as dr\nn = np.ones(128)\nown = dr.from_dlpack(n).copy()"
OWN_COPY_1KIB = [
    ("from_dlpack(ndarray, copy=True) 1 KiB vs numpy.from_dlpack", "dr.from_dlpack(n, copy=True)",
     "numpy", "np.from_dlpack(n, copy=True)", 1.1),
    ("from_dlpack(ndarray, copy=True) 1 KiB vs ndarray.copy()", "dr.from_dlpack(n, copy=True)",
     "numpy", "n.copy()", 1.5),
    ("from_dlpack(Array, copy=True) 1 KiB vs numpy.from_dlpack", "dr.from_dlpack(own, copy=True)",
     "numpy", "np.from_dlpack(own, copy=True)", 1.1),
    ("from_dlpack(Array, copy=True) 1 KiB vs Array.copy()", "dr.from_dlpack(own, copy=True)",
     "Array.copy()", "own.copy()", 1.5),
]


def own_copy_cases(size: int, n) -> list:
    """from_dlpack(x, copy=True) of host memory at the cost of x's own copy:
    at 1 KiB, x a NumPy array or a dlpack_ref Array (its own memory), within
    1.1x of NumPy's from_dlpack(x, copy=True) and 1.5x of x.copy(); at 64 MiB,
    from a NumPy array within 1.05x of the same copy from an Array."""
    own = dr.from_dlpack(n).copy()
    if size == KIB:
        names = {"np": np, "dr": dr, "n": n, "own": own}
        call = (lambda source: eval(f"lambda: {source}", names))   # noqa: S307 - this file's own statements
        return [("contiguous copy", case, call(ours), {ref_name: call(ref)}, limit)
                for case, ours, ref_name, ref, limit in OWN_COPY_1KIB]
    if size == 64 * MIB:
        return [("contiguous copy", "from_dlpack(ndarray, copy=True) 64 MiB vs from an Array",
                 lambda: dr.from_dlpack(n, copy=True), {"from_dlpack(Array)": lambda: dr.from_dlpack(own, copy=True)},
                 1.05)]
    return []


def count_instructions() -> list:
    """Instructions per call of the 1 KiB own-copy cases and their
    references (dlpack_ref.bench.callgrind: one child under callgrind, N and
    2N calls, the loop's own cost subtracted): a row a case, with the ratio
    and its target; empty, said, where valgrind cannot count."""
    from dlpack_ref.bench import callgrind
    why = callgrind.missing()
    if why:
        print(f"  instructions not counted: {why}")
        return []
    statements = sorted({s for _, ours, _, ref, _ in OWN_COPY_1KIB for s in (ours, ref)})
    counts, _ = callgrind.count("dlpack_ref.bench.callgrind:source_calls",
                                [OWN_COPY_SETUP, {s: s for s in statements}], INSTRUCTION_LOOPS)
    rows = []
    for case, ours, ref_name, ref, limit in OWN_COPY_1KIB:
        ratio = counts[ours] / counts[ref]
        rows.append({"case": case, "limit": limit, "reference": ref_name, "ratio": ratio, "pass": ratio <= limit,
                     "instructions": {"dlpack_ref": counts[ours], ref_name: counts[ref]},
                     "statements": {"dlpack_ref": ours, ref_name: ref}})
        print(f"  {case:58s} {counts[ours]:7.0f}  {ref_name:12s} {counts[ref]:7.0f}  "
              f"ratio {ratio:5.2f} (target <= {limit}) {'pass' if ratio <= limit else 'FAIL'}", flush=True)
    return rows


def save_instructions(path: str) -> None:
    """Count the 1 KiB own-copy cases and save them to `path` with their run
    (benchmarks/runinfo.py; the load does not move the counts)."""
    began = runinfo.start()
    print(f"instructions per call (callgrind, {INSTRUCTION_LOOPS} and {2 * INSTRUCTION_LOOPS} calls)")
    rows = count_instructions()
    if not rows:
        return
    run = runinfo.record(began, modules=["numpy"], settings={"loops": INSTRUCTION_LOOPS, "setup": OWN_COPY_SETUP})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({**run, "rows": rows}, f, indent=2)
    print(f"saved {path}")


def conversion_cases() -> list:
    f64 = np.random.default_rng(0).standard_normal(10 ** 6)
    f32 = f64.astype(np.float32)
    buf = array.array("d", f64.tolist())
    lst6 = f64.tolist()
    lst5 = lst6[:10 ** 5]
    i64 = (f64 * 1000).astype(np.int64)

    def refs(numpy_call, torch_call=None):
        """NumPy's call, and PyTorch's on the same memory where it has one."""
        return {"numpy": numpy_call, **({"torch": torch_call} if torch is not None and torch_call else {})}
    tf64, tf32, ti64 = ((torch.from_numpy(x) for x in (f64, f32, i64)) if torch is not None else (None,) * 3)
    cases = [
        ("conversion", "asarray(ndarray f64 1e6, dtype=float32)", lambda: dr.asarray(f64, dtype="float32"),
         refs(lambda: f64.astype(np.float32), lambda: tf64.to(torch.float32)), size_target(f64.nbytes)),
        ("conversion", "asarray(array.array('d') 1e6, dtype=float32)", lambda: dr.asarray(buf, dtype="float32"),
         refs(lambda: np.asarray(buf, dtype=np.float32)), size_target(f64.nbytes)),
        ("conversion", "asarray(ndarray f32 1e6, dtype=float16)", lambda: dr.asarray(f32, dtype="float16"),
         refs(lambda: f32.astype(np.float16), lambda: tf32.to(torch.float16)), size_target(f32.nbytes)),
        ("conversion", "asarray(ndarray i64 1e6, dtype=float64)", lambda: dr.asarray(i64, dtype="float64"),
         refs(lambda: i64.astype(np.float64), lambda: ti64.to(torch.float64)), size_target(i64.nbytes)),
        ("conversion from lists", "asarray(list of float 1e6, dtype=float32)", lambda: dr.asarray(lst6, dtype="float32"),
         {"numpy": lambda: np.array(lst6, dtype=np.float32)}, 2.0),
        ("conversion from lists", "asarray(list of float 1e6)", lambda: dr.asarray(lst6),
         {"numpy": lambda: np.array(lst6)}, 2.0),
    ]
    if ml_dtypes is not None:
        for name in ["float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float4_e2m1fn", "bfloat16", "float8_e8m0fnu"]:
            t = getattr(ml_dtypes, name)
            cases.append(("minifloat encoding", f"asarray(ndarray f32 1e6, dtype={name})",
                          lambda name=name: dr.asarray(f32, dtype=name), {"ml_dtypes": lambda t=t: f32.astype(t)}, 2.0))
        for name in ["float8_e4m3fn", "float6_e2m3fn", "float4_e2m1fn"]:
            t = getattr(ml_dtypes, name)
            cases.append(("minifloat encoding", f"asarray(list 1e5, dtype={name})",
                          lambda name=name: dr.asarray(lst5, dtype=name), {"ml_dtypes": lambda t=t: np.array(lst5, dtype=t)}, 2.0))
    return cases


def small_cases() -> list:
    n = np.arange(12.0).reshape(3, 4)
    a = dr.asarray(n)
    cases = [
        ("small call", "asarray(3.0)", lambda: dr.asarray(3.0), {"numpy": lambda: np.asarray(3.0)}, 3.0),
        ("small call", "float(a[1, 2])", lambda: float(a[1, 2]), {"numpy": lambda: float(n[1, 2])}, 3.0),
        ("small call", 'to_device("cpu")', lambda: a.to_device("cpu"), {"numpy": lambda: n.to_device("cpu")}, 3.0),
        ("small call", 'from_dlpack(Array, device="cpu")', lambda: dr.from_dlpack(a, device="cpu"),
         {"numpy": lambda: np.from_dlpack(n, device="cpu")}, 3.0),
        ("small call", 'from_dlpack(ndarray, device="cpu")', lambda: dr.from_dlpack(n, device="cpu"),
         {"numpy": lambda: np.from_dlpack(n, device="cpu")}, 3.0),
    ]
    return cases


def size_target(nbytes: int) -> float:
    """The target of a copy or conversion from NumPy or PyTorch data: 1.0
    from 1 MiB of input on, 1.1 below."""
    return 1.0 if nbytes >= MIB else 1.1


# N of the instruction counts: each counted call runs N and 2N times.
INSTRUCTION_LOOPS = 2000

# PyTorch's OpenMP workers spin for about 10 ms after each call (libgomp's
# default wait policy), so a sample started sooner would share a core with them.
QUIET_S = 0.02


def measure(cases, rounds: int) -> list:
    """Each case interleaved with its references at every library's default
    threads (dlpack_ref: get_num_threads(); PyTorch: its own), then again
    with dlpack_ref on one thread against the first reference (NumPy or
    ml_dtypes, single-threaded both): the figure that says what the pool
    adds and what the kernels do alone."""
    rows = []
    threads = dr.get_num_threads()
    for group, case, ours, refs, limit in cases:
        gc.collect()
        budget = 0.002 if "GiB" in case or "64 MiB" in case else 0.01
        # Threaded calls start each sample on a quiet machine (timing.compare, quiet_s).
        quiet = QUIET_S if group != "small call" else 0.0
        stats = compare({"dlpack_ref": ours, **refs}, rounds=rounds, budget_s=budget, quiet_s=quiet)
        first_ref = next(iter(refs))
        dr.set_num_threads(1)
        try:
            single = compare({"dlpack_ref": ours, first_ref: refs[first_ref]}, rounds=rounds, budget_s=budget,
                             quiet_s=quiet)
        finally:
            dr.set_num_threads(threads)
        best_ref = min(refs, key=lambda r: stats[r]["min_ns"])
        ratio = stats["dlpack_ref"]["min_ns"] / stats[best_ref]["min_ns"]
        ratio_1 = single["dlpack_ref"]["min_ns"] / single[first_ref]["min_ns"]
        rows.append({"group": group, "case": case, "limit": limit, "reference": best_ref, "ratio": ratio,
                     "pass": ratio <= limit, "ns": {k: v["min_ns"] for k, v in stats.items()},
                     "one_thread": {"reference": first_ref, "ratio": ratio_1,
                                    "ns": {k: v["min_ns"] for k, v in single.items()}}})
        print(f"  {case:48s} {stats['dlpack_ref']['min_ns']:12.0f} ns  {best_ref:9s} "
              f"{stats[best_ref]['min_ns']:12.0f} ns  ratio {ratio:5.2f} (target <= {limit}) "
              f"{'pass' if ratio <= limit else 'FAIL'}  | 1 thread vs {first_ref}: {ratio_1:5.2f}", flush=True)
    return rows


# Run in a fresh process per case, so that no freed heap of this one is
# reused (which would hide the output's pages), with the peak RSS reset
# through /proc/self/clear_refs once the input exists.
_MEMORY_CHILD = """
import json, sys
import numpy as np, dlpack_ref as dr
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
x = {make}
x[...] = 1
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
y = {convert}
print(json.dumps({{"extra": status("VmHWM") - before, "input": getattr(x, "nbytes", 0)}}))
"""


def peak_memory() -> list:
    """Peak resident memory of a conversion over input + output."""
    import subprocess
    rows = []
    cases = [
        ("asarray(16 MiB uint8, dtype=int8)", "np.empty(16 << 20, np.uint8)", "dr.asarray(x, dtype='int8')", 16),
        ("asarray(64 MiB float64, dtype=float32)", "np.empty(8 << 20)", "dr.asarray(x, dtype='float32')", 32),
        ("asarray(64 MiB float32, dtype=float8_e4m3fn)", "np.empty(16 << 20, np.float32)",
         "dr.asarray(x, dtype='float8_e4m3fn')", 16),
        ("asarray(list 1e6 floats, dtype=float32)", "np.empty(0); x = [0.5] * 10 ** 6",
         "dr.asarray(x, dtype='float32')", 4 * 10 ** 6 / MIB),
        ("Array.copy() 64 MiB", "np.empty(8 << 20)", "dr.from_dlpack(x).copy()", 64),
    ]
    for name, make, convert, out_mib in cases:
        script = _MEMORY_CHILD.format(make=make, convert=convert)
        if "[0.5]" in make:
            script = script.replace("x[...] = 1\n", "")
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"  {name}: not measured ({run.stderr.strip().splitlines()[-1] if run.stderr else run.returncode})")
            continue
        m = json.loads(run.stdout)
        out_bytes = out_mib * MIB
        inp = m["input"] if "[0.5]" not in make else 0
        ratio = (inp + m["extra"]) / (inp + out_bytes)
        rows.append({"case": name, "ratio": ratio, "limit": 1.1, "pass": ratio <= 1.1})
        print(f"  {name:48s} peak {m['extra'] / MIB:7.1f} MiB over the input for {out_bytes / MIB:5.1f} MiB of output: "
              f"ratio {ratio:4.2f} (target <= 1.1) {'pass' if ratio <= 1.1 else 'FAIL'}")
    return rows


def save_chart(rows, path) -> bool:
    """Draw the ratios to `path` at the documentation page's width
    (dlpack_ref.bench.chart: PAGE_WIDTH, DPI, FONT), each bar with its ratio
    and its two times in plain units on the right; False when matplotlib is
    missing (and an earlier run's chart at `path` is then removed)."""
    plt = pyplot_or_remove(path)
    if plt is None:
        return False
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    from dlpack_ref.bench.chart import DPI, FONT, PAGE_WIDTH, format_ns

    with plt.rc_context({"font.size": FONT}):
        fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 0.32 * len(rows) + 1.4), layout="constrained")
        ratios = [r["ratio"] for r in rows]
        colors = ["tab:green" if r["pass"] else "tab:red" for r in rows]
        ax.barh(range(len(rows)), ratios, color=colors, height=0.7)
        for i, r in enumerate(rows):
            ax.plot([r["limit"], r["limit"]], [i - 0.45, i + 0.45], color="black", lw=1.2)
        ax.set_yticks(range(len(rows)), [r["case"] for r in rows], fontsize=FONT - 2)
        ax.invert_yaxis()
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xscale("log")
        # The ratio in plain numbers ("0.5x", "1x", "2x"), not powers of ten.
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}x"))
        low, high = min(ratios + [1.0]), max(ratios + [r["limit"] for r in rows])
        ax.set_xlim(low / 1.5, high * 1.5)
        ax.grid(axis="x", color="0.85", lw=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("dlpack_ref time / best reference time (log scale; black tick: target)")
        ax.set_title("copies and conversions, interleaved, min over rounds", fontsize=FONT)
        # On the right, each case's ratio and its two times in plain units.
        times = []
        for r in rows:
            ours, ref = r["ns"].get("dlpack_ref"), r["ns"].get(r["reference"])
            label = f"{r['ratio']:.2f}x"
            if ours is not None and ref is not None:
                label += f"  {format_ns(ours)} vs {r['reference']} {format_ns(ref)}"
            times.append(label)
        right = ax.secondary_yaxis("right")
        right.set_yticks(range(len(rows)), times, fontsize=FONT - 2)
        right.tick_params(length=0)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    p.add_argument("--big", action="store_true", help="add the 1 GiB copies")
    p.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT (nothing is saved)")
    p.add_argument("--no-instructions", action="store_true",
                   help="leave out the instruction counts of the 1 KiB own-copy cases (callgrind)")
    p.add_argument("--instructions-only", action="store_true",
                   help="only count the 1 KiB own-copy cases in instructions (no timing)")
    p.add_argument("--json", default=os.path.join(HERE, "results", "copies.json"))
    p.add_argument("--instructions-json", default=os.path.join(HERE, "results", "copies_instructions.json"))
    p.add_argument("--png", default=os.path.join(HERE, "results", "copies.png"))
    args = p.parse_args(argv)
    if args.instructions_only:
        save_instructions(args.instructions_json)
        return 0
    rounds = 7 if args.quick else 31
    start = runinfo.start()
    print(f"load average at start: {start['load_average'][0]:.2f} on {start['cores']} CPUs")
    rows = []
    for title, cases in (("copies", copy_cases(args.big)), ("conversions", conversion_cases()),
                         ("small calls", small_cases())):
        if args.only:
            cases = [c for c in cases if args.only in c[1]]
            if not cases:
                continue
        print(title)
        rows += measure(cases, rounds)
    if args.only:
        return 0
    print("peak memory")
    memory = peak_memory()
    run = runinfo.record(start, modules=["numpy", "torch", "ml_dtypes"], settings={
        "quick": args.quick, "big": args.big, "rounds": rounds, "threads": dr.get_num_threads(),
        "quiet_s": QUIET_S})
    print(f"load average at end: {run['machine']['load_average']['end'][0]:.2f}")
    failed = [r["case"] for r in rows + memory if not r["pass"]]
    print(f"{len(rows) + len(memory) - len(failed)} of {len(rows) + len(memory)} targets met"
          + (f"; missed: {', '.join(failed)}" if failed else ""))
    if save_chart(rows, args.png):
        chart = os.path.basename(args.png)
        print(f"saved {args.png}")
    else:
        chart = None
        print(f"no chart: matplotlib is not installed (pip install 'dlpack-ref[bench]'); {args.png} removed")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({**run, "chart": chart, "rows": rows, "memory": memory}, f, indent=2)
    print(f"saved {args.json}")
    if not args.no_instructions:
        save_instructions(args.instructions_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
