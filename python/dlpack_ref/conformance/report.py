"""Reports of a conformance run: a plain-text table, Markdown, JSON (whose
schema is ``report.schema.json``, shipped beside this module)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys

import dlpack_ref

from .exchange_matrix import cell_text
from .gate import AllowList
from .model import Result, Status
from .reproduce import reproduction

#: Bumped when a field of the JSON report changes meaning or goes away.
SCHEMA_VERSION = 1
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "report.schema.json")
_MARK = {Status.PASS: "ok", Status.FAIL: "FAIL", Status.NOT_SUPPORTED: "n/s", Status.ERROR: "ERR"}
_LINE_LIMIT = 200


@dataclasses.dataclass
class LibraryRun:
    """One checked library: its results, and a note (e.g. "no GPU")."""

    name: str
    version: str
    results: list[Result]
    note: str = ""


@dataclasses.dataclass
class Run:
    """Everything a report shows."""

    libraries: dict[str, LibraryRun]
    missing: dict[str, str]  # library -> why it was not checked
    matrix: dict[tuple[str, str], dict]
    allow: AllowList
    fail_on: list[str] | None
    blocking: list[Result]
    exit_status: int

    def counts(self, lib: str) -> dict[str, int]:
        """Results of one library per status, and how many failures are allowed."""
        rs = self.libraries[lib].results
        counts = {s.value: sum(r.status is s for r in rs) for s in Status}
        counts["allowed"] = sum(r.failed and self.allow.reason(lib, r.rule.id) is not None for r in rs)
        return counts


def md_escape(text: str) -> str:
    """Text that Markdown shows as written (``__dlpack__`` is not bold)."""
    for ch in "\\`*_{}[]<>#|":
        text = text.replace(ch, "\\" + ch)
    return text


def grid(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    """Rows under a header: a Markdown table, or plain text in aligned columns."""
    if markdown:
        lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*r) for r in rows])


def _check_grid(run: Run, prefix: str, markdown: bool) -> str:
    libs = list(run.libraries)
    order: list[str] = []
    cells = {}
    for lib, lr in run.libraries.items():
        for r in lr.results:
            if r.rule.id.startswith(prefix):
                if r.rule.id not in order:
                    order.append(r.rule.id)
                mark = _MARK[r.status]
                if r.failed and run.allow.reason(lib, r.rule.id) is not None:
                    mark += " (allowed)"
                cells[(lib, r.rule.id)] = mark
    rows = [[cid] + [cells.get((lib, cid), "-") for lib in libs] for cid in order]
    return grid(["check"] + libs, rows, markdown)


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
            lines.append("- " + esc(text))
    if not lines:
        return ["none"]
    lines += ["", "Rules broken above:"]
    lines += [f"- {esc(rule.id)}: {esc(rule.text)} ({esc(rule.citation())})" for rule in rules.values()]
    return lines


def _summary_lines(run: Run, markdown: bool) -> list[str]:
    esc = md_escape if markdown else (lambda s: s)
    lines = []
    for lib, lr in run.libraries.items():
        c = run.counts(lib)
        text = (f"{lib} {lr.version}: {c['pass']} pass, {c['fail']} fail, {c['error']} error, "
                f"{c['not supported']} not supported; {c['allowed']} of the failures allowed")
        if lr.note:
            text += f" ({lr.note})"
        lines.append("- " + esc(text))
    for lib, why in run.missing.items():
        lines.append("- " + esc(f"{lib}: not checked ({why})"))
    return lines


def _gate_line(run: Run) -> str:
    scope = "every checked library" if run.fail_on is None else ", ".join(run.fail_on)
    if run.exit_status == 0:
        return f"pass (exit status 0): no failure that is not allowed in {scope}"
    why = f"{len(run.blocking)} failure(s) not allowed in {scope}" if run.blocking else ""
    if run.missing and any(lib in run.missing for lib in (run.fail_on or run.missing)):
        why = "; ".join(filter(None, [why, "a requested library is missing"]))
    return f"FAIL (exit status {run.exit_status}): {why}"


def render(run: Run, fmt: str = "table") -> str:
    """The report in ``fmt``: ``table``, ``markdown`` or ``json``."""
    if fmt == "json":
        return json.dumps(to_json(run), indent=2, default=str)
    md = fmt == "markdown"
    h = "## " if md else ""
    esc = md_escape if md else (lambda s: s)
    out = [f"{h}Libraries", *_summary_lines(run, md), ""]
    out += [f"{h}Producer checks (ok = pass, FAIL, n/s = not supported, ERR = could not run)",
            _check_grid(run, "producer.", md), ""]
    out += [f"{h}Consumer checks", _check_grid(run, "consumer.", md), ""]
    if any(r.rule.id.startswith("cuda.") for lr in run.libraries.values() for r in lr.results):
        out += [f"{h}CUDA checks (n/s: no CUDA device here, or the library cannot make what the check needs)",
                _check_grid(run, "cuda.", md), ""]
    if run.matrix:
        libs = list(run.libraries)
        producers = [p for p in libs if any(k[0] == p for k in run.matrix)]
        consumers = [c for c in libs if any(k[1] == c for k in run.matrix)]
        rows = [[p] + [cell_text(run.matrix.get((p, c), {"works": False})) for c in consumers] for p in producers]
        out += [f"{h}Exchange matrix (rows: producer, columns: consumer's from_dlpack)",
                grid(["producer \\ consumer"] + consumers, rows, md), ""]
    out += [f"{h}Failures", *_failure_lines(run, md), ""]
    if md:
        out += _reproduction_blocks(run)
    out += [f"{h}Gate", esc(_gate_line(run))]
    return "\n".join(out)


def tool() -> dict:
    """This tool's name and version, and the DLPack version it implements, for reports."""
    return {"name": "dlpack-ref", "version": dlpack_ref.__version__, "dlpack_version": list(dlpack_ref.DLPACK_VERSION)}


def _reproduction_blocks(run: Run) -> list[str]:
    """Each failure's reproduction, folded (Markdown ``<details>``)."""
    blocks = []
    for lib, lr in run.libraries.items():
        for r in lr.results:
            source = reproduction(lib, r)
            if source is not None:
                blocks += [f"<details><summary>{md_escape(lib)}: {md_escape(r.rule.id)}</summary>", "",
                           "```python", source.rstrip(), "```", "</details>", ""]
    if not blocks:
        return []
    return ["## Reproductions (each runs with its library alone: python repro.py)", "", *blocks]


def environment() -> dict:
    """Python and platform, for reports."""
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "machine": platform.machine(), "executable": sys.executable}


def to_json(run: Run) -> dict:
    """The JSON report (see report.schema.json)."""
    libraries = []
    for lib, lr in run.libraries.items():
        results = [{**r.to_dict(), "allowed": run.allow.reason(lib, r.rule.id) if r.failed else None,
                    "reproduction": reproduction(lib, r)} for r in lr.results]
        libraries.append({"name": lib, "version": lr.version, "checked": True, "note": lr.note,
                          "summary": run.counts(lib), "results": results})
    for lib, why in run.missing.items():
        libraries.append({"name": lib, "version": None, "checked": False, "note": why,
                          "summary": None, "results": []})
    return {
        "schema_version": SCHEMA_VERSION,
        "date": datetime.date.today().isoformat(),
        "tool": tool(),
        "environment": environment(),
        "libraries": libraries,
        "exchange": [{"producer": p, "consumer": c, **cell} for (p, c), cell in run.matrix.items()],
        "gate": {"exit_status": run.exit_status, "fail_on": run.fail_on,
                 "blocking": [{"library": r.subject, "check": r.rule.id} for r in run.blocking]},
    }
