"""The rules, each written once, by chapter (:mod:`.chapters`: versions,
layout, read-only, copies, devices, dtypes, ownership, streams, the C
exchange API, errors, malformed input): a rule is a function of the
library's producer, consumer or CUDA producer that returns a pass detail or
raises (:class:`~.support.CheckFailed`, ``NotSupported``). The checker's
child runs that function; a failure's reproduction prints that function,
and what it calls, as they stand (:mod:`..reproduce`).

Adding a rule touches one file, its chapter's (or a new module of
:mod:`.chapters`, found by itself): the check under
``@rule(side=..., source=..., where=...)`` of :mod:`.table` (``side``
``producer``, ``consumer`` or ``cuda``; ``source`` a key of
:data:`~dlpack_ref.conformance.model.SOURCES`), and right after it the
subject made to break it, a small class under ``@breaks(check, shows=...)``
(its base from :mod:`.breaking`). The rule then runs in ``check``, stands in
the docs' table of what is checked, and the tests hold that dlpack-ref
passes it, that its breaker fails exactly it, and that the failure's
reproduction shows it. The parts the chapters share: :mod:`.support` (a
verdict and its reproduction's last step), :mod:`.producer_cases`,
:mod:`.consumer_cases` and :mod:`.consumer_judges` (how a case of each side
is made and judged), :mod:`.cuda_lab` (the checker's side of CUDA).
"""

from __future__ import annotations

import importlib
import pkgutil

from dlpack_ref.harness.runner import task

from . import chapters
from .table import BREAKERS, RULES, SIDES, Breaker, Entry, breaks, rule

__all__ = ["BREAKERS", "Breaker", "Entry", "RULES", "breaks", "entries", "perform", "rule", "tasks_for"]

#: The chapters, each a module of :mod:`.chapters`, found by listing it.
CHAPTERS = [importlib.import_module(f"{chapters.__name__}.{m.name}")
            for m in sorted(pkgutil.iter_modules(chapters.__path__), key=lambda m: m.name)]

def _place(entry: Entry, declared: int) -> tuple:
    known = entry.chapter in chapters.ORDER
    chapter = chapters.ORDER.index(entry.chapter) if known else len(chapters.ORDER)
    return (SIDES.index(entry.side), chapter, entry.chapter, declared)


#: Every rule, producer rules first, then consumer and CUDA rules.
ENTRIES = [e for _, e in sorted(((_place(e, i), e) for i, e in enumerate(RULES.values())), key=lambda p: p[0])]


def entries() -> list[Entry]:
    """Every rule beside its check, producer rules first, then consumer and CUDA rules."""
    return list(ENTRIES)


def tasks_for(sides: dict[str, bool], only: set[str] | None = None, spec: str | None = None) -> list[dict]:
    """The tasks that check a library with the given sides (``producer``,
    ``consumer``, ``cuda``: whether it has them), those in ``only`` when given."""
    return [task(perform, rule=e.rule.id, **({"spec": spec} if spec else {}))
            for e in ENTRIES if sides.get(e.side) and (only is None or e.rule.id in only)]


def perform(task: dict, subjects) -> dict:
    """Child side: the outcome of one rule on the worker's subject (or the
    task's ``spec``)."""
    from .support import outcome
    entry = RULES[task["rule"]]
    subject = subjects.of(task["spec"]) if task.get("spec") else subjects.own()
    return outcome(entry.check, getattr(subject, entry.side))
