"""The measured figures of the documentation pages, generated from the
committed result files of the runs that made them.

Every figure a page quotes (a table of times, an instruction count, a
threshold, a conformance summary) sits between two markers, written from one
or more result files by a named figure of this script::

    <!-- figures: latency from benchmarks/results/exchange.json -->
    ...a table, generated...
    <!-- end figures -->

or, inside a sentence::

    <!-- figure: summary-line numpy from benchmarks/results/ecosystem_1.json -->`numpy 2.4.6: ...`<!-- end figure -->

Commands (from the repository's root; Python 3.10+, nothing else needed)::

    python tools/docs_figures.py            # rewrite every block of docs/*.md from the committed files
    python tools/docs_figures.py --check    # exit 1, naming page, line and block, where a page differs
    python tools/docs_figures.py --status   # every result file: its run, and what a page lacks from it
    python tools/docs_figures.py --strict   # --check, and exit 1 too while a figure has no full run behind it
    python tools/docs_figures.py --slim benchmarks/results/ecosystem_1.json   # a check report without its reproductions

A result file carries the run that made it: the command, the machine (CPU,
cores, load average at the start and the end), the settings and the versions
(benchmarks/runinfo.py; ``dlpack-ref bench`` and ``dlpack-ref check`` write
their own). Where a file lacks what a block needs (no instruction counts, no
machine), the block says so on the page, and ``--status`` names the run that
would make it. Outside the blocks a page quotes no measurement:
``--check`` also fails on a time, a rate, an instruction count, a ratio or a
percentage written outside them (settings and targets are listed in SETTINGS
below). ``benchmarks/run_all.sh`` remakes every file and then runs this script.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from dlpack_ref.bench.chart import format_ns
from dlpack_ref.bench.report import (
    copy_rows,
    instructions_cell,
    matrix,
    pair_cell,
    producer_rows,
    standing_lines,
)
from dlpack_ref.harness import output
from dlpack_ref.harness.exchange import cell_text
from dlpack_ref.harness.output import md_escape

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESULTS = "benchmarks/results"

# The files a block may cite, each with the command that remakes it (run from
# the repository's root) and what that command needs.
FILES = {
    f"{RESULTS}/exchange.json": (
        (f"dlpack-ref bench --instructions --format markdown --json {RESULTS}/exchange.json "
         f"--plot {RESULTS}/exchange.png"),
        ("the libraries to compare installed; valgrind and an interpreter with its symbols for the counts; "
         "matplotlib for the chart")),
    f"{RESULTS}/copies.json": ("python benchmarks/bench_copies.py", "NumPy, PyTorch, ml_dtypes; matplotlib for the chart"),
    f"{RESULTS}/pool_threshold.json": ("python benchmarks/pool_threshold.py", "NumPy; 2 cores or more"),
    f"{RESULTS}/callgrind_adopter.json": ("python benchmarks/callgrind_adopter.py",
                                          "valgrind, a C and C++ compiler, Cython, pybind11, nanobind, CMake, NumPy"),
    f"{RESULTS}/adoption_producer.json": ("python benchmarks/adoption_producer.py",
                                          "the two numkong builds of adoption/run.sh numkong; valgrind for the counts"),
    f"{RESULTS}/ecosystem_1.json": (f"python -m dlpack_ref check --format json > {RESULTS}/ecosystem_1.json",
                                    "NumPy, PyTorch, JAX, array-api-strict, tvm-ffi, cuda.core, pyarrow"),
    f"{RESULTS}/ecosystem_2.json": (
        ("python -m dlpack_ref check --library dlpack_ref --library numpy --library mlx --library paddle "
         "--library tensorflow --library onnxruntime --library mpi4py --library numkong --library mlc "
         f"--library open3d --format json > {RESULTS}/ecosystem_2.json"),
        "MLX, PaddlePaddle, TensorFlow, ONNX Runtime, mpi4py, numkong, mlc, open3d (a second environment)"),
}

# A block's markers each start a line; an inline figure's are not in a code span.
# Markers inside fenced code (an example of them) are not figures.
BLOCK = re.compile(r"^<!-- figures: (?P<spec>[^>]*?) -->\n(?P<body>.*?)^<!-- end figures -->", re.S | re.M)
INLINE = re.compile(r"(?<!`)<!-- figure: (?P<spec>[^>]*?) -->(?P<body>[^\n]*?)<!-- end figure -->(?!`)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _in_fence(text: str, pos: int) -> bool:
    return any(m.start() <= pos < m.end() for m in FENCE.finditer(text))


class NoData(Exception):
    """A block's file lacks what the block shows (the message says what)."""


@dataclasses.dataclass
class Source:
    path: str
    data: dict | None

    @property
    def command(self) -> str:
        return FILES[self.path][0]

    def need(self) -> dict:
        if self.data is None:
            raise NoData(f"`{self.path}` is not committed")
        return self.data


# --------------------------------------------------------------------------
# Formatting


def grid(header: list[str], rows: list[list]) -> str:
    """A Markdown table, every cell escaped as the reports of dlpack-ref escape it."""
    return output.grid(header, [[str(c) for c in r] for r in rows], markdown=True)


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _load(load: list[float] | None) -> str:
    return f"{load[0]:.2f}" if load else "?"


def _machine_text(machine: dict | None, timed: bool = True) -> str:
    """The CPU, its cores and the load; `timed`: whether the run's figures are
    times (instruction counts do not move with the load)."""
    if not machine:
        return "the machine and its load were not recorded"
    load = machine.get("load_average") or {}
    text = (f"{machine['cpu']}, {machine['cores']} cores, load average {_load(load.get('start'))} at the start "
            f"and {_load(load.get('end'))} at the end")
    if machine.get("overloaded") and timed:
        text += " (more than the cores: other work took turns with the calls timed, and the times mean little)"
    return text


def _versions_text(versions: dict) -> str:
    names = {"python": "Python", "dlpack_ref": "dlpack-ref"}
    # a compiler's version line starts with its name: "cc (Debian 12.2.0-14) 12.2.0"
    return ", ".join(v if v.startswith(k + " ") else f"{names.get(k, k)} {v}"
                     for k, v in versions.items() if v is not None)


# Files of instruction counts, which the load does not move.
COUNTS = {"callgrind_adopter", "adoption_producer"}


# --------------------------------------------------------------------------
# What a file says about its run, and what keeps it from backing a page


def run_problems(src: Source) -> list[str]:
    """Why the run of `src` is not a full run on a quiet machine with its
    metadata (empty when it is)."""
    d = src.data
    if d is None:
        return [f"`{src.path}` is not committed"]
    problems = []
    if "schema_version" in d and "pairs" in d:          # dlpack-ref bench
        if d["settings"].get("quick"):
            problems.append("a quick run (--quick): a smoke test, not figures to judge by")
        if not d["settings"].get("instructions") or not any(p.get("instructions") is not None for p in d["pairs"]):
            problems.append("no instruction counts (made without --instructions, or callgrind was missing)")
        if d["machine"].get("overloaded"):
            problems.append("the machine was overloaded")
        if not d["copies"].get("from_numpy"):
            problems.append("no copies of one NumPy array (made by an older dlpack-ref bench)")
        return problems
    if "schema_version" in d and "libraries" in d:      # dlpack-ref check
        return problems
    missing = [k for k in ("command", "machine", "versions", "settings") if k not in d]
    if missing:
        problems.append(f"records no {', '.join(missing)} (made before the scripts wrote them)")
    quick = d.get("quick", (d.get("settings") or {}).get("quick"))
    if quick:
        problems.append("a quick run (--quick): a smoke test, not figures to judge by")
    if (d.get("machine") or {}).get("overloaded") and _kind(src.path) not in COUNTS:
        problems.append("the machine was overloaded")
    return problems


def _run_line(src: Source, settings_text: str = "") -> str:
    """One paragraph: the command, the machine and its load, the versions and
    the settings of the run of `src`."""
    d = src.need()
    parts = [f"Made by `{d.get('command') or src.command}`"]
    if d.get("date"):
        parts[0] += f" on {d['date']}"
    parts.append(_machine_text(d.get("machine"), timed=_kind(src.path) not in COUNTS))
    if d.get("versions"):
        parts.append(md_escape(_versions_text(d["versions"])))
    else:
        parts.append("the versions were not recorded")
    if settings_text:
        parts.append(settings_text)
    quick = d.get("quick", (d.get("settings") or {}).get("quick"))
    text = "; ".join(parts) + "."
    if quick:
        text += " **A quick run** (a smoke test of the script): not the figures to judge by."
    return text


# --------------------------------------------------------------------------
# dlpack-ref bench: benchmarks/results/exchange.json


def _bench(src: Source) -> dict:
    d = src.need()
    if "pairs" not in d:
        raise NoData(f"`{src.path}` is not a report of dlpack-ref bench")
    return d


def _names(d: dict, role: str) -> list[str]:
    return [lib["name"] for lib in d["libraries"] if lib[role]]


def exchange_run(sources: list[Source], args: list[str]) -> str:
    (src,) = sources
    d = _bench(src)
    s, env = d["settings"], d["environment"]
    versions = ", ".join(f"{lib['name']} {lib['version']}" for lib in d["libraries"])
    command = ("dlpack-ref bench" + (" --quick" if s.get("quick") else "")
               + (" --instructions" if s.get("instructions") else "")
               + f" --format markdown --json {src.path} --plot {src.path[:-len('.json')]}.png")
    text = (f"Made by `{command}` (in a source checkout; the JSON and the chart are of the same run): "
            f"{env['implementation']} {env['python']}, {md_escape(versions)}; {_machine_text(d['machine'])}; "
            f"{s['rounds']} rounds of {s['budget_s'] * 1000:g} ms per latency call, {s['copy_rounds']} per copy"
            + (f", instructions counted over {s['loops']} and {2 * s['loops']} calls" if s["instructions"] else "")
            + ".")
    if s.get("quick"):
        text += " **A quick run** (a smoke test): not the figures to judge by."
    missing = [m["name"] for m in d["missing"]]
    if missing:
        text += " Not installed: " + md_escape(", ".join(missing)) + "."
    for note in d["notes"]:
        if "load average" not in note:   # said with the machine above
            text += f" Warning: {md_escape(note)}."
    return text


def exchange_latency(sources, args) -> str:
    d = _bench(sources[0])
    return (f"Latency of `consumer.from_dlpack(x)`, ns per call, median (min) of {d['settings']['rounds']} "
            "interleaved rounds; \"copy\": the result is not the producer's memory (rows: producer, columns: "
            "consumer):\n\n" + matrix(d, pair_cell))


def exchange_standings(sources, args) -> str:
    d = _bench(sources[0])
    lines = [md_escape(line) for line in standing_lines(d)]
    if not lines:
        raise NoData(f"`{sources[0].path}` compares dlpack_ref with no other library")
    return "dlpack_ref against the best other library, by median:\n\n" + "\n".join(lines)


def exchange_producers(sources, args) -> str:
    header, rows = producer_rows(_bench(sources[0]))
    return "Each producer's own calls, ns per call, median (min):\n\n" + grid(header, rows)


def exchange_copies(sources, args) -> str:
    d = _bench(sources[0])
    size, rounds = format_bytes(d["copies"]["bytes"]), d["settings"]["copy_rounds"]
    header = ["library", "ms", "GB/s", "of memcpy", "note"]
    out = (f"`library.from_dlpack(x, copy=True)` of a {size} array of the library's own, median of {rounds} "
           "rounds:\n\n" + grid(header, copy_rows(d, "libraries")))
    if d["copies"].get("from_numpy"):
        out += (f"\n\n`library.from_dlpack(x, copy=True)` of one {size} NumPy array, the same source for every "
                f"library, median of {rounds} rounds:\n\n" + grid(header, copy_rows(d, "from_numpy")))
    return out


def _counts(d: dict, path: str) -> dict:
    counts = {(p["producer"], p["consumer"]): p["instructions"] for p in d["pairs"]}
    if not any(v is not None for v in counts.values()):
        raise NoData(f"`{path}` holds no instruction counts (its run was made without `--instructions`)")
    return counts


def exchange_instructions(sources, args) -> str:
    d = _bench(sources[0])
    _counts(d, sources[0].path)
    env = d["environment"]
    return (f"Instructions per call of `consumer.from_dlpack(x)` ({env['implementation']} {env['python']}, "
            f"N = {d['settings']['loops']}; rows: producer, columns: consumer):\n\n" + matrix(d, instructions_cell))


def exchange_producer_instructions(sources, args) -> str:
    d = _bench(sources[0])
    _counts(d, sources[0].path)
    tables = {lib["name"]: lib["exchange_table"] for lib in d["libraries"]}
    n = instructions_cell
    rows = [[m["library"], n(m["dlpack"]), n(m["dlpack_device"]), n(m["import_by_table"]),
             n(m["import_by_dlpack"] if tables.get(m["library"]) else None)] for m in d["producers"]]
    return ("Each producer's own calls, in instructions:\n\n"
            + grid(["producer", "__dlpack__()", "__dlpack_device__()", "import by table", "import by __dlpack__"],
                   rows))


def exchange_instruction_standings(sources, args) -> str:
    d = _bench(sources[0])
    counts = _counts(d, sources[0].path)
    mine, lines = "dlpack_ref", []
    producers, consumers = _names(d, "producer"), _names(d, "consumer")
    for side, fixed_list, others in (("consumer", producers, consumers), ("producer", consumers, producers)):
        for fixed in fixed_list:
            by_lib = {lib: counts.get((fixed, lib) if side == "consumer" else (lib, fixed)) for lib in others}
            own = by_lib.get(mine)
            theirs = {lib: n for lib, n in by_lib.items() if lib != mine and n is not None}
            if own is None or not theirs:
                continue
            best = min(theirs, key=theirs.__getitem__)
            role = f"consumer of {fixed} arrays" if side == "consumer" else f"producer for {fixed}"
            ratio = own / theirs[best]
            lines.append("- " + md_escape(f"dlpack_ref as {role}: {own:.0f} against {best}'s {theirs[best]:.0f}: "
                                          f"{ratio:.3f}x ({'fewest' if ratio <= 1.0 else 'more'})"))
    return "dlpack_ref against the other library with the fewest instructions:\n\n" + "\n".join(lines)


# --------------------------------------------------------------------------
# benchmarks/bench_copies.py: benchmarks/results/copies.json


def copies_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    s = d.get("settings")
    settings = (f"minimum over {s['rounds']} interleaved rounds, dlpack-ref on {s['threads']} threads"
                + (", with the 1 GiB copies" if s.get("big") else "")) if s else "the settings were not recorded"
    return _run_line(src, settings)


def copies_targets(sources, args) -> str:
    d = sources[0].need()
    rows, memory = d["rows"], d["memory"]
    met = sum(r["pass"] for r in rows + memory)
    body = [[r["case"], format_ns(r["ns"]["dlpack_ref"]), f"{r['reference']} {format_ns(r['ns'][r['reference']])}",
             f"{r['ratio']:.2f}", f"<= {r['limit']}", f"{r['one_thread']['ratio']:.2f}"] for r in rows]
    missed = [r["case"] for r in rows + memory if not r["pass"]]
    text = f"**{met} of {len(rows) + len(memory)} targets met**" + (
        ": missed " + ", ".join(f"`{c}`" for c in missed) if missed else "") + "."
    table = grid(["case", "dlpack_ref", "best reference", "ratio", "target",
                  "dlpack_ref on 1 thread vs NumPy (or ml_dtypes)"], body)
    # code spans for the case names, as written elsewhere on the page
    table = "\n".join(_case_as_code(line) for line in table.splitlines())
    mem = grid(["case", "ratio", "target"], [[r["case"], f"{r['ratio']:.2f}", f"<= {r['limit']}"] for r in memory])
    mem = "\n".join(_case_as_code(line) for line in mem.splitlines())
    chart = d.get("chart")
    if chart and (ROOT / RESULTS / chart).exists():
        pic = f"![copies and conversions against the best reference](../{RESULTS}/{chart})"
    else:
        pic = "No chart of this run is committed (it ran without matplotlib, or before the chart was recorded)."
    return (f"{text}\n\n{table}\n\nPeak memory, (input + extra resident memory during the call) / "
            f"(input + output):\n\n{mem}\n\n{pic}")


def _case_as_code(line: str) -> str:
    """A table row whose first cell is written as code (its escapes undone)."""
    if not line.startswith("| ") or line.startswith("| case |"):
        return line
    first, sep, rest = line[2:].partition(" | ")
    plain = re.sub(r"\\(.)", r"\1", first)
    return f"| `{plain}` | {rest}" if sep else line


# --------------------------------------------------------------------------
# benchmarks/pool_threshold.py: benchmarks/results/pool_threshold.json


def pool_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    s = d.get("settings")
    sweeps = "1 sweep" if s and s["runs"] == 1 else f"{s['runs'] if s else 0} sweeps"
    settings = (f"split in {s['threads']}, {sweeps} of {s['rounds']} interleaved rounds each"
                if s else "the settings were not recorded")
    return _run_line(src, settings)


def pool_table(sources, args) -> str:
    d = sources[0].need()
    rows = d["rows"]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    sizes = sorted({r["bytes_moved"] for r in rows})
    ratio = {(r["bytes_moved"], r["case"]): r["ratio"] for r in rows}
    runs = (d.get("settings") or {}).get("runs", d.get("runs"))
    body = [[format_bytes(n)] + [f"{ratio[(n, c)]:.2f}" for c in cases] + [f"{d['geomean_by_size'][str(n)]:.2f}"]
            for n in sizes]
    header = ["moved"] + [f"`{c}`" for c in cases] + ["geomean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    what = f"median of {runs} sweeps" if runs and runs > 1 else "one sweep"
    return f"Split time over one-thread time, {what}:\n\n" + "\n".join(lines)


def pool_threshold(sources, args) -> str:
    d = sources[0].need()
    gain, even, found = d["gain_from_bytes_moved"], d["break_even_from_bytes_moved"], d["threshold_bytes_moved"]
    if gain:
        text = f"Two threads gain at least 10 % with no case slower from {format_bytes(gain)} moved on."
    elif even:
        text = (f"No size gains 10 % with no case slower; two threads break even (geometric mean at most 1.05) "
                f"from {format_bytes(even)} moved on.")
    else:
        text = "No size of the sweep gains or breaks even."
        if d.get("core_grain_bytes"):
            text += f" The core's grain (`DLREF_POOL_GRAIN`) is {format_bytes(d['core_grain_bytes'])}."
    if found:
        below = [r for r in d["rows"] if r["bytes_moved"] == found // 2 and r["ratio"] > 1.0]
        if below:
            text += (f" At {format_bytes(found // 2)} moved " + ", ".join(
                f"`{r['case']}` is {r['ratio']:.2f}x slower split" for r in below) + ".")
        grain = d.get("core_grain_bytes")
        if grain is None:
            text += " The run did not record the core's grain."
        elif grain * 2 == found:
            text += (f" The core's grain (`DLREF_POOL_GRAIN`, the least bytes a part moves) is half of that, "
                     f"{format_bytes(grain)}: a copy moving {format_bytes(found)} or more is shared out.")
        else:
            text += (f" This run puts the grain at {format_bytes(found // 2)}; the core's `DLREF_POOL_GRAIN` is "
                     f"{format_bytes(grain)}.")
    return text


# --------------------------------------------------------------------------
# benchmarks/callgrind_adopter.py: benchmarks/results/callgrind_adopter.json

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
    return _run_line(src, settings)


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


# --------------------------------------------------------------------------
# A real producer on the header: benchmarks/results/adoption_producer.json


def adoption_producer_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    st = d.get("settings", {})
    return _run_line(src, f"instructions per call over {st.get('loops')} and {2 * st.get('loops', 0)} calls "
                          "(counts do not move with the load)")


def adoption_producer_table(sources, args) -> str:
    rows = [r for r in sources[0].need()["rows"] if "instructions" in r]
    if not rows:
        return "The run counted no instructions (valgrind was missing)."
    lines = ["| call, 16 float32 | numkong released | numkong adopted | adopted / released | NumPy's ndarray |",
             "|---|---|---|---|---|"]
    for r in rows:
        n = r["instructions"]
        lines.append(f"| `{r['call']}` | {n['released']:.0f} | {n['adopted']:.0f} | {r['instruction_ratio']:.2f} "
                     f"| {n['ndarray']:.0f} |")
    over = [r["call"] for r in rows if r["instruction_ratio"] > 1.0]
    verdict = ("adopted at most released on every call" if not over
               else "adopted over released on: " + ", ".join(f"`{c}`" for c in over))
    return "Instructions per call:\n\n" + "\n".join(lines) + f"\n\nTarget (adopted / released <= 1.0): {verdict}."


# --------------------------------------------------------------------------
# dlpack-ref check: benchmarks/results/ecosystem_*.json

_MARK = {"pass": "ok", "fail": "FAIL", "not supported": "n/s", "error": "ERR"}


def _check(src: Source) -> dict:
    d = src.need()
    if "libraries" not in d or "exchange" not in d:
        raise NoData(f"`{src.path}` is not a JSON report of dlpack-ref check")
    return d


def _rule_cell(result: dict) -> str:
    return f"CRASH ({result['crash']})" if result.get("crash") else _MARK[result["status"]]


def _reports(sources: list[Source]) -> tuple[list[tuple[int, Source, dict]], str]:
    """(run number, source, report) of each committed report, and a note
    naming those not committed (NoData when none is)."""
    found, missing = [], []
    for i, src in enumerate(sources, 1):
        if src.data is None:
            missing.append(f"run {i} (`{src.path}`) is not committed")
        else:
            found.append((i, src, _check(src)))
    if not found:
        raise NoData(", ".join(f"`{s.path}`" for s in sources) + " not committed")
    return found, ("*" + "; ".join(missing) + ".*" if missing else "")


def _checked(reports: list[tuple[int, Source, dict]]) -> list[tuple[int, dict]]:
    """(run number, library) of every checked library, once: the first run
    that checked it."""
    seen, out = set(), []
    for i, _, rep in reports:
        for lib in rep["libraries"]:
            if lib["checked"] and lib["name"] not in seen:
                seen.add(lib["name"])
                out.append((i, lib))
    return out


def _ran_cuda(reports) -> bool:
    return any(r["check"].startswith("cuda.") and r["status"] != "not supported"
               for _, _, rep in reports for lib in rep["libraries"] for r in lib["results"])


def ecosystem_summary(sources, args) -> str:
    reports, note = _reports(sources)
    out = []
    for i, src, rep in reports:
        env = rep["environment"]
        out.append(f"- Run {i} (`{src.path}`), made by `{src.command}` on {rep.get('date', '(no date)')}: "
                   f"dlpack-ref {rep['tool']['version']}, {env['implementation']} {env['python']} on "
                   f"{env['machine']} ({env['platform']})")
    rows = [[lib["name"], lib["version"] or "", str(i)]
            + [str(lib["summary"][k]) for k in ("pass", "fail", "not supported", "error")]
            for i, lib in _checked(reports)]
    names = {lib["name"] for _, lib in _checked(reports)}
    unchecked: dict[str, str] = {}
    for _, _, rep in reports:
        for lib in rep["libraries"]:
            if not lib["checked"] and lib["name"] not in names:
                unchecked.setdefault(lib["name"], lib["note"])
    text = "\n".join(out) + "\n\n" + grid(["library", "version", "run", "pass", "fail", "not supported", "error"],
                                          rows)
    if unchecked:
        text += "\n\nNot checked: " + md_escape(", ".join(f"{n} ({why})" for n, why in sorted(unchecked.items()))) + "."
    if not _ran_cuda(reports):
        text += "\n\nThe CUDA rules are left out: no library ran one (no GPU)."
    return text + ("\n\n" + note if note else "")


def ecosystem_rules(sources, args) -> str:
    reports, note = _reports(sources)
    cuda = _ran_cuda(reports)
    out = []
    for i, src, rep in reports:
        libs = [lib for run, lib in _checked(reports) if run == i]
        if not libs:
            continue
        results = {(lib["name"], r["check"]): r for lib in libs for r in lib["results"]}
        rules = [r for r in dict.fromkeys(r["check"] for lib in libs for r in lib["results"])
                 if cuda or not r.startswith("cuda.")]
        names = [lib["name"] for lib in libs]
        out.append(f"Run {i}:\n\n" + grid(["rule"] + names, [[rule] + [
            _rule_cell(results[(n, rule)]) if (n, rule) in results else "-" for n in names] for rule in rules]))
    return "\n\n".join(out + ([note] if note else []))


def ecosystem_exchange(sources, args) -> str:
    reports, note = _reports(sources)
    out = []
    for i, _, rep in reports:
        names = [lib["name"] for lib in rep["libraries"] if lib["checked"]]
        cells = {(c["producer"], c["consumer"]): c for c in rep.get("exchange", [])}
        tried = {pair for pair, c in cells.items() if c.get("works") or c.get("exc_type") or "crashed" in c}
        consumers = [n for n in names if any(c == n for _, c in tried)]
        producers = [n for n in names if any(p == n for p, _ in tried)]
        if not cells:
            continue
        out.append(f"Run {i} (rows: producer, columns: consumer):\n\n" + grid(
            ["producer \\ consumer"] + consumers,
            [[p] + [cell_text(cells[(p, c)]) if (p, c) in cells else "-" for c in consumers]
             for p in producers]))
    if not out:
        raise NoData("no exchange matrix in " + ", ".join(f"`{s.path}`" for s in sources))
    return "\n\n".join(out + ([note] if note else []))


def ecosystem_summary_line(sources, args) -> str:
    (name,) = args
    d = _check(sources[0])
    for lib in d["libraries"]:
        if lib["name"] == name and lib["checked"]:
            c = lib["summary"]
            return (f"`{name} {lib['version']}: {c['pass']} pass, {c['fail']} fail, {c['error']} error, "
                    f"{c['not supported']} not supported; {c['allowed']} of the failures allowed`")
    raise NoData(f"`{sources[0].path}` did not check {name}")


def failed_rules(paths: list[str]) -> dict[str, set[str]]:
    """rule -> the libraries that fail it or crash on it, in the committed reports of ``paths``."""
    out: dict[str, set[str]] = {}
    for path in paths:
        d = source(path).data
        for lib in (d or {}).get("libraries", []):
            for r in lib["results"]:
                if r["status"] == "fail" or r.get("crash"):
                    out.setdefault(r["check"], set()).add(lib["name"])
    return out


# --------------------------------------------------------------------------
# The figures

FIGURES: dict[str, tuple[str, Callable[[list[Source], list[str]], str]]] = {
    # name: (the file kind it reads, renderer)
    "exchange-run": ("exchange", exchange_run),
    "latency": ("exchange", exchange_latency),
    "standings": ("exchange", exchange_standings),
    "producers": ("exchange", exchange_producers),
    "copies": ("exchange", exchange_copies),
    "instructions": ("exchange", exchange_instructions),
    "producer-instructions": ("exchange", exchange_producer_instructions),
    "instruction-standings": ("exchange", exchange_instruction_standings),
    "copies-run": ("copies", copies_run),
    "targets": ("copies", copies_targets),
    "pool-run": ("pool_threshold", pool_run),
    "pool-table": ("pool_threshold", pool_table),
    "pool-threshold": ("pool_threshold", pool_threshold),
    "adopter-run": ("callgrind_adopter", adopter_run),
    "adopter-table": ("callgrind_adopter", adopter_table),
    "adoption-producer-run": ("adoption_producer", adoption_producer_run),
    "adoption-producer-table": ("adoption_producer", adoption_producer_table),
    "ecosystem-summary": ("ecosystem", ecosystem_summary),
    "ecosystem-rules": ("ecosystem", ecosystem_rules),
    "ecosystem-exchange": ("ecosystem", ecosystem_exchange),
    "summary-line": ("ecosystem", ecosystem_summary_line),
}


def _kind(path: str) -> str:
    stem = Path(path).stem
    return "ecosystem" if stem.startswith("ecosystem") else stem


@dataclasses.dataclass
class Block:
    page: str
    line: int
    spec: str
    name: str
    args: list[str]
    sources: list[Source]
    inline: bool
    body: str           # as the page has it
    rendered: str = ""  # as the files give it
    no_data: str | None = None


def parse_spec(spec: str) -> tuple[str, list[str], list[str]]:
    """``NAME [ARG ...] from FILE[, FILE ...]`` -> (name, args, files)."""
    head, sep, files = spec.partition(" from ")
    if not sep:
        raise ValueError(f"no 'from FILE' in the marker: {spec!r}")
    name, *args = head.split()
    paths = [f.strip() for f in files.split(",") if f.strip()]
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r} (known: {', '.join(FIGURES)})")
    for path in paths:
        if path not in FILES:
            raise ValueError(f"{path}: not a result file this script knows (known: {', '.join(FILES)})")
        if _kind(path) != FIGURES[name][0]:
            raise ValueError(f"figure {name!r} is not made from {path}")
    return name, args, paths


_cache: dict[str, Source] = {}


def use_root(root: Path) -> None:
    """Read the pages and the result files of another checkout (the tests' folders)."""
    global ROOT, DOCS
    ROOT, DOCS = Path(root).resolve(), Path(root).resolve() / "docs"
    _cache.clear()


def source(path: str) -> Source:
    if path not in _cache:
        f = ROOT / path
        _cache[path] = Source(path, json.loads(f.read_text(encoding="utf-8")) if f.exists() else None)
    return _cache[path]


def render_block(block: Block) -> None:
    _, fn = FIGURES[block.name]
    try:
        text = fn(block.sources, block.args).strip("\n")
        block.no_data = None
    except NoData as e:
        block.no_data = str(e)
        commands = "; ".join(f"`{s.command}`" for s in block.sources)
        text = (f"(no figure: {e})" if block.inline else
                f"*No figures here yet: {e}. {commands} makes them (see [contributing](contributing.md)).*")
    block.rendered = text if block.inline else "\n" + text + "\n\n"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for pattern, inline in ((BLOCK, False), (INLINE, True)):
        for m in pattern.finditer(text):
            if _in_fence(text, m.start()):
                continue
            line = text.count("\n", 0, m.start()) + 1
            try:
                if inline and (m.start() == 0 or text[m.start() - 1] == "\n"):
                    # Markdown reads a line that starts with "<!--" as raw HTML, figure and all
                    raise ValueError("an inline figure's marker must not start a line: put a word before it")
                name, args, paths = parse_spec(m.group("spec"))
            except ValueError as e:
                raise SystemExit(f"{page.relative_to(ROOT)}:{line}: {e}") from None
            block = Block(str(page.relative_to(ROOT)), line, m.group("spec"), name, args,
                          [source(p) for p in paths], inline, m.group("body"))
            render_block(block)
            found.append(block)
    return sorted(found, key=lambda b: b.line)


def regenerate(page: Path) -> str:
    """The page with every block rewritten from its files."""
    def sub(inline):
        def replace(m):
            if _in_fence(m.string, m.start()):
                return m.group(0)
            name, args, paths = parse_spec(m.group("spec"))
            block = Block("", 0, m.group("spec"), name, args, [source(p) for p in paths], inline, "")
            render_block(block)
            if inline:
                return f"<!-- figure: {m.group('spec')} -->{block.rendered}<!-- end figure -->"
            return f"<!-- figures: {m.group('spec')} -->\n{block.rendered}<!-- end figures -->"
        return replace
    text = page.read_text(encoding="utf-8")
    text = BLOCK.sub(sub(False), text)
    return INLINE.sub(sub(True), text)


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


# --------------------------------------------------------------------------
# Measurements quoted outside the blocks

# A number with the unit of a measurement: a time, a rate, instructions, a
# ratio, a percentage, test counts.
MEASUREMENT = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ns|µs|us|ms|s|sec|seconds|min|minutes|GB/s|MB/s|GiB/s)(?![\w/])"
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s+instructions\b"
    r"|(?<![\w.])\d+(?:\.\d+)?x(?![\w])"
    r"|(?<![\w.])\d+(?:\.\d+)?\s?%"
    r"|(?<![\w.])\d[\d,]*\s+(?:passed|failed|skipped|xfailed|pass|fail)\b")

# Numbers with those units that are settings, limits or goals, not
# measurements: (page, the words around them). Each is matched as written.
SETTINGS = {
    "benchmarks.md": [
        "calibrated to 10 ms of calls (4 ms)",
        "each sample after 20 ms of quiet",
        "starts after 20 ms of sleep",
        "Idle workers poll for the next job for 200 µs",
        "beat one by 10 %",
        "at least 95 % of the raw copy",
        "at most 1.0x",
        "(geometric mean of the four ratios at most 0.9)",
    ],
    "conformance.md": [
        "a task hangs for 60 s",
        "than 60 s (killed)",
    ],
    "contributing.md": ["waits, up to 5 minutes, for the 1-minute load average"],
    "cuda.md": ["goal >= 95%", "goal <= 1.0x"],
    "guarantees.md": [
        "polls for the next one for 200 µs",
    ],
}


def _outside_blocks(text: str) -> str:
    """The text with its generated blocks and inline figures blanked (line numbers kept)."""
    text = BLOCK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return INLINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _setting(phrase: str) -> re.Pattern:
    """A phrase of SETTINGS as a pattern: its spaces match any run of white
    space (a line break of the page included)."""
    return re.compile(r"\s+".join(re.escape(word) for word in phrase.split()))


def _without_code(text: str) -> str:
    """The text with its fenced code blocks and HTML comments blanked (line
    numbers kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"^```.*?^```", blank, text, flags=re.S | re.M)
    return re.sub(r"<!--.*?-->", blank, text, flags=re.S)


# The header of a table of measurements: a column in a unit of time or rate,
# of instructions, or of ratios.
UNIT_HEADER = re.compile(r"^\|.*\|\s*(?:ns|µs|ms|s|seconds|GB/s|MB/s|instructions|ratio|geomean)\s*(?:\(.*?\))?\s*\|",
                         re.M | re.I)


# Table cells of measurements without a unit: "72 (68)" (median (min)),
# "1898 (0.69)" (a count and its ratio), and counts of three digits or more.
PAIRED_CELL = re.compile(r"^\d[\d,]*(?:\.\d+)? \(\d[\d,]*(?:\.\d+)?\)(?: copy)?$")
COUNT_CELL = re.compile(r"^\d{3,}$|^\d{1,3}(?:,\d{3})+$")


def unbacked(page: Path) -> list[tuple[int, str]]:
    """(line, text) of each measurement the page quotes outside a generated
    block and outside the settings listed for it, and of each table of
    measurements there (by its header)."""
    text = _outside_blocks(page.read_text(encoding="utf-8"))
    for phrase in SETTINGS.get(page.name, []):
        text = _setting(phrase).sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    text = _without_code(text)
    found = []
    for m in MEASUREMENT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found.append((line, m.group(0)))
    for m in UNIT_HEADER.finditer(text):
        found.append((text.count("\n", 0, m.start()) + 1, "a table of measurements: " + m.group(0)[:60]))
    for i, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        paired = sum(bool(PAIRED_CELL.match(c)) for c in cells)
        counts = sum(bool(COUNT_CELL.match(c)) for c in cells)
        if paired >= 2 or counts >= 3:
            found.append((i, "a table row of measurements: " + line[:60]))
    return sorted(found)


# The findings of docs/ecosystem.md cite rules: each must be one that some
# library of the committed reports fails or crashes on.
FINDINGS = ("ecosystem.md", "## What the findings mean for you", "## Per library",
            [f"{RESULTS}/ecosystem_1.json", f"{RESULTS}/ecosystem_2.json"])


def stale_findings() -> list[str]:
    """Rules the findings cite that no library fails in the committed
    reports (empty until every report is committed)."""
    name, begin, end, paths = FINDINGS
    if any(source(path).data is None for path in paths):
        return []
    text = (DOCS / name).read_text(encoding="utf-8")
    text = text[text.index(begin):text.index(end)]
    failed = failed_rules(paths)
    cited = dict.fromkeys(re.findall(r"`((?:producer|consumer|cuda)\.[a-z0-9_]+)`", text))
    return [f"docs/{name}: the findings cite `{rule}`, which no library fails in " + ", ".join(paths)
            for rule in cited if rule not in failed]


def stale_settings() -> list[str]:
    """SETTINGS phrases their page no longer has (an allowance nothing needs)."""
    out = []
    for name, phrases in SETTINGS.items():
        page = DOCS / name
        if not page.exists():
            continue
        text = _outside_blocks(page.read_text(encoding="utf-8"))
        out += [f"docs/{name}: '{ph}'" for ph in phrases if not _setting(ph).search(text)]
    return out


# --------------------------------------------------------------------------


def check(out=sys.stdout) -> int:
    """1 when a page differs from its files or quotes a measurement outside the blocks."""
    status = 0
    for page in pages():
        if page.name == "changelog.md":   # a log of changes, figures of their day
            continue
        rel = page.relative_to(ROOT)
        for b in blocks_of(page):
            if b.body != b.rendered:
                status = 1
                print(f"{rel}:{b.line}: block '{b.spec}' differs from its file(s); "
                      "run `python tools/docs_figures.py`:", file=out)
                diff = difflib.unified_diff(b.body.splitlines(), b.rendered.splitlines(), "page", "files",
                                            lineterm="", n=1)
                for line in list(diff)[:40]:
                    print("    " + line, file=out)
        for line, what in unbacked(page):
            status = 1
            print(f"{rel}:{line}: '{what}' is a measurement outside a generated block "
                  "(generate it from a result file, drop the number, or list a setting in SETTINGS)", file=out)
    for finding in stale_findings():
        status = 1
        print(finding, file=out)
    for phrase in stale_settings():
        status = 1
        print(f"{phrase}: listed in SETTINGS of tools/docs_figures.py, no longer on the page: remove it", file=out)
    return status


def _citations() -> dict[str, list[Block]]:
    """result file -> the blocks of the pages that cite it."""
    used: dict[str, list[Block]] = {}
    for page in pages():
        if page.name == "changelog.md":
            continue
        for b in blocks_of(page):
            for s in b.sources:
                used.setdefault(s.path, []).append(b)
    return used


def needs_run(path: str, used: dict[str, list[Block]] | None = None) -> list[str]:
    """Why the committed file ``path`` does not back its pages with a full
    run on a quiet machine: its run's problems and the blocks it lacks data
    for (empty when it does)."""
    used = _citations() if used is None else used
    problems = run_problems(source(path))
    problems += [f"{b.page}:{b.line} '{b.name}': {b.no_data}" for b in used.get(path, []) if b.no_data]
    if path.endswith("pool_threshold.json") and source(path).data:
        d = source(path).data
        grain, found = d.get("core_grain_bytes"), d.get("threshold_bytes_moved")
        if not found:
            problems.append("the run found no size from which two threads gain or break even")
        elif grain and grain * 2 != found:
            problems.append(f"the run's threshold ({format_bytes(found)} moved) is not twice the core's grain "
                            f"({format_bytes(grain)}): rerun on a quiet machine, or change DLREF_POOL_GRAIN")
    return list(dict.fromkeys(problems))


def report_status(out=sys.stdout) -> int:
    """Each result file with its run's problems and the blocks that lack data; 1 when any."""
    used = _citations()
    status = 0
    for path, (command, needs) in FILES.items():
        src = source(path)
        problems = needs_run(path, used)
        status |= bool(problems)
        print(f"{path}: {'NEEDS A RUN' if problems else 'ok'}", file=out)
        if src.data is not None and (src.data.get("machine") or src.data.get("date")):
            m = src.data.get("machine")
            print(f"    run: {src.data.get('date', '')} {_machine_text(m) if m else ''}".rstrip(), file=out)
        for problem in problems:
            print(f"    - {problem}", file=out)
        if problems:
            print(f"    make it: {command}\n    needs: {needs}", file=out)
        if not used.get(path):
            print("    (no page cites it)", file=out)
    return status


def slim(path: Path) -> None:
    """Rewrite a JSON report of dlpack-ref check without its reproductions
    (most of its size; `dlpack-ref check --library LIB --explain RULE`
    prints any of them again): what the pages show is all kept."""
    d = json.loads(path.read_text(encoding="utf-8"))
    if "libraries" not in d or "exchange" not in d:
        raise SystemExit(f"{path}: not a JSON report of dlpack-ref check")
    for lib in d["libraries"]:
        for r in lib["results"]:
            r["reproduction"] = None
    path.write_text(json.dumps(d, indent=2) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="write nothing; exit 1 where a page differs from its files")
    g.add_argument("--status", action="store_true", help="each result file's run and what the pages lack from it")
    g.add_argument("--strict", action="store_true", help="--check, and exit 1 while a figure has no full run behind it")
    g.add_argument("--slim", metavar="REPORT", nargs="+", type=Path,
                   help="rewrite JSON reports of dlpack-ref check without their reproductions")
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose docs/ and results (default: this one)")
    args = p.parse_args(argv)
    use_root(args.root)
    if args.slim:
        for report in args.slim:
            slim(report)
        return 0
    if args.status:
        return report_status()
    if args.check or args.strict:
        status = check()
        if args.strict:
            status |= report_status()
        if status == 0:
            print("every generated block agrees with its result file")
        return status
    changed = []
    for page in pages():
        if page.name == "changelog.md":
            continue
        new = regenerate(page)
        if new != page.read_text(encoding="utf-8"):
            page.write_text(new, encoding="utf-8")
            changed.append(str(page.relative_to(ROOT)))
    print("rewrote " + ", ".join(changed) if changed else "every page already agrees with its result files")
    for page in pages():
        for line, what in unbacked(page) if page.name != "changelog.md" else []:
            print(f"{page.relative_to(ROOT)}:{line}: '{what}' is a measurement outside a generated block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
