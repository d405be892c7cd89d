"""Each result file's run, and what the pages lack from it (--status)."""

from __future__ import annotations

import sys

from figures.checkout import FILES, source
from figures.formatting import format_bytes
from figures.markers import Block, citations
from figures.provenance import machine_text, run_problems

def needs_run(path: str, used: dict[str, list[Block]] | None = None) -> list[str]:
    """Why the committed file ``path`` does not back its pages with a full
    run on a quiet machine: its run's problems and the blocks it lacks data
    for (empty when it does)."""
    used = citations() if used is None else used
    problems = run_problems(source(path))
    problems += [f"{b.page}:{b.line} '{b.name}': {b.no_data}" for b in used.get(path, []) if b.no_data]
    if path.endswith("pool_threshold.json") and source(path).data:
        d = source(path).data
        grain, found = d.get("core_grain_bytes"), d.get("threshold_bytes_moved")
        if not found:
            problems.append("the run found no size from which two threads gain or break even")
        elif grain and grain * 2 != found:
            problems.append(f"the run's threshold ({format_bytes(found)} moved) is not twice the core's grain "
                            f"({format_bytes(grain)}): rerun on a quiet machine, or change DLREF_POOL_GRAIN")
    return list(dict.fromkeys(problems))


def report_status(out=sys.stdout) -> int:
    """Each result file with its run's problems and the blocks that lack data; 1 when any."""
    used = citations()
    status = 0
    for path, (command, needs) in FILES.items():
        src = source(path)
        problems = needs_run(path, used)
        status |= bool(problems)
        print(f"{path}: {'NEEDS A RUN' if problems else 'ok'}", file=out)
        if src.data is not None and (src.data.get("machine") or src.data.get("date")):
            m = src.data.get("machine")
            print(f"    run: {src.data.get('date', '')} {machine_text(m) if m else ''}".rstrip(), file=out)
        for problem in problems:
            print(f"    - {problem}", file=out)
        if problems:
            print(f"    make it: {command}\n    needs: {needs}", file=out)
        if not used.get(path):
            print("    (no page cites it)", file=out)
    return status
