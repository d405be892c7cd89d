"""The figures of benchmarks/bench_copies.py: benchmarks/results/copies.json."""

from __future__ import annotations

import re

from dlpack_ref.bench.chart import format_ns

from figures import checkout
from figures.formatting import grid
from figures.provenance import run_line


def copies_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    s = d.get("settings")
    settings = (f"minimum over {s['rounds']} interleaved rounds, dlpack-ref on {s['threads']} threads"
                + (", with the 1 GiB copies" if s.get("big") else "")) if s else "the settings were not recorded"
    return run_line(src, settings)


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
    if chart and (checkout.ROOT / checkout.RESULTS / chart).exists():
        pic = f"![copies and conversions against the best reference](../{checkout.RESULTS}/{chart})"
    else:
        pic = "No chart of this run is committed (it ran without matplotlib, or before the chart was recorded)."
    return (f"{text}\n\n{table}\n\nPeak memory, (input + extra resident memory during the call) / "
            f"(input + output):\n\n{mem}\n\n{pic}")


def copies_instructions_run(sources, args) -> str:
    src = sources[0]
    s = src.need().get("settings") or {}
    return run_line(src, f"instructions counted over {s.get('loops', '?')} and {2 * s.get('loops', 0)} calls")


def copies_instructions(sources, args) -> str:
    """The 1 KiB own-copy cases in instructions per call: the figure the load
    does not move."""
    rows = sources[0].need()["rows"]
    body = [[r["case"], r["statements"]["dlpack_ref"], f"{r['instructions']['dlpack_ref']:,.0f}",
             r["statements"][r["reference"]], f"{r['instructions'][r['reference']]:,.0f}", f"{r['ratio']:.2f}",
             f"<= {r['limit']}"] for r in rows]
    table = grid(["case", "call", "instructions", "reference", "instructions", "ratio", "target"], body)
    return "\n".join(_case_as_code(line) for line in table.splitlines())


def _case_as_code(line: str) -> str:
    """A table row whose first cell is written as code (its escapes undone)."""
    if not line.startswith("| ") or line.startswith("| case |"):
        return line
    first, sep, rest = line[2:].partition(" | ")
    plain = re.sub(r"\\(.)", r"\1", first)
    return f"| `{plain}` | {rest}" if sep else line
