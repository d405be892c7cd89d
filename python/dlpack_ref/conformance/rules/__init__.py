"""The rules, each written once: a rule is a function of the library's
producer, consumer or CUDA producer that returns a pass detail or raises
(:class:`~.support.CheckFailed`, ``NotSupported``). The checker's child
runs that function; a failure's reproduction prints that function, and
what it calls, as they stand (:mod:`..reproduce`).

Adding a rule: write its function in :mod:`.producer`, :mod:`.consumer` or
:mod:`.cuda` under ``@rule(id, text, source, where)`` of :mod:`.table` (id
prefixed by the side, source a key of
:data:`~dlpack_ref.conformance.model.SOURCES`), and give it a subject made
to break it in the tests; they then hold that dlpack-ref passes it, that
the breaking subject fails it, and that the failure's reproduction shows it.
"""

from __future__ import annotations

from dlpack_ref.harness.runner import task

from . import consumer, cuda, producer
from .table import RULES, Entry, rule

__all__ = ["Entry", "RULES", "entries", "perform", "rule", "tasks_for"]

_SIDES = {"producer": 0, "consumer": 1, "cuda": 2}
#: Every rule, producer rules first, then consumer and CUDA rules.
ENTRIES = sorted(RULES.values(), key=lambda e: _SIDES[e.side])


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
