"""The ecosystem table: every library's result per rule, from a JSON report
of ``dlpack-ref check``, as Markdown (the table of docs/ecosystem.md)::

    python -m dlpack_ref check --format json > report.json
    python -m dlpack_ref.conformance.ecosystem report.json > table.md

A cell is ``ok``, ``FAIL``, ``CRASH`` (the library killed the process),
``n/s`` (not supported: the library lacks what the rule needs) or ``ERR``
(the checker could not run the rule); the CUDA rules are left out when no
library ran one."""

from __future__ import annotations

import argparse
import json
import sys

from dlpack_ref.harness.exchange import cell_text
from dlpack_ref.harness.output import grid, md_escape

_MARK = {"pass": "ok", "fail": "FAIL", "not supported": "n/s", "error": "ERR"}


def cell(result: dict) -> str:
    """The mark of one result: a crash is named with its signal."""
    crash = result.get("crash")
    return f"CRASH ({crash})" if crash else _MARK[result["status"]]


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """The Markdown lines of a table (cells escaped by the report's grid)."""
    return grid(header, rows, markdown=True).splitlines()


def table(report: dict) -> str:
    """The Markdown table of ``report`` (a parsed JSON report), with the
    versions, the date and the interpreter it was made with."""
    checked = [lib for lib in report["libraries"] if lib["checked"]]
    results = {(lib["name"], r["check"]): r for lib in checked for r in lib["results"]}
    rules = list(dict.fromkeys(r["check"] for lib in checked for r in lib["results"]))
    ran_cuda = any(r["status"] != "not supported" for (_, rule), r in results.items() if rule.startswith("cuda."))
    rules = [rule for rule in rules if ran_cuda or not rule.startswith("cuda.")]
    env = report["environment"]
    out = [f"Made on {report.get('date', '(no date)')} with dlpack-ref {report['tool']['version']}, "
           f"{env['implementation']} {env['python']} on {env['machine']} ({env['platform']}).", ""]
    out += _grid(["library", "version", "pass", "fail", "not supported", "error"],
                 [[lib["name"], lib["version"] or ""] +
                  [str(lib["summary"][k]) for k in ("pass", "fail", "not supported", "error")] for lib in checked])
    missing = [f"{lib['name']} ({lib['note']})" for lib in report["libraries"] if not lib["checked"]]
    if missing:
        out += ["", "Not checked: " + md_escape(", ".join(missing)) + "."]
    names = [lib["name"] for lib in checked]
    out += ["", *_grid(["rule"] + names,
                       [[rule] + [cell(results[(n, rule)]) if (n, rule) in results else "-" for n in names]
                        for rule in rules])]
    cells = {(c["producer"], c["consumer"]): c for c in report.get("exchange", [])}
    if cells:
        # a producer-only library has no column, a consumer-only one no row
        tried = {pair for pair, cell in cells.items() if cell.get("works") or cell.get("exc_type") or "crashed" in cell}
        consumers = [n for n in names if any(c == n for _, c in tried)]
        producers = [n for n in names if any(p == n for p, _ in tried)]
        out += ["", "Exchange matrix (rows: producer, columns: consumer):", "",
                *_grid(["producer \\ consumer"] + consumers,
                       [[p] + [cell_text(cells[(p, c)]) if (p, c) in cells else "-" for c in consumers]
                        for p in producers])]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    """``python -m dlpack_ref.conformance.ecosystem REPORT.json``: the table on stdout."""
    parser = argparse.ArgumentParser(prog="python -m dlpack_ref.conformance.ecosystem",
                                     description="The Markdown table of a JSON report of dlpack-ref check.")
    parser.add_argument("report", help="a JSON report (dlpack-ref check --format json); - for stdin")
    args = parser.parse_args(argv)
    with (sys.stdin if args.report == "-" else open(args.report, encoding="utf-8")) as f:
        print(table(json.load(f)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
