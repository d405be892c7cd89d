"""Instructions per call of the five example adopters (dlpack_ref/adopters/:
plain C, C++17 on the CPython API, Cython, pybind11 and nanobind, each going
through the vendored dlpack_ref.h) beside NumPy, counted by callgrind exactly
as callgrind_exchange.py counts (its cases and method are reused). The
adopters are the installed package's, built first into a temporary folder
with the commands docs/vendoring.md prints (tests/support/adopter_recipe.py).

    python benchmarks/callgrind_adopter.py [--loops N] [--clock] [--json PATH]

``--clock`` adds the wall-clock ratios of the same targets, interleaved
(dlpack_ref.bench.timing: the compared calls alternate within every round
and each keeps its minimum), beside the instruction counts.

Targets: an adopter's import costs at most numpy.from_dlpack of a NumPy
array; its export at most ndarray.__dlpack__; its __dlpack_device__ at most
ndarray.__dlpack_device__. The counts, with the run that
made them (the command, the machine, the versions of Python, NumPy, Cython,
pybind11, nanobind and the compilers, the loops), go to
benchmarks/results/callgrind_adopter.json; tools/docs_figures.py renders it
into docs/vendoring.md, "Speed".
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from pathlib import Path

from dlpack_ref.bench.timing import compare

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import callgrind_exchange as cg  # noqa: E402
from support.adopter_recipe import ADOPTERS, build_adopter  # noqa: E402

CASES, TARGETS = {}, []
for _a in ADOPTERS:
    _made = f"import numpy as np, {_a}\nt = {_a}.make(2, 32, 1, (16,), bytes(64))"
    CASES[f"{_a}.from_dlpack(numpy)"] = (f"import numpy as np, {_a}\nx = np.zeros(16, np.float32)",
                                         f"{_a}.from_dlpack(x)")
    CASES[f"{_a}.Tensor.__dlpack__()"] = (_made, "t.__dlpack__()")
    CASES[f"{_a}.Tensor.__dlpack__(max_version)"] = (_made, "t.__dlpack__(max_version=(1, 3))")
    CASES[f"{_a}.Tensor.__dlpack_device__()"] = (_made, "t.__dlpack_device__()")
    TARGETS += [(f"{_a}.from_dlpack(numpy)", "numpy.from_dlpack(numpy)", 1.0),
                (f"{_a}.Tensor.__dlpack_device__()", "ndarray.__dlpack_device__()", 1.0),
                (f"{_a}.Tensor.__dlpack__()", "ndarray.__dlpack__()", 1.0),
                (f"{_a}.Tensor.__dlpack__(max_version)", "ndarray.__dlpack__(max_version)", 1.0)]
CASES["ndarray.__dlpack_device__()"] = ("import numpy as np\nx = np.zeros(16, np.float32)", "x.__dlpack_device__()")
CASES["ndarray.__dlpack__(max_version)"] = ("import numpy as np\nx = np.zeros(16, np.float32)",
                                            "x.__dlpack__(max_version=(1, 3))")


def build(folder: Path) -> None:
    """The five adopters in `folder`, as docs/vendoring.md builds them (-O2;
    nanobind's CMake Release: -O3)."""
    for name in ADOPTERS:
        done = build_adopter(name, folder)
        if done.returncode != 0:
            raise SystemExit(f"building {name} failed:\n{done.stderr[-4000:]}")


def clock(folder: Path, rounds: int = 31) -> None:
    """Print the interleaved wall-clock ratio of each target."""
    import importlib.util

    import numpy as np

    x = np.zeros(16, np.float32)
    calls = {
        "numpy.from_dlpack(numpy)": lambda: np.from_dlpack(x),
        "ndarray.__dlpack__()": lambda: x.__dlpack__(),
        "ndarray.__dlpack__(max_version)": lambda: x.__dlpack__(max_version=(1, 3)),
        "ndarray.__dlpack_device__()": lambda: x.__dlpack_device__(),
    }
    for name in ADOPTERS:
        spec = importlib.util.spec_from_file_location(name, folder / (name + sysconfig.get_config_var("EXT_SUFFIX")))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        t = module.make(2, 32, 1, (16,), bytes(64))
        calls[f"{name}.from_dlpack(numpy)"] = lambda m=module: m.from_dlpack(x)
        calls[f"{name}.Tensor.__dlpack__()"] = lambda t=t: t.__dlpack__()
        calls[f"{name}.Tensor.__dlpack__(max_version)"] = lambda t=t: t.__dlpack__(max_version=(1, 3))
        calls[f"{name}.Tensor.__dlpack_device__()"] = lambda t=t: t.__dlpack_device__()
    best = compare(calls, rounds=rounds)
    print(f"\nwall clock, interleaved minimum of {rounds} rounds (ns per call):")
    for case, reference, _ in TARGETS:
        ours, theirs = best[case]["min_ns"], best[reference]["min_ns"]
        print(f"{case:40s} {ours:7.0f} / {reference:32s} {theirs:7.0f} = {ours / theirs:5.2f}")


def main(argv=None) -> int:
    argv = list(argv or [])
    if "-h" in argv or "--help" in argv:   # callgrind_exchange's own help would describe another script
        print(__doc__)
        return 0
    with_clock = "--clock" in argv
    if with_clock:
        argv.remove("--clock")
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        if with_clock:
            clock(Path(tmp))
        os.environ["PYTHONPATH"] = tmp + os.pathsep + os.environ.get("PYTHONPATH", "")
        cg.CASES.update(CASES)
        cg.TARGETS[:] = TARGETS
        cg.MODULES[:] = ["numpy", "Cython", "pybind11", "nanobind"]
        cg.EXTRA_VERSIONS.update({"cc": cg.runinfo.compiler("cc"), "c++": cg.runinfo.compiler("c++")})
        names = sorted({n for t in TARGETS for n in t[:2]})
        out = [] if "--json" in argv else ["--json", os.path.join(HERE, "results", "callgrind_adopter.json")]
        return cg.main([*argv, "--only", *names, *out])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
