"""The conformance rules as a page lists them, from their declarations
(the rules' chapters), not from a result file."""

from __future__ import annotations

import re

from figures.checkout import Source

_SIDES = ("producer", "consumer", "cuda")
# A dunder name, with the object before it (``type(x).``) and a call after
# it (arguments nested one level deep) when the text has them.
_DUNDER = re.compile(r"(?<![\w`])(?:\w+(?:\(\w*\))?\.)?__\w+__(?:\([^()]*(?:\([^()]*\)[^()]*)*\))?")


def _markdown(text: str) -> str:
    """Plain text in a table cell: dunder names (with their object and
    call) as code, ``|`` and ``*`` escaped."""
    text = text.replace("|", "\\|").replace("*", "\\*")
    return _DUNDER.sub(lambda m: f"`{m.group(0)}`", text)


def _source(rule: dict) -> str:
    """Where a rule is written: its source's name (SOURCES' text before any
    parenthesis), then the section; a section that starts with the name's
    last words ("Python spec: ...") continues the name instead of repeating it."""
    name, where = rule["source_text"].split(" (")[0], rule["where"]
    if not where:
        return _markdown(name)
    words = name.split()
    for k in range(len(words), 0, -1):
        if where.startswith(" ".join(words[-k:])):
            return _markdown(" ".join(words[:-k] + [where]))
    return _markdown(f"{name}: {where}")


def rules_checked(sources: list[Source], args: list[str]) -> str:
    """``rules-checked SIDE``: a table of the rules of one side
    (``producer``, ``consumer``, ``cuda``) in report order: id, what it
    asks (its text), where it is written."""
    [src] = sources
    if len(args) != 1 or args[0] not in _SIDES:
        raise ValueError(f"rules-checked takes a side ({', '.join(_SIDES)}), not {' '.join(args) or 'nothing'}")
    rows = [f"| `{r['id']}` | {_markdown(r['text'])} | {_source(r)} |"
            for r in src.need()["rules"] if r["side"] == args[0]]
    return "\n".join(["| rule | what is checked | where it is written |", "|---|---|---|", *rows])
