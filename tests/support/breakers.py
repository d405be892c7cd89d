"""The subjects made to break one rule each, as the rules declare them
(``@breaks`` beside each rule in dlpack_ref.conformance.rules.chapters):
this module only serves them as factory hooks.

The checker's children and a failure's reproduction import a breaker by
spec: a module holding ``__dlpack_conformance__ = hook(rule_id)``
(tests/test_rules_proven.py writes one per rule). :func:`control` is the
subject that passes the two rules dlpack-ref's adapter cannot show passing
(it has no scalar type and no array that cannot be exported).
"""

from __future__ import annotations

from typing import Callable

from dlpack_ref.conformance.rules import BREAKERS
from dlpack_ref.conformance.rules.breaking.producers import completed

__all__ = ["BREAKERS", "hook", "control"]


def hook(rule_id: str) -> Callable[[], tuple]:
    """The factory hook (``__dlpack_conformance__``) of the subject that breaks ``rule_id``."""
    def __dlpack_conformance__():
        return BREAKERS[rule_id].build()
    return __dlpack_conformance__


def control() -> tuple:
    """The factory hook of dlpack-ref's producer with a scalar type and an
    array that cannot be exported, both done right: it passes the two rules
    dlpack-ref's own adapter can only answer "not supported" (it has neither)."""
    return completed(), None
