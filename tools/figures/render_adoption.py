"""The figures of a real library moved onto the header: benchmarks/results/adoption_producer.json."""

from __future__ import annotations

from figures.provenance import run_line


def adoption_producer_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    st = d.get("settings", {})
    return run_line(src, f"instructions per call over {st.get('loops')} and {2 * st.get('loops', 0)} calls "
                         "(counts do not move with the load)")


def adoption_producer_table(sources, args) -> str:
    rows = [r for r in sources[0].need()["rows"] if "instructions" in r]
    if not rows:
        return "The run counted no instructions (valgrind was missing)."
    lines = ["| call, 16 float32 | numkong released | numkong adopted | adopted / released | NumPy's ndarray |",
             "|---|---|---|---|---|"]
    for r in rows:
        n = r["instructions"]
        lines.append(f"| `{r['call']}` | {n['released']:.0f} | {n['adopted']:.0f} | {r['instruction_ratio']:.2f} "
                     f"| {n['ndarray']:.0f} |")
    over = [r["call"] for r in rows if r["instruction_ratio"] > 1.0]
    verdict = ("adopted at most released on every call" if not over
               else "adopted over released on: " + ", ".join(f"`{c}`" for c in over))
    return "Instructions per call:\n\n" + "\n".join(lines) + f"\n\nTarget (adopted / released <= 1.0): {verdict}."
