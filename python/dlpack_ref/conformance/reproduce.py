"""Reproductions: for a failed rule, Python that shows the failure with the
library alone. It is the code the checker ran, not a second text of it:
the rule's own check, the library's adapter (its file in
:mod:`dlpack_ref.harness.libraries`, or the generic adapter), and what
they call, written out by :func:`dlpack_ref.harness.bundle.bundle`, then
the one call the checker's child made. It prints ``expected:`` (the rule)
and ``observed:`` and exits 1 where the rule is broken, crashes where the
library crashed the checker, and prints ``ok:`` and exits 0 where the rule
holds. Names (a module, a rule's text) enter it only as literals."""

from __future__ import annotations

import inspect

from dlpack_ref.harness import registry
from dlpack_ref.harness.bundle import bundle, prune
from dlpack_ref.harness.libraries.generic import generic_subject, hooked_subject

from .model import Result, Status
from .rules import entries
from .rules.support import outcome, show

__all__ = ["reproduction", "reproducible", "library_call", "reproduction_lines"]

#: The capsule factory's statement that installs its deleter and capsule
#: destructor (dlpack_ref.testing.factory). The core keeps one such hook per
#: process, and a library whose import loads dlpack_ref.testing (a factory
#: hook's does, through dlpack_ref.conformance) installs that module's over
#: the one of the factory the reproduction carries, whose deleters would
#: then go uncounted: run again once the library is bound, it takes it back.
_FACTORY_HOOK = "_DELETER_ADDRESS, _CAPSULE_DESTRUCTOR_ADDRESS = _trampolines(_dispatch)"


#: By the side of a rule (the name of a known library's function that makes
#: it), the name its reproduction binds what that function makes to.
_CHECKED = {"producer": "checked_producer", "consumer": "checked_consumer", "cuda": "cuda_producer"}

#: By the side of a rule, the name a hook's or the generic adapter's
#: reproduction gives it (those adapters make every side at once).
_MADE = {"producer": "producer", "consumer": "consumer", "cuda": "cuda_producer"}


def library_call(spec: str, adapter: str, side: str = "cuda") -> tuple[list, str, str]:
    """(the functions that build what the rule is given, the source of the
    statements that bind it with them, the name it is bound to): ``adapter``
    is how the checker built the library (``known``, ``hook``,
    ``generic``); the spec enters the source as literals only. A known
    library's adapter is called for the rule's ``side`` alone: its
    ``producer()``, ``consumer()`` or ``cuda()``; a library without that
    function gives None, as it gives the checker. The functions its file
    shares between its sides come with it."""
    if adapter == "known":
        library, given = registry.KNOWN[spec], _CHECKED[side]
        if not hasattr(library, side):
            return [], f"{given} = None\n", given
        return [getattr(library, side), *_shared(library)], f"{given} = {side}()\n", given
    module_name, _, attr = spec.partition(":")
    if adapter == "hook":
        return ([hooked_subject], f"producer, consumer, cuda_producer = hooked_subject({module_name!r})\n",
                _MADE[side])
    return ([generic_subject],
            f"producer, consumer, absent = generic_subject({module_name!r}, {attr or None!r})\ncuda_producer = None\n",
            _MADE[side])


def _shared(library) -> list:
    """The private functions of a known library's file (what its sides
    share): written after the side's function, under the heading of what
    the checker ran, with their comments; those the side does not call are
    pruned."""
    return [f for name, f in vars(library).items()
            if name.startswith("_") and inspect.isfunction(f) and f.__module__ == library.__name__]


def reproducible(result: Result, adapter: str = "known") -> bool:
    """Whether :func:`reproduction` writes one for ``result``: a failure of
    a library built in a fresh process (by its file, hook or the generic
    adapter)."""
    return result.status is Status.FAIL and adapter in ("known", "hook", "generic")


def reproduction(spec: str, result: Result, adapter: str = "known") -> str | None:
    """Python source that shows ``result``'s failure with the library named
    by ``spec`` alone, or None when the rule did not fail.

    Parameters
    ----------
    spec : str
        The library as checked (``numpy``, ``mylib``, ``mylib:from_dlpack``).
    result : Result
    adapter : str
        How the checker built the library: ``known`` (its file), ``hook``
        (its factory hook) or ``generic``; ``""`` for a subject made in the
        caller's process (a lambda), which has no reproduction.

    Returns
    -------
    str or None
    """
    if not reproducible(result, adapter):
        return None
    entry = {e.rule.id: e for e in entries()}[result.rule.id]
    builders, binding, given = library_call(spec, adapter, entry.side)
    head = [f"# The library {spec!r} against the rule {result.rule.id!r}: Python that shows the checker's",
            "# verdict with that library alone (the rule's own check and the library's adapter, as they ran).",
            "# It prints 'expected:' and 'observed:' and exits 1 where the rule is broken, crashes where the",
            "# library crashed the checker, prints 'ok:' and exits 0 where the rule holds."]
    call = f"show(RULE, outcome({entry.check.__name__}, {given}))\n"
    source = prune(bundle(entry.check, outcome, show, *builders, last=[entry.check, *builders]), binding + call,
                   made_here=adapter == "known")
    retake = ("# the library's import may have taken the capsule factory's deleter hook: take it back\n"
              f"{_FACTORY_HOOK}\n") if f"\n{_FACTORY_HOOK}\n" in source else ""
    return "\n".join(head) + "\n" + source + f"\nRULE = {result.rule.text!r}\n{binding}{retake}{call}"


def reproduction_lines(spec: str = "numpy", adapter: str = "known") -> dict[str, dict[str, int]]:
    """By side, the lines of the reproduction of each rule as it would be
    written were the rule to fail for ``spec``: what ``check --explain``
    prints (the sizes docs/conformance.md gives)."""
    sizes: dict[str, dict[str, int]] = {}
    for e in entries():
        source = reproduction(spec, Result(e.rule, Status.FAIL, "a failure"), adapter)
        sizes.setdefault(e.side, {})[e.rule.id] = len(source.splitlines())
    return sizes
