"""Instructions per call of the plain C example adopter
(tests/adopters/c_adopter.c, which goes through include/dlpack_ref.h) beside
NumPy, counted by callgrind exactly as callgrind_exchange.py counts (its
cases and method are reused). The adopter is built first from the three
vendored headers into a temporary folder.

    python benchmarks/callgrind_adopter.py [--loops N] [--clock]

``--clock`` adds the wall-clock ratios of the same targets, interleaved
(benchmarks/interleave.py: the compared calls alternate within every round
and each keeps its minimum), beside the instruction counts.

Targets (issue 18, item 4): an adopter's import costs at most
numpy.from_dlpack of a NumPy array; its export at most ndarray.__dlpack__.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import dlpack_ref

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import callgrind_exchange as cg  # noqa: E402

CASES = {
    "c_adopter.from_dlpack(numpy)": ("import numpy as np, c_adopter\nx = np.zeros(16, np.float32)",
                                     "c_adopter.from_dlpack(x)"),
    "c_adopter.Tensor.__dlpack__()": (
        "import numpy as np, c_adopter\nt = c_adopter.make(2, 32, 1, (16,), bytes(64))", "t.__dlpack__()"),
    "c_adopter.Tensor.__dlpack__(max_version)": (
        "import numpy as np, c_adopter\nt = c_adopter.make(2, 32, 1, (16,), bytes(64))",
        "t.__dlpack__(max_version=(1, 3))"),
    "ndarray.__dlpack__(max_version)": ("import numpy as np\nx = np.zeros(16, np.float32)",
                                        "x.__dlpack__(max_version=(1, 3))"),
}
TARGETS = [
    ("c_adopter.from_dlpack(numpy)", "numpy.from_dlpack(numpy)", 1.0),
    ("c_adopter.Tensor.__dlpack__()", "ndarray.__dlpack__()", 1.0),
    ("c_adopter.Tensor.__dlpack__(max_version)", "ndarray.__dlpack__(max_version)", 1.0),
]


def build(folder: Path) -> None:
    for name in ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h"):
        shutil.copy(Path(dlpack_ref.get_include(), name), folder / name)
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-std=c99", "-isystem", sysconfig.get_paths()["include"],
                    f"-I{folder}", str(HERE.parent / "tests" / "adopters" / "c_adopter.c"), "-o",
                    str(folder / ("c_adopter" + sysconfig.get_config_var("EXT_SUFFIX")))], check=True)


def clock(folder: Path, rounds: int = 31) -> None:
    """Print the interleaved wall-clock ratio of each target."""
    import importlib.util

    from interleave import compare

    spec = importlib.util.spec_from_file_location(
        "c_adopter", folder / ("c_adopter" + sysconfig.get_config_var("EXT_SUFFIX")))
    c_adopter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c_adopter)
    import numpy as np

    x = np.zeros(16, np.float32)
    t = c_adopter.make(2, 32, 1, (16,), bytes(64))
    calls = {
        "c_adopter.from_dlpack(numpy)": lambda: c_adopter.from_dlpack(x),
        "numpy.from_dlpack(numpy)": lambda: np.from_dlpack(x),
        "c_adopter.Tensor.__dlpack__()": lambda: t.__dlpack__(),
        "ndarray.__dlpack__()": lambda: x.__dlpack__(),
        "c_adopter.Tensor.__dlpack__(max_version)": lambda: t.__dlpack__(max_version=(1, 3)),
        "ndarray.__dlpack__(max_version)": lambda: x.__dlpack__(max_version=(1, 3)),
    }
    best = compare(calls, rounds=rounds)
    print(f"\nwall clock, interleaved minimum of {rounds} rounds (ns per call):")
    for case, reference, _ in TARGETS:
        ours, theirs = best[case]["min_ns"], best[reference]["min_ns"]
        print(f"{case:40s} {ours:7.0f} / {reference:32s} {theirs:7.0f} = {ours / theirs:5.2f}")


def main(argv=None) -> int:
    argv = list(argv or [])
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
        names = sorted({n for t in TARGETS for n in t[:2]})
        return cg.main([*argv, "--only", *names,
                        "--json", os.path.join(HERE, "results", "callgrind_adopter.json")])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
