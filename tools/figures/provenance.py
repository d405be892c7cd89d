"""What a result file says about the run that made it: the command, the
machine and its load, the versions and the settings, and what keeps the run
from backing a page."""

from __future__ import annotations

from dlpack_ref.harness.output import md_escape

from figures.checkout import Source, kind


def _load(load: list[float] | None) -> str:
    return f"{load[0]:.2f}" if load else "?"


def machine_text(machine: dict | None, timed: bool = True) -> str:
    """The CPU, its cores and the load; `timed`: whether the run's figures are
    times (instruction counts do not move with the load)."""
    if not machine:
        return "the machine and its load were not recorded"
    load = machine.get("load_average") or {}
    text = (f"{machine['cpu']}, {machine['cores']} cores, load average {_load(load.get('start'))} at the start "
            f"and {_load(load.get('end'))} at the end")
    if machine.get("overloaded") and timed:
        text += " (more than the cores: other work took turns with the calls timed, and the times mean little)"
    return text


def versions_text(versions: dict) -> str:
    names = {"python": "Python", "dlpack_ref": "dlpack-ref"}
    # a compiler's version line starts with its name: "cc (Debian 12.2.0-14) 12.2.0"
    return ", ".join(v if v.startswith(k + " ") else f"{names.get(k, k)} {v}"
                     for k, v in versions.items() if v is not None)


# Files of counts (instructions, lines of code), which the load does not move.
COUNTS = {"adoption_mpi4py", "adoption_producer", "callgrind_adopter", "copies_instructions",
          "reproduction_sizes"}


def run_problems(src: Source) -> list[str]:
    """Why the run of `src` is not a full run on a quiet machine with its
    metadata (empty when it is)."""
    d = src.data
    if d is None:
        return [f"`{src.path}` is not committed"]
    problems = []
    if "schema_version" in d and "pairs" in d:          # dlpack-ref bench
        if d["settings"].get("quick"):
            problems.append("a quick run (--quick): a smoke test, not figures to judge by")
        if not d["settings"].get("instructions") or not any(p.get("instructions") is not None for p in d["pairs"]):
            problems.append("no instruction counts (made without --instructions, or callgrind was missing)")
        if d["machine"].get("overloaded"):
            problems.append("the machine was overloaded")
        if not d["copies"].get("from_numpy"):
            problems.append("no copies of one NumPy array (made by an older dlpack-ref bench)")
        return problems
    if "schema_version" in d and "libraries" in d:      # dlpack-ref check
        return problems
    missing = [k for k in ("command", "machine", "versions", "settings") if k not in d]
    if missing:
        problems.append(f"records no {', '.join(missing)} (made before the scripts wrote them)")
    quick = d.get("quick", (d.get("settings") or {}).get("quick"))
    if quick:
        problems.append("a quick run (--quick): a smoke test, not figures to judge by")
    if (d.get("machine") or {}).get("overloaded") and kind(src.path) not in COUNTS:
        problems.append("the machine was overloaded")
    return problems


def run_line(src: Source, settings_text: str = "") -> str:
    """One paragraph: the command, the machine and its load, the versions and
    the settings of the run of `src`."""
    d = src.need()
    parts = [f"Made by `{d.get('command') or src.command}`"]
    if d.get("date"):
        parts[0] += f" on {d['date']}"
    parts.append(machine_text(d.get("machine"), timed=kind(src.path) not in COUNTS))
    if d.get("versions"):
        parts.append(md_escape(versions_text(d["versions"])))
    else:
        parts.append("the versions were not recorded")
    if settings_text:
        parts.append(settings_text)
    quick = d.get("quick", (d.get("settings") or {}).get("quick"))
    text = "; ".join(parts) + "."
    if quick:
        text += " **A quick run** (a smoke test of the script): not the figures to judge by."
    return text
