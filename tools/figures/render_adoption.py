"""The figures of real libraries moved onto the header: benchmarks/results/adoption_producer.json (numkong) and
benchmarks/results/adoption_mpi4py.json (mpi4py)."""

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


def adoption_mpi4py_run(sources, args) -> str:
    src = sources[0]
    d = src.need()
    st = d.get("settings", {})
    loops = st.get("count_loops")
    text = run_line(src, f"instructions per call over {loops} and {2 * (loops or 0)} calls (counts do not move "
                         f"with the load); times the fastest of {st.get('rounds')} interleaved rounds of "
                         f"{st.get('repeats')} batches of {st.get('loops')} calls")
    if (d.get("machine") or {}).get("overloaded"):
        text += (" The machine was loaded past its cores during the run: the times below mean little; the "
                 "instruction counts stand.")
    return text


def adoption_mpi4py_table(sources, args) -> str:
    cases = sources[0].need()["cases"]
    lines = ["| call, 16 float32 | instructions released | adopted | adopted / released "
             "| ns released | adopted | adopted / released |",
             "|---|---|---|---|---|---|---|"]
    for c in cases:
        n, t = c["instructions"], c["ns"]
        lines.append(f"| `{c['case']}` | {n['released']:.0f} | {n['adopted']:.0f} | {c['instructions_ratio']:.3f} "
                     f"| {t['released']:.0f} | {t['adopted']:.0f} | {c['ns_ratio']:.2f} |")
    over = [c["case"] for c in cases if c["instructions_ratio"] > 1.0]
    verdict = ("adopted at most released on every call" if not over
               else "adopted over released on: " + ", ".join(f"`{c}`" for c in over))
    return ("Per call (instructions are the figures to judge by; times on a loaded machine wander):\n\n"
            + "\n".join(lines) + f"\n\nTarget (instructions, adopted / released <= 1.0): {verdict}.")
