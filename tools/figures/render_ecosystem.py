"""The figures of dlpack-ref check: benchmarks/results/ecosystem_*.json."""

from __future__ import annotations

from dlpack_ref.conformance.ecosystem import cell
from dlpack_ref.harness.exchange import cell_text
from dlpack_ref.harness.output import md_escape

from figures.checkout import NoData, Source
from figures.formatting import grid

def _check(src: Source) -> dict:
    d = src.need()
    if "libraries" not in d or "exchange" not in d:
        raise NoData(f"`{src.path}` is not a JSON report of dlpack-ref check")
    return d


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
            cell(results[(n, rule)]) if (n, rule) in results else "-" for n in names] for rule in rules]))
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
