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
import difflib
import json
import sys
from pathlib import Path

# The figures' modules (tools/figures/), whether this file runs as a script or
# is loaded by a test from its path.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import checkout, lint  # noqa: E402
from figures.checkout import FILES, pages, source, use_root  # noqa: E402, F401
from figures.findings import stale_findings  # noqa: E402
from figures.markers import blocks_of, regenerate  # noqa: E402
from figures.render_ecosystem import ecosystem_exchange, ecosystem_rules, ecosystem_summary  # noqa: E402, F401
from figures.status import needs_run, report_status  # noqa: E402, F401

# Numbers with the units of a measurement (tools/figures/lint.py) that are
# settings, limits or goals, not measurements: (page, the words around them).
# Each is matched as written.
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
        "when nobody opens it within 5 seconds",
        "a task hangs for 60 s",
        "than 60 s (killed)",
    ],
    "contributing.md": ["waits, up to 5 minutes, for the 1-minute load average"],
    "cuda.md": ["goal >= 95%", "goal <= 1.0x"],
    "guarantees.md": [
        "polls for the next one for 200 µs",
    ],
}


def stale_settings() -> list[str]:
    """SETTINGS phrases their page no longer has (an allowance nothing needs)."""
    return lint.stale_settings(SETTINGS)


def check(out=sys.stdout) -> int:
    """1 when a page differs from its files or quotes a measurement outside the blocks."""
    status = 0
    for page in pages():
        if page.name == "changelog.md":   # a log of changes, figures of their day
            continue
        rel = page.relative_to(checkout.ROOT)
        for b in blocks_of(page):
            if b.body != b.rendered:
                status = 1
                print(f"{rel}:{b.line}: block '{b.spec}' differs from its file(s); "
                      "run `python tools/docs_figures.py`:", file=out)
                diff = difflib.unified_diff(b.body.splitlines(), b.rendered.splitlines(), "page", "files",
                                            lineterm="", n=1)
                for line in list(diff)[:40]:
                    print("    " + line, file=out)
        for line, what in lint.unbacked(page, SETTINGS):
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
    p.add_argument("--root", type=Path, default=checkout.ROOT,
                   help="the checkout whose docs/ and results (default: this one)")
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
            changed.append(str(page.relative_to(checkout.ROOT)))
    print("rewrote " + ", ".join(changed) if changed else "every page already agrees with its result files")
    for page in pages():
        for line, what in lint.unbacked(page, SETTINGS) if page.name != "changelog.md" else []:
            print(f"{page.relative_to(checkout.ROOT)}:{line}: '{what}' is a measurement outside a generated block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
