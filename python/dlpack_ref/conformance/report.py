"""Reports of a conformance run: a plain-text table, Markdown, JSON (whose
schema is ``report.schema.json``, shipped beside this module)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re

from dlpack_ref.harness.exchange import CELL_LEGEND, cell_reason, cell_text
from dlpack_ref.harness.observe import short
from dlpack_ref.harness.output import environment, grid, md_escape, tool

from .gate import Allowance, AllowList
from .model import Result, Status
from .reproduce import reproducible, reproduction

#: Bumped when a field of the JSON report changes meaning or goes away.
SCHEMA_VERSION = 1
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "report.schema.json")
_MARK = {Status.PASS: "ok", Status.FAIL: "FAIL", Status.NOT_SUPPORTED: "n/s", Status.ERROR: "ERR"}
_LINE_LIMIT = 200
#: The most characters a Markdown report takes with its folded
#: reproductions: a pull-request comment holds 65,536, and a workflow may
#: add a heading. Reproductions past it are named, not folded in.
MARKDOWN_LIMIT = 60_000


#: Every word of a check grid, and what it means (the grids' legend).
CHECK_LEGEND = {
    "ok": "pass",
    "FAIL": "broken (see Failures)",
    "CRASH (SIG)": "the library killed the process with signal SIG",
    "ERR": "the check could not run",
    "n/s": "not supported (see Not supported)",
    "(allowed)": "a failure the allowances accept",
    "-": "not run",
}


def legend(words: dict[str, str], markdown: bool) -> str:
    """A table's legend: each word it can show and what it means, on one line."""
    text = "; ".join(f"{word} = {meaning}" for word, meaning in words.items())
    return "Legend: " + (md_escape(text) if markdown else text)


def mark(result: Result) -> str:
    """A result's cell in a grid: ``ok``, ``FAIL``, ``CRASH (SIGSEGV)``, ``n/s``, ``ERR``."""
    return f"CRASH ({result.crash})" if result.crash else _MARK[result.status]


@dataclasses.dataclass
class LibraryRun:
    """One checked library: its name (a hook's Producer or Consumer name,
    else the spec it was checked by), its results, and a note (e.g. "no GPU")."""

    name: str
    version: str
    results: list[Result]
    note: str = ""
    adapter: str = "known"


@dataclasses.dataclass
class Run:
    """Everything a report shows: the libraries checked, those not
    installed, those that could not be checked (with why), the exchange
    matrix, the gate's allowances and verdict, and the command that shows a
    rule's reproduction."""

    libraries: dict[str, LibraryRun]
    not_installed: list[str]
    unavailable: dict[str, str]
    matrix: dict[tuple[str, str], dict]
    allow: AllowList
    fail_on: list[str] | None
    blocking: list[Result]
    requested_missing: list[str]
    exit_status: int
    explain_command: str = "python -m dlpack_ref check --library LIBRARY --explain RULE"
    #: Why the run is not complete (a signal stopped it), with what it did; None when complete.
    partial: str | None = None
    #: allowances for rules that every library they name now passes
    stale: list[Allowance] = dataclasses.field(default_factory=list)

    def label(self, lib: str) -> str:
        """How reports name a library: its name, with the spec it was
        checked by when a hook named it otherwise (``my-lib (mymod)``)."""
        name = self.libraries[lib].name if lib in self.libraries else lib
        return name if name == lib else f"{name} ({lib})"

    def counts(self, lib: str) -> dict[str, int]:
        """Results of one library per status, and how many failures are allowed."""
        rs = self.libraries[lib].results
        counts = {s.value: sum(r.status is s for r in rs) for s in Status}
        counts["allowed"] = sum(r.failed and self.allow.reason(lib, r.rule.id) is not None for r in rs)
        return counts


def _check_grid(run: Run, prefix: str, markdown: bool) -> str:
    libs = list(run.libraries)
    order: list[str] = []
    cells = {}
    for lib, lr in run.libraries.items():
        for r in lr.results:
            if r.rule.id.startswith(prefix):
                if r.rule.id not in order:
                    order.append(r.rule.id)
                cell = mark(r)
                if r.failed and run.allow.reason(lib, r.rule.id) is not None:
                    cell += " (allowed)"
                cells[(lib, r.rule.id)] = cell
    rows = [[cid] + [cells.get((lib, cid), "-") for lib in libs] for cid in order]
    return grid(["check"] + [run.label(lib) for lib in libs], rows, markdown)


def _failure_lines(run: Run, markdown: bool) -> list[str]:
    esc = md_escape if markdown else (lambda s: s)
    lines, rules = [], {}
    for lib, lr in run.libraries.items():
        for r in lr.results:
            if not r.failed:
                continue
            rules.setdefault(r.rule.id, r.rule)
            allowed = run.allow.reason(lib, r.rule.id)
            text = r.line(_LINE_LIMIT) + (f" [allowed: {allowed}]" if allowed else "")
            lines.append("- " + esc(short(text, _LINE_LIMIT - 2)))
    lines += _matrix_lines(run, markdown, unjudged=False)
    if not lines:
        return ["none"]
    if not rules:
        return lines
    lines += ["", "Rules broken above:"]
    lines += [f"- {esc(rule.id)}: {esc(rule.text)} ({esc(rule.citation())})" for rule in rules.values()]
    return lines


def _matrix_cells(run: Run) -> list[tuple[str, str, dict]]:
    """The matrix's cells as a report shows them, a missing one as no exchange."""
    libs = list(run.libraries)
    producers = [p for p in libs if any(k[0] == p for k in run.matrix)]
    consumers = [c for c in libs if any(k[1] == c for k in run.matrix)]
    return [(p, c, run.matrix.get((p, c), {"works": False})) for p in producers for c in consumers]


#: The matrix words whose line goes under Not supported (the others, but
#: an exchange that works, under Failures).
_UNJUDGED_CELLS = ("n/s", "n/a", "ok (?)")


def _matrix_lines(run: Run, markdown: bool, unjudged: bool) -> list[str]:
    """A line for each matrix cell that is not an exchange that works:
    those not judged (``unjudged``) or the others."""
    esc = md_escape if markdown else (lambda s: s)
    lines = []
    for p, c, cell in _matrix_cells(run):
        reason = cell_reason(cell)
        if reason is not None and (cell_text(cell) in _UNJUDGED_CELLS) == unjudged:
            lines.append("- " + esc(short(f"[exchange] {p} -> {c}: {cell_text(cell)}: {reason}", _LINE_LIMIT)))
    return lines


def _not_supported_lines(run: Run, markdown: bool) -> list[str]:
    """A line for each reason a rule was not supported (the rules that share
    it named together), and for each matrix cell not judged."""
    esc = md_escape if markdown else (lambda s: s)
    grouped: dict[tuple[str, str], list[str]] = {}
    for lib, lr in run.libraries.items():
        for r in lr.results:
            if r.status is Status.NOT_SUPPORTED:
                grouped.setdefault((lib, r.detail), []).append(r.rule.id)
    lines = []
    for (lib, detail), rules in grouped.items():
        named = ", ".join(rules) if len(rules) <= 3 else f"{', '.join(rules[:2])} and {len(rules) - 2} more"
        lines.append("- " + esc(short(f"[not supported] {lib}: {named}: {detail}", _LINE_LIMIT)))
    lines += _matrix_lines(run, markdown, unjudged=True)
    return lines or ["none"]


def _summary_lines(run: Run, markdown: bool) -> list[str]:
    esc = md_escape if markdown else (lambda s: s)
    lines = []
    for lib, lr in run.libraries.items():
        c = run.counts(lib)
        text = (f"{run.label(lib)} {lr.version}: {c['pass']} pass, {c['fail']} fail, {c['error']} error, "
                f"{c['not supported']} not supported; {c['allowed']} of the failures allowed")
        if lr.note:
            text += f" ({lr.note})"
        lines.append("- " + esc(text))
    for lib, why in run.unavailable.items():
        lines.append("- " + esc(f"{lib}: not checked: {why}"))
    if run.not_installed:
        lines.append("- " + esc("not installed: " + ", ".join(run.not_installed)))
    return lines


def _stale_lines(run: Run, markdown: bool) -> list[str]:
    esc = md_escape if markdown else (lambda s: s)
    return ["- " + esc(short(f"{a.library} {a.rule} ({a.origin}): {a.reason}", _LINE_LIMIT - 2)) for a in run.stale]


def _gate_line(run: Run) -> str:
    if run.partial:
        return f"PARTIAL (exit status {run.exit_status}): {run.partial}; this report is not complete"
    scope = "every checked library" if run.fail_on is None else ", ".join(run.fail_on)
    if run.exit_status == 0:
        return f"pass (exit status 0): no failure that is not allowed in {scope}"
    why = [f"{len(run.blocking)} failure(s) not allowed in {scope}"] if run.blocking else []
    if run.requested_missing:
        why.append("asked for and not checked: " + ", ".join(run.requested_missing))
    return f"FAIL (exit status {run.exit_status}): {'; '.join(why)}"


def _next_step(run: Run) -> list[str]:
    """What a reader of a failing run does next: see a rule's reproduction."""
    failed = [(lib, r.rule.id) for lib, lr in run.libraries.items() for r in lr.results if r.status is Status.FAIL]
    if not failed:
        return []
    lib, rule = failed[0]
    return [f"Each failure has a reproduction, Python that shows it with its library alone: "
            f"{run.explain_command.replace('LIBRARY', lib).replace('RULE', rule)} prints one as a file "
            "that runs (the JSON report carries them all, --repro-dir DIR writes them as files)."]


def render(run: Run, fmt: str = "table", repro_files: dict[tuple[str, str], str] | None = None) -> str:
    """The report in ``fmt``: ``table``, ``markdown`` or ``json``.

    ``repro_files``: (library, rule id) -> the file holding that failure's
    reproduction (:func:`write_reproductions`), which a Markdown or table
    report names instead of folding the reproduction in. Without them a
    Markdown report folds in the reproductions that keep it within
    :data:`MARKDOWN_LIMIT` characters and names the command that prints
    each of the others.
    """
    if fmt == "json":
        return json.dumps(to_json(run), indent=2, default=str)
    md = fmt == "markdown"
    h = "## " if md else ""
    esc = md_escape if md else (lambda s: s)
    out = [esc(f"PARTIAL: {run.partial}; this report is not complete"), ""] if run.partial else []
    out += [f"{h}Libraries", *_summary_lines(run, md), ""]
    check_legend = legend(CHECK_LEGEND, md)
    out += [f"{h}Producer checks", _check_grid(run, "producer.", md), check_legend, ""]
    out += [f"{h}Consumer checks", _check_grid(run, "consumer.", md), check_legend, ""]
    if any(r.rule.id.startswith("cuda.") for lr in run.libraries.values() for r in lr.results):
        out += [f"{h}CUDA checks (n/s: no CUDA device here, or the library cannot make what the check needs)",
                _check_grid(run, "cuda.", md), check_legend, ""]
    if run.matrix:
        cells = _matrix_cells(run)
        producers = list(dict.fromkeys(p for p, _, _ in cells))
        consumers = list(dict.fromkeys(c for _, c, _ in cells))
        rows = [[p] + [cell_text(cell) for q, _, cell in cells if q == p] for p in producers]
        out += [f"{h}Exchange matrix (rows: producer, columns: consumer's from_dlpack)",
                grid(["producer \\ consumer"] + consumers, rows, md), legend(CELL_LEGEND, md), ""]
    out += [f"{h}Failures", *_failure_lines(run, md), ""]
    out += [f"{h}Not supported", *_not_supported_lines(run, md), ""]
    if run.stale:
        out += [f"{h}Stale allowances (the rules they allow now pass: remove them)", *_stale_lines(run, md), ""]
    after = [f"{h}Gate", esc(_gate_line(run))]
    next_step = _next_step(run)
    if next_step:
        after += ["", *[esc(line) for line in next_step]]
    if repro_files is not None:
        out += _reproduction_files(repro_files, md)
    elif md:
        room = MARKDOWN_LIMIT - len("\n".join(out + after)) - 1
        out += _reproduction_blocks(run, room)
    return "\n".join(out + after)


def _failures(run: Run) -> list[tuple[str, Result, str]]:
    """(library, result, adapter) of each failure with a reproduction, in report order."""
    return [(lib, r, lr.adapter) for lib, lr in run.libraries.items() for r in lr.results
            if reproducible(r, lr.adapter)]


def _reproduction_blocks(run: Run, room: int) -> list[str]:
    """Each failure's reproduction folded (Markdown ``<details>``), in
    report order while they and the lines naming the rest take at most
    ``room`` characters; for each of the others, the command that prints it."""
    found = _failures(run)
    if not found:
        return []
    heading = ["## Reproductions (each runs with its library alone: python repro.py)", ""]
    note = md_escape(f"Not folded in, to keep this report within {MARKDOWN_LIMIT:,} characters (a pull-request "
                     "comment holds 65,536): each command prints its reproduction, and --repro-dir DIR writes "
                     "every one as a file.")
    named = [md_escape(f"- {lib}: {r.rule.id}: "
                       f"{run.explain_command.replace('LIBRARY', lib).replace('RULE', r.rule.id)}")
             for lib, r, _ in found]
    blocks: list[str] = []
    folded = 0
    for lib, r, adapter in found:
        block = [f"<details><summary>{md_escape(run.label(lib))}: {md_escape(r.rule.id)}</summary>", "",
                 "```python", reproduction(lib, r, adapter).rstrip(), "```", "</details>", ""]
        rest = named[folded + 1:]
        if len("\n".join(heading + blocks + block + ([note, "", *rest, ""] if rest else []))) > room:
            break
        blocks += block
        folded += 1
    if folded < len(found):
        blocks += [note, "", *named[folded:], ""]
    return heading + blocks


def _reproduction_files(files: dict[tuple[str, str], str], markdown: bool) -> list[str]:
    """The files holding the reproductions, one line each."""
    if not files:
        return []
    h, esc = ("## ", md_escape) if markdown else ("", lambda s: s)
    return [f"{h}Reproductions (each runs with its library alone: python FILE)",
            *[esc(f"- {lib}: {rule}: {path}") for (lib, rule), path in files.items()], ""]


def write_reproductions(run: Run, folder: str) -> dict[tuple[str, str], str]:
    """Each failure's reproduction written in ``folder`` as
    ``LIBRARY.RULE.py`` (characters a file name cannot hold made ``_``);
    returns (library, rule id) -> its path."""
    paths: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    os.makedirs(folder, exist_ok=True)
    for lib, r, adapter in _failures(run):
        rule, source = r.rule.id, reproduction(lib, r, adapter)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{lib}.{rule}")
        name, n = f"{stem}.py", 1
        while name in taken:
            n += 1
            name = f"{stem}.{n}.py"
        taken.add(name)
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        paths[(lib, rule)] = path
    return paths


def to_json(run: Run) -> dict:
    """The JSON report (see report.schema.json)."""
    libraries = []
    for lib, lr in run.libraries.items():
        results = [{**r.to_dict(), "crash": r.crash, "allowed": run.allow.reason(lib, r.rule.id) if r.failed else None,
                    "reproduction": reproduction(lib, r, lr.adapter)} for r in lr.results]
        libraries.append({"name": lr.name, "spec": lib, "version": lr.version, "checked": True, "note": lr.note,
                          "summary": run.counts(lib), "results": results})
    for lib, why in run.unavailable.items():
        libraries.append({"name": lib, "version": None, "checked": False, "note": why,
                          "summary": None, "results": []})
    for lib in run.not_installed:
        libraries.append({"name": lib, "version": None, "checked": False, "note": "not installed",
                          "summary": None, "results": []})
    return {
        "schema_version": SCHEMA_VERSION,
        "partial": run.partial,
        "date": datetime.date.today().isoformat(),
        "tool": tool(),
        "environment": environment(),
        "libraries": libraries,
        "exchange": [{"producer": p, "consumer": c, **cell} for (p, c), cell in run.matrix.items()],
        "gate": {"exit_status": run.exit_status, "fail_on": run.fail_on,
                 "blocking": [{"library": r.subject, "check": r.rule.id} for r in run.blocking],
                 "stale_allowances": [{"library": a.library, "rule": a.rule, "reason": a.reason, "where": a.origin}
                                      for a in run.stale]},
    }
