"""The figures of benchmarks/pool_threshold.py: benchmarks/results/pool_threshold.json."""

from __future__ import annotations

from figures.formatting import format_bytes
from figures.provenance import run_line


def pool_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    s = d.get("settings")
    sweeps = "1 sweep" if s and s["runs"] == 1 else f"{s['runs'] if s else 0} sweeps"
    settings = (f"split in {s['threads']}, {sweeps} of {s['rounds']} interleaved rounds each"
                if s else "the settings were not recorded")
    return run_line(src, settings)


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
