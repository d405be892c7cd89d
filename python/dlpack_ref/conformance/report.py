"""Reports of a conformance run: a plain-text table, Markdown, JSON."""

from __future__ import annotations

import json

from ._result import Result, Status
from .exchange import cell_text

_MARK = {Status.PASS: "ok", Status.FAIL: "FAIL", Status.NOT_SUPPORTED: "n/s", Status.ERROR: "ERR"}


def _grid(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*r) for r in rows])


def _check_grid(results: dict[str, list[Result]], markdown: bool) -> str:
    libs = list(results)
    order: list[str] = []
    for rs in results.values():
        for r in rs:
            if r.rule.id not in order:
                order.append(r.rule.id)
    cells = {(lib, r.rule.id): _MARK[r.status] for lib, rs in results.items() for r in rs}
    rows = [[cid] + [cells.get((lib, cid), "-") for lib in libs] for cid in order]
    return _grid(["check"] + libs, rows, markdown)


def _findings(results: dict[str, list[Result]]) -> list[str]:
    lines = []
    for lib, rs in results.items():
        for r in rs:
            if r.status in (Status.FAIL, Status.ERROR):
                lines.append(f"- {lib} {r.rule.id} [{r.status.value}]: {r.detail}"
                             + (f" -- observed {r.exc_type}: {r.exc_message}" if r.exc_type else "")
                             + f"  (rule: {r.rule.text}; {r.rule.citation()})")
    return lines


def render(run: dict, fmt: str = "table") -> str:
    """``run``: {"versions": {lib: version}, "producer": {lib: [Result]},
    "consumer": {lib: [Result]}, "matrix": {(producer, consumer): cell}}."""
    if fmt == "json":
        return json.dumps({
            "versions": run["versions"],
            "producer": {lib: [r.to_dict() for r in rs] for lib, rs in run["producer"].items()},
            "consumer": {lib: [r.to_dict() for r in rs] for lib, rs in run["consumer"].items()},
            "exchange": [{"producer": p, "consumer": c, **cell} for (p, c), cell in run["matrix"].items()],
        }, indent=2, default=str)
    md = fmt == "markdown"
    h = "## " if md else ""
    out = [f"{h}Libraries", ", ".join(f"{k} {v}" for k, v in run["versions"].items()), ""]
    out += [f"{h}Producer checks (ok = pass, FAIL, n/s = not supported, ERR = could not run)",
            _check_grid(run["producer"], md), ""]
    out += [f"{h}Consumer checks", _check_grid(run["consumer"], md), ""]
    if run["matrix"]:
        producers = sorted({p for p, _ in run["matrix"]}, key=list(run["versions"]).index)
        consumers = sorted({c for _, c in run["matrix"]}, key=list(run["versions"]).index)
        rows = [[p] + [cell_text(run["matrix"].get((p, c), {"works": False})) for c in consumers]
                for p in producers]
        out += [f"{h}Exchange matrix (rows: producer, columns: consumer's from_dlpack)",
                _grid(["producer \\ consumer"] + consumers, rows, md), ""]
    findings = _findings(run["producer"]) + _findings(run["consumer"])
    out += [f"{h}Failures", *(findings or ["none"])]
    return "\n".join(out)
