"""mpi4py as released against mpi4py adopted (its DLPack consumer on the
vendored dlpack_ref.h, adoption/mpi4py/): the cost of a message of a small
array that reaches mpi4py through DLPack.

    python benchmarks/adoption_mpi4py.py [--released VENV] [--adopted VENV]
        [--rounds R] [--loops N] [--count-loops N] [--json PATH]

The two builds are two venvs (adoption/run.sh mpi4py makes them, under
.adoption-work/mpi4py/), so they cannot be imported in one process. One
driver interleaves them: each round runs a batch of every case in a child of
the released venv and one of the adopted venv, in alternating order, and
each case keeps its fastest batch per build; the ratio is adopted over
released. Beside the clock, callgrind counts the instructions per call of
each case in each build (dlpack_ref.bench.callgrind, N and 2N calls, the
loop's own cost subtracted).

Cases: ``MPI.COMM_SELF.Sendrecv`` of 16 float32 and ``MPI.buffer`` (the
import alone) of arrays exported by NumPy, dlpack_ref.Array and PyTorch.
NumPy's and dlpack-ref's arrays also have the buffer protocol, which mpi4py
prefers, so they reach DLPack in two shapes: an object holding their bound
``__dlpack__`` and ``__dlpack_device__`` as attributes (``numpy``,
``dlpack_ref.Array``), and a producer written in Python whose methods call
theirs (``Python producer of ...``).
PyTorch comes from the venv this driver runs in (appended to the children's
sys.path, after their own packages) when theirs has none.

Target: adopted/released <= 1.0 for every case, in instructions.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(ROOT, ".adoption-work", "mpi4py")

SETUP = """
import sys
sys.path.append({extra!r})
from mpi4py import MPI
import numpy as np, dlpack_ref

class DLPackOnly:  # the producer's own __dlpack__ and __dlpack_device__, no buffer protocol
    __slots__ = ("__dlpack__", "__dlpack_device__")
    def __init__(self, a):
        self.__dlpack__, self.__dlpack_device__ = a.__dlpack__, a.__dlpack_device__

class Exported:  # a producer written in Python, delegating to the array's exporter
    __slots__ = ("_a",)
    def __init__(self, a):
        self._a = a
    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)
    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

comm = MPI.COMM_SELF
def pair(make):
    return make(), make()
np_x, np_y = pair(lambda: DLPackOnly(np.zeros(16, np.float32)))
dr_x, dr_y = pair(lambda: DLPackOnly(dlpack_ref.zeros(16, dtype="float32")))
import torch
pt_x, pt_y = pair(lambda: torch.zeros(16))
npy_x, npy_y = pair(lambda: Exported(np.zeros(16, np.float32)))
dry_x, dry_y = pair(lambda: Exported(dlpack_ref.zeros(16, dtype="float32")))
"""

STATEMENTS = {
    "Sendrecv(numpy)": "comm.Sendrecv(np_x, 0, 0, np_y, 0, 0)",
    "Sendrecv(dlpack_ref.Array)": "comm.Sendrecv(dr_x, 0, 0, dr_y, 0, 0)",
    "Sendrecv(torch)": "comm.Sendrecv(pt_x, 0, 0, pt_y, 0, 0)",
    "MPI.buffer(numpy)": "MPI.buffer(np_x)",
    "MPI.buffer(dlpack_ref.Array)": "MPI.buffer(dr_x)",
    "MPI.buffer(torch)": "MPI.buffer(pt_x)",
    "Sendrecv(Python producer of numpy)": "comm.Sendrecv(npy_x, 0, 0, npy_y, 0, 0)",
    "Sendrecv(Python producer of dlpack_ref.Array)": "comm.Sendrecv(dry_x, 0, 0, dry_y, 0, 0)",
    "MPI.buffer(Python producer of numpy)": "MPI.buffer(npy_x)",
    "MPI.buffer(Python producer of dlpack_ref.Array)": "MPI.buffer(dry_x)",
}


def torch_path() -> str:
    """Where this interpreter's torch lives (its site-packages)."""
    return sysconfig.get_paths()["purelib"]


def worker_time(loops: int, repeats: int) -> dict[str, float]:
    """ns per call of each case, the fastest of `repeats` batches of `loops` (in a child)."""
    import time

    scope: dict = {}
    exec(SETUP.format(extra=os.environ["ADOPTION_EXTRA_PATH"]), scope)
    out = {}
    for name, stmt in STATEMENTS.items():
        fn = eval(compile(f"lambda: {stmt}", name, "eval"), scope)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(loops):
                fn()
            best = min(best, (time.perf_counter_ns() - t0) / loops)
        out[name] = best
    return out


def worker_count(loops: int) -> dict[str, float]:
    """Instructions per call of each case under callgrind (in a child)."""
    from dlpack_ref.bench import callgrind

    setup = SETUP.format(extra=os.environ["ADOPTION_EXTRA_PATH"])
    counts, _ = callgrind.count("dlpack_ref.bench.callgrind:source_calls", [setup, STATEMENTS], loops)
    return counts


def child(venv: str, mode: str, loops: int, repeats: int = 1) -> dict[str, float]:
    python = os.path.join(venv, "bin", "python")
    done = subprocess.run([python, __file__, "--worker", mode, "--loops", str(loops), "--repeats", str(repeats)],
                          env={**os.environ, "ADOPTION_EXTRA_PATH": torch_path()}, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{python} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def counted(venv: str, loops: int) -> dict[str, float]:
    """The instruction counts of a build: kept beside its venv, for as long as
    the build (adoption/run.sh's stamp of what it was built from) and the
    cases are the same; instruction counts do not move with the load, and
    one build's run under callgrind takes minutes."""
    stamp_path = os.path.join(venv, ".adoption-build")
    stamp = open(stamp_path).read().strip() if os.path.exists(stamp_path) else None
    key = {"build": stamp, "loops": loops, "setup": SETUP, "statements": STATEMENTS}
    cache = os.path.join(venv, ".adoption-bench-counts.json")
    if stamp is not None and os.path.exists(cache):
        with open(cache) as f:
            kept = json.load(f)
        if kept.get("key") == key:
            return kept["counts"]
    counts = child(venv, "count", loops)
    with open(cache, "w") as f:
        json.dump({"key": key, "counts": counts}, f)
    return counts


def versions_of(venv: str) -> dict:
    code = "import mpi4py, numpy, dlpack_ref, importlib.metadata as m; print(__import__('json').dumps(" \
           "{'mpi4py': mpi4py.__version__, 'mpich': m.version('mpich'), 'numpy': numpy.__version__, " \
           "'dlpack_ref': dlpack_ref.__version__}))"
    done = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--released", default=os.path.join(WORK, "venv-released"))
    p.add_argument("--adopted", default=os.path.join(WORK, "venv-adopted"))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--loops", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--count-loops", type=int, default=1000)
    p.add_argument("--json", default=os.path.join(HERE, "results", "adoption_mpi4py.json"))
    p.add_argument("--worker", choices=["time", "count"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "time":
        print(json.dumps(worker_time(args.loops, args.repeats)))
        return 0
    if args.worker == "count":
        print(json.dumps(worker_count(args.loops)))
        return 0

    import runinfo  # benchmarks/runinfo.py: this folder is first on sys.path

    builds = {"released": args.released, "adopted": args.adopted}
    began = runinfo.start()
    best: dict[str, dict[str, float]] = {b: {} for b in builds}
    for r in range(args.rounds):
        for b in (("released", "adopted") if r % 2 == 0 else ("adopted", "released")):
            for name, ns in child(builds[b], "time", args.loops, args.repeats).items():
                best[b][name] = min(best[b].get(name, float("inf")), ns)
    with concurrent.futures.ThreadPoolExecutor(len(builds)) as pool:   # one child each, under callgrind
        counts = dict(zip(builds, pool.map(lambda v: counted(v, args.count_loops), builds.values())))
    cases = []
    for name in STATEMENTS:
        cases.append({
            "case": name,
            "ns": {b: round(best[b][name], 1) for b in builds},
            "ns_ratio": round(best["adopted"][name] / best["released"][name], 3),
            "instructions": {b: round(counts[b][name]) for b in builds},
            "instructions_ratio": round(counts["adopted"][name] / counts["released"][name], 3),
        })
    import torch  # noqa: F401 (its version, for the record)

    result = {**runinfo.record(began, settings={"rounds": args.rounds, "loops": args.loops,
                                                "repeats": args.repeats, "count_loops": args.count_loops,
                                                "array": "16 float32"},
                               modules=["torch"],
                               extra_versions={k: f"{v} (both builds)" for k, v in versions_of(args.released).items()
                                               if k in ("mpi4py", "mpich")}),
              "builds": {b: os.path.relpath(v, ROOT) for b, v in builds.items()},
              "cases": cases,
              "target": "instructions_ratio <= 1.0"}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    width = max(len(c["case"]) for c in cases)
    print(f"{'case':{width}}  {'released':>9} {'adopted':>9} {'ratio':>6}   {'instr rel':>9} {'instr ad':>9} {'ratio':>6}")
    for c in cases:
        print(f"{c['case']:{width}}  {c['ns']['released']:9.0f} {c['ns']['adopted']:9.0f} {c['ns_ratio']:6.3f}   "
              f"{c['instructions']['released']:9d} {c['instructions']['adopted']:9d} {c['instructions_ratio']:6.3f}")
    return 0 if all(c["instructions_ratio"] <= 1.0 for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
