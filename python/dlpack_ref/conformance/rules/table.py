"""The table of rules: each rule beside its check and the side of a library
it checks, filled by ``@rule`` where each check is written."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..model import Rule

__all__ = ["Entry", "RULES", "rule"]


@dataclasses.dataclass(frozen=True)
class Entry:
    """A rule beside its check and the side of a library it checks
    (``producer``, ``consumer`` or ``cuda``)."""

    rule: Rule
    check: Callable
    side: str


#: rule id -> Entry, in the order the rules are written.
RULES: dict[str, Entry] = {}


def rule(source: str, where: str = ""):
    """Register the decorated check as a rule: its id is the side (the
    check's module: ``producer``, ``consumer`` or ``cuda``) and the check's
    name (``producer.size_zero``), its text the check's docstring, written
    where ``source`` (a key of :data:`~dlpack_ref.conformance.model.SOURCES`)
    says, in the section ``where``."""
    def register(check):
        side = check.__module__.rpartition(".")[2]
        rule_id = f"{side}.{check.__name__}"
        if not check.__doc__:
            raise ValueError(f"rule {rule_id!r} has no docstring to state it")
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id!r} is written twice")
        RULES[rule_id] = Entry(Rule(rule_id, " ".join(check.__doc__.split()), source, where), check, side)
        return check
    return register
