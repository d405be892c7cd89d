"""The declarations of the rules: ``@rule`` registers a check as a rule of
one side of a library, ``@breaks`` the subject made to break it, each
written beside the other in the rule's chapter (:mod:`.chapters`)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..model import Rule

__all__ = ["Breaker", "BREAKERS", "Entry", "RULES", "SIDES", "breaks", "rule"]

#: The sides of a library a rule checks, in report order.
SIDES = ("producer", "consumer", "cuda")


@dataclasses.dataclass(frozen=True)
class Entry:
    """A rule beside its check, the side of a library it checks
    (``producer``, ``consumer`` or ``cuda``) and the chapter that declares it."""

    rule: Rule
    check: Callable
    side: str
    chapter: str = ""


@dataclasses.dataclass(frozen=True)
class Breaker:
    """A subject made to break exactly one rule: its class (``cls``), what
    it does wrong (``defect``, the class's docstring), a part of the
    failure's detail that shows it (``shows``), and ``build()``, which
    returns the subject as a factory hook does: (producer, consumer, CUDA
    producer), only the rule's side not None."""

    rule: str
    cls: type
    defect: str
    shows: str
    build: Callable[[], tuple]


#: rule id -> Entry, in the order the rules are declared.
RULES: dict[str, Entry] = {}
#: rule id -> the Breaker declared for it.
BREAKERS: dict[str, Breaker] = {}


def rule(*, side: str, source: str, where: str = ""):
    """Register the decorated check as a rule of ``side`` (``producer``,
    ``consumer`` or ``cuda``): its id is the side and the check's name
    (``producer.size_zero``), its text the check's docstring, written where
    ``source`` (a key of :data:`~dlpack_ref.conformance.model.SOURCES`)
    says, in the section ``where``."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}: a rule checks one of {', '.join(SIDES)}")

    def register(check):
        rule_id = f"{side}.{check.__name__}"
        if not check.__doc__:
            raise ValueError(f"rule {rule_id!r} has no docstring to state it")
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id!r} is written twice")
        text = " ".join(check.__doc__.split())
        RULES[rule_id] = Entry(Rule(rule_id, text, source, where), check, side, check.__module__.rpartition(".")[2])
        check.rule_id = rule_id
        return check
    return register


def breaks(check: Callable, *, shows: str, subject: Callable | None = None):
    """Declare the decorated class the subject that breaks the rule of
    ``check`` (a function ``@rule`` registered): its docstring says what it
    does wrong, ``shows`` is a part of the failure's detail that names it.
    ``subject(cls)`` makes the side's Producer, Consumer or CudaProducer of
    it; by default dlpack-ref's own, with each array behind ``cls`` (a
    producer or CUDA producer) or ``cls()`` as its ``from_dlpack``
    (:mod:`.breaking`)."""
    rule_id = getattr(check, "rule_id", None)
    if rule_id is None:
        raise ValueError(f"{check!r} is not a rule: declare it with @rule first")

    def register(cls):
        if rule_id in BREAKERS:
            raise ValueError(f"rule {rule_id!r} has two breakers")
        if not cls.__doc__:
            raise ValueError(f"the breaker of {rule_id!r} has no docstring to say what it does wrong")
        side = RULES[rule_id].side

        def build() -> tuple:
            from .breaking import subject_of
            made = subject(cls) if subject is not None else subject_of(side, cls)
            return tuple(made if s == side else None for s in SIDES)

        BREAKERS[rule_id] = Breaker(rule_id, cls, " ".join(cls.__doc__.split()), shows, build)
        return cls
    return register
