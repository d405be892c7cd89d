"""Reports of a ``dlpack-ref bench`` run: a plain-text table, Markdown, JSON
(the document of :func:`measure.measure`, whose schema is
``bench.schema.json``, shipped beside this module). Tables and escaping are
the harness's."""

from __future__ import annotations

import json
import os

from dlpack_ref.harness.output import grid, md_escape

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "bench.schema.json")
_SHORT = {"refused": "refused", "crashed": "CRASH", "error": "error", "not measured": "-"}


def ns_cell(record: dict | None, with_min: bool = True) -> str:
    """``median (min)`` of a timed record, or a word for why it was not."""
    if record is None:
        return "-"
    if record["status"] != "measured":
        return _SHORT.get(record["status"], record["status"])
    if not with_min:
        return f"{record['ns_median']:.0f}"
    return f"{record['ns_median']:.0f} ({record['ns_min']:.0f})"


def instructions_cell(record: dict | None) -> str:
    """A record's instructions per call, "-" when it was not counted."""
    if record is None or record.get("instructions") is None:
        return "-"
    return f"{record['instructions']:.0f}"


def matrix(doc: dict, cell, markdown: bool = True) -> str:
    """The producer x consumer table of a bench report, each pair drawn by ``cell``."""
    producers = [lib["name"] for lib in doc["libraries"] if lib["producer"]]
    consumers = [lib["name"] for lib in doc["libraries"] if lib["consumer"]]
    by_pair = {(p["producer"], p["consumer"]): p for p in doc["pairs"]}
    rows = [[p] + [cell(by_pair.get((p, c))) for c in consumers] for p in producers]
    return grid(["producer \\ consumer"] + consumers, rows, markdown)


def pair_cell(pair: dict | None) -> str:
    """A latency matrix cell: ``median (min)``, "copy" when the result is not
    the producer's memory, "(?)" when that could not be told."""
    text = ns_cell(pair)
    if pair is not None and pair["status"] == "measured" and pair["zero_copy"] is not True:
        text += " copy" if pair["zero_copy"] is False else " (?)"
    return text


def standing_lines(doc: dict) -> list[str]:
    """dlpack_ref against the best other library, a Markdown list item per
    comparison (none when there is nothing to compare)."""
    lines = []
    for side, other in (("as_consumer", "producer"), ("as_producer", "consumer")):
        for s in doc["dlpack_ref"][side]:
            if s["ratio"] is None:
                continue
            role = f"consumer of {s[other]} arrays" if other == "producer" else f"producer for {s[other]}"
            # judged on the ratio as printed: 1.004 and 0.996 both read 1.00x, a tie
            shown = round(s["ratio"], 2)
            verdict = "fastest" if shown < 1.0 else "tied with the fastest" if shown == 1.0 else "slower"
            lines.append(f"- dlpack_ref as {role}: {s['dlpack_ref_ns_median']:.0f} ns against "
                         f"{s['best_other']}'s {s['best_other_ns_median']:.0f} ns: {s['ratio']:.2f}x ({verdict})")
    return lines


def producer_rows(doc: dict, counted: bool = False) -> tuple[list[str], list[list[str]]]:
    header = ["producer", "exchange table", "__dlpack__()", "__dlpack_device__()", "import by table",
              "import by __dlpack__"]
    tables = {lib["name"]: lib["exchange_table"] for lib in doc["libraries"]}
    rows = []
    for m in doc["producers"]:
        table = tables.get(m["library"])
        cells = [m["dlpack"], m["dlpack_device"], m["import_by_table"],
                 m["import_by_dlpack"] if table else None]
        rows.append([m["library"], ".".join(map(str, table)) if table else "none"] + [ns_cell(r) for r in cells])
        if counted:
            rows[-1] += [instructions_cell(r) for r in cells]
    if counted:
        header += [f"{h} (instr.)" for h in header[2:]]
    return header, rows


def copy_rows(doc: dict, kind: str = "libraries") -> list[list[str]]:
    """The rows of a copies table of a bench report: memcpy first, then each
    library of ``doc["copies"][kind]`` (ms, GB/s, of memcpy, note)."""
    copies = doc["copies"]
    memcpy = copies["memcpy"]
    rows = []
    if memcpy["status"] == "measured":
        rows.append(["memcpy (this machine)", f"{memcpy['ns_median'] / 1e6:.2f}",
                     f"{copies['bytes'] / memcpy['ns_median']:.1f}", "1.00", ""])
    for c in copies[kind]:
        if c["status"] != "measured":
            rows.append([c["library"], "-", "-", "-", c["reason"] or c["status"]])
            continue
        notes = ["not a copy: the result is the source's memory"] if c["copied"] is False else []
        if c.get("ready_by") == "data pointer":
            notes.append("waited for by its data pointer (the result has no __dlpack__)")
        note = "; ".join(notes)
        rows.append([c["library"], f"{c['ns_median'] / 1e6:.2f}", f"{c['gb_per_s']:.1f}",
                     f"{c['of_memcpy']:.2f}" if c["of_memcpy"] is not None else "-", note])
    return rows


def _machine_lines(doc: dict) -> list[str]:
    m, env, s = doc["machine"], doc["environment"], doc["settings"]
    load = m["load_average"]
    versions = ", ".join(f"{lib['name']} {lib['version']}" for lib in doc["libraries"])
    lines = [f"- {m['cpu']}, {m['cores']} cores; load average {load['start'][0]:.2f} at the start, "
             f"{load['end'][0]:.2f} at the end",
             f"- Python {env['python']} ({env['platform']}); {versions}",
             f"- {'quick run: ' if s['quick'] else ''}{s['rounds']} rounds of {s['budget_s'] * 1000:g} ms per "
             f"latency case, {s['copy_rounds']} per copy"]
    lines += [f"- not benchmarked: {miss['name']} ({miss['reason']})" for miss in doc["missing"]]
    lines += [f"- warning: {note}" for note in doc["notes"]]
    return lines


def _problems(doc: dict) -> list[str]:
    lines = []
    for p in doc["pairs"]:
        if p["status"] not in ("measured", "not measured"):
            lines.append(f"- {p['producer']} -> {p['consumer']}: {p['reason']}")
    for m in doc["producers"]:
        for what in ("dlpack", "dlpack_device"):
            r = m[what]
            if r["status"] not in ("measured", "not measured"):
                lines.append(f"- {m['library']}.__{what}__(): {r['reason']}")
    return lines


def render(doc: dict, fmt: str = "table") -> str:
    """The report of a run in ``fmt``: ``table``, ``markdown`` or ``json``.

    Parameters
    ----------
    doc : dict
        What :func:`dlpack_ref.bench.measure.measure` returns.
    fmt : str
        ``"table"``, ``"markdown"`` or ``"json"``.

    Returns
    -------
    str
    """
    if fmt == "json":
        return json.dumps(doc, indent=2)
    md = fmt == "markdown"
    h = "## " if md else ""
    esc = md_escape if md else (lambda text: text)
    s = doc["settings"]
    shape = "x".join(map(str, s["array"]["shape"]))
    counted = any(p["instructions"] is not None for p in doc["pairs"])
    standings = standing_lines(doc) or ["- nothing to compare (dlpack_ref and at least one other library are needed)"]
    out = [esc(f"PARTIAL: {doc['partial']}; this report is not complete"), ""] if doc.get("partial") else []
    out += [f"{h}Exchange latency",
           esc(f"consumer.from_dlpack(x), x a {shape}-element {s['array']['dtype']} array of the producer, the "
               f"result dropped; ns per call, median (min) of {s['rounds']} interleaved rounds; \"copy\": the "
               f"result is not the producer's memory (pointers compared)."), "",
           matrix(doc, pair_cell, md), "",
           f"{h}dlpack_ref against the best other library (medians)", *[esc(x) for x in standings], ""]
    if counted:
        out += [f"{h}Instructions per call (callgrind)", matrix(doc, instructions_cell, md), ""]
    header, rows = producer_rows(doc, counted)
    out += [f"{h}Producer methods alone",
            esc("ns per call, median (min); where the producer's type publishes a C exchange table, "
                "dlpack_ref.from_dlpack(x) through it beside dlpack_ref.from_dlpack(x.__dlpack__(max_version=(1, 3))) "
                "(dlpack_ref's own arrays are aliased, not imported: no table figure)."),
            "", grid(header, rows, md), ""]
    out += [f"{h}copy=True of a {doc['copies']['bytes'] >> 20} MiB array",
            esc(f"library.from_dlpack(x, copy=True), x the library's own array, timed until the copy can be read "
                "(the result's own __dlpack__() has returned: a library that returns before its copy is made is "
                f"waited for); median of {s['copy_rounds']} rounds interleaved with memcpy of the same bytes (each "
                "after 20 ms of quiet)."), "",
            grid(["library", "ms", "GB/s", "of memcpy", "note"], copy_rows(doc), md), ""]
    if doc["copies"].get("from_numpy"):
        out += [f"{h}copy=True of the same {doc['copies']['bytes'] >> 20} MiB NumPy array",
                esc("library.from_dlpack(x, copy=True), x one NumPy array for every library: each consumer's "
                    "copy of the same source, timed the same way, in the same rounds."), "",
                grid(["library", "ms", "GB/s", "of memcpy", "note"], copy_rows(doc, "from_numpy"), md), ""]
    problems = _problems(doc)
    if problems:
        out += [f"{h}Not timed", *[esc(x) for x in problems], ""]
    out += [f"{h}Machine", *[esc(x) for x in _machine_lines(doc)]]
    return "\n".join(out)
