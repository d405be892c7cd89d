"""The known libraries as a page lists them, from their files (the
registry's declarations), not from a result file."""

from __future__ import annotations

from figures.checkout import Source


def known_libraries(sources: list[Source], args: list[str]) -> str:
    """``known-libraries [LANE]``: every known library but dlpack-ref itself
    (those a CI lane installs when LANE names one), as code spans in one
    sentence's list: "`numpy`, `torch` and `jax`"."""
    [src] = sources
    if args and args[0] not in ("main", "ecosystem"):
        raise ValueError(f"known-libraries takes a lane (main, ecosystem), not {args[0]!r}")
    names = [f"`{d['name']}`" for d in src.need()["libraries"]
             if d["name"] != "dlpack_ref" and (not args or d["lane"] == args[0])]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
