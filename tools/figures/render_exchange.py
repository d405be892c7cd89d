"""The figures of dlpack-ref bench: benchmarks/results/exchange.json."""

from __future__ import annotations

from dlpack_ref.bench.report import (
    copy_rows,
    instructions_cell,
    matrix,
    pair_cell,
    producer_rows,
    standing_lines,
)
from dlpack_ref.harness.output import md_escape

from figures.checkout import NoData, Source
from figures.formatting import format_bytes, grid
from figures.provenance import machine_text


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
            f"{env['implementation']} {env['python']}, {md_escape(versions)}; {machine_text(d['machine'])}; "
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
    # Runs before copies were timed until they could be read carry no ready_by.
    completed = any("ready_by" in c for kind in ("libraries", "from_numpy") for c in d["copies"].get(kind) or [])
    until = ("timed until the copy can be read (its own `__dlpack__()` returned)" if completed else
             "timed to the return of the call only (a run made before copies were timed until they can be read: "
             "a library that returns before its copy is made shows faster than it is)")
    out = (f"`library.from_dlpack(x, copy=True)` of a {size} array of the library's own, {until}, median of "
           f"{rounds} rounds:\n\n" + grid(header, copy_rows(d, "libraries")))
    if d["copies"].get("from_numpy"):
        out += (f"\n\n`library.from_dlpack(x, copy=True)` of one {size} NumPy array, the same source for every "
                f"library, timed the same way, median of {rounds} rounds:\n\n"
                + grid(header, copy_rows(d, "from_numpy")))
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
