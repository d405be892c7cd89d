"""The figures of benchmarks/callgrind_adopter.py: benchmarks/results/callgrind_adopter.json."""

from __future__ import annotations

from figures.provenance import run_line

_ADOPTERS = {"c_adopter": "C", "cpp_adopter": "C++", "cython_adopter": "Cython", "pybind11_adopter": "pybind11",
             "nanobind_adopter": "nanobind"}
_ADOPTER_CALLS = [("from_dlpack(ndarray)", "from_dlpack(numpy)", "numpy.from_dlpack(numpy)"),
                  ("Tensor.__dlpack__()", "Tensor.__dlpack__()", "ndarray.__dlpack__()"),
                  ("Tensor.__dlpack__(max_version=(1, 3))", "Tensor.__dlpack__(max_version)",
                   "ndarray.__dlpack__(max_version)"),
                  ("Tensor.__dlpack_device__()", "Tensor.__dlpack_device__()", "ndarray.__dlpack_device__()")]


def adopter_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    settings = (f"instructions per call over {d['loops']} and {2 * d['loops']} calls, the loop's own "
                f"{d['loop_overhead']:.0f} subtracted (counts do not move with the load)")
    return run_line(src, settings)


def adopter_table(sources, args) -> str:
    d = sources[0].need()
    counts = d["instructions_per_call"]
    rows, meets = [], {}
    for label, suffix, numpy_case in _ADOPTER_CALLS:
        ref = counts.get(numpy_case)
        row = [f"`{label}`"]
        for adopter in _ADOPTERS:
            n = counts.get(f"{adopter}.{suffix}")
            if n is None or ref is None:
                row.append("-")
                continue
            row.append(f"{n:.0f} ({n / ref:.2f})")
            meets.setdefault(adopter, []).append(n <= ref)
        row.append(f"{ref:.0f}" if ref is not None else "-")
        rows.append(row)
    header = ["call"] + list(_ADOPTERS.values()) + ["NumPy"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    within = [_ADOPTERS[a] for a, ok in meets.items() if all(ok)]
    over = [_ADOPTERS[a] for a, ok in meets.items() if not all(ok)]
    verdict = []
    if within:
        verdict.append(f"at most NumPy's on every call: {', '.join(within)}")
    if over:
        verdict.append(f"over NumPy's on some call: {', '.join(over)}")
    return ("Instructions per call, 16 float32 elements, the statements written out (`numpy.from_dlpack(x)` with "
            "its module attribute lookup); ratio to NumPy's in parentheses:\n\n" + "\n".join(lines)
            + "\n\n" + ("Targets (an adopter's import, export and `__dlpack_device__` at most NumPy's): "
                        + "; ".join(verdict) + "." if verdict else ""))
