"""Library-agnostic DLPack conformance checks.

Check a producer (a factory of arrays) and a consumer (a ``from_dlpack``)
against the rules of the DLPack header, the DLPack Python spec and the array
API standard; every result names its rule, where it is written, and what was
observed. Every check runs in a child process (see :mod:`.runner`). From the
command line: ``dlpack-ref check`` (a CI gate). From a test suite: the pytest
plugin (one test per rule, see docs/conformance.md) or::

    from dlpack_ref.conformance import assert_conforms

    def test_dlpack():
        assert_conforms(producer_factory=make_array, from_dlpack=mylib.from_dlpack)

Modules: ``model`` (Producer, Consumer, Subject, Rule, Result), ``producer``
and ``consumer`` (the rules), ``exchange_matrix`` (pairs of libraries),
``runner`` (child processes), ``adapters`` (libraries by name, any module
through the array API), ``gate`` (allowances), ``report``, ``cli``,
``pytest_plugin``.
"""

from __future__ import annotations

from typing import Any, Callable

from .gate import AllowList
from .model import SOURCES, CheckFailed, Consumer, NotSupported, Producer, Result, Rule, Status, Subject
from .runner import rules, run

__all__ = [
    "SOURCES", "AllowList", "CheckFailed", "NotSupported", "Result", "Rule", "Status", "Producer", "Consumer",
    "Subject", "check", "assert_conforms", "format_results", "rules", "subject_of",
]


def subject_of(producer_factory: Callable | Producer | None = None,
               from_dlpack: Callable | Consumer | None = None, *, name: str = "library",
               **producer_options: Any) -> Subject:
    """A :class:`Subject` from a factory and a ``from_dlpack``.

    Parameters
    ----------
    producer_factory : callable or Producer, optional
        ``factory(dtype, shape, readonly=False)``, see :class:`Producer`;
        ``producer_options`` (tolist, views, scalar, unexportable) go to it.
    from_dlpack : callable or Consumer, optional
        A callable, or a :class:`Consumer` for more control (how to read
        values, pointers, read-only-ness, the CPU device).
    name : str
        The name results carry.

    Returns
    -------
    Subject
        Without a spec: the runner forks to check it, so lambdas and local
        functions work.
    """
    p = producer_factory if isinstance(producer_factory, Producer) or producer_factory is None else \
        Producer(name, producer_factory, **producer_options)
    c = from_dlpack if isinstance(from_dlpack, Consumer) or from_dlpack is None else Consumer(name, from_dlpack)
    return Subject(name, "", p, c, None)


def check(producer_factory: Callable | Producer | None = None, from_dlpack: Callable | Consumer | None = None,
          *, name: str = "library", only=None, **producer_options: Any) -> list[Result]:
    """Run the producer checks (when ``producer_factory`` is given) and the
    consumer checks (when ``from_dlpack`` is given), each in a child process,
    and return the results (see :func:`subject_of` for the parameters;
    ``only``: rule ids to run)."""
    return run(subject_of(producer_factory, from_dlpack, name=name, **producer_options), only=only)


def format_results(results: list[Result], *, only_problems: bool = False) -> str:
    """One block per result: its line, the rule's text and where it is written."""
    lines = []
    for r in results:
        if only_problems and not r.failed:
            continue
        lines.append(r.line() + f"\n    rule: {r.rule.text}\n    where: {r.rule.citation()}")
    return "\n".join(lines)


def assert_conforms(producer_factory=None, from_dlpack=None, *, allow: tuple[str, ...] | AllowList = (),
                    name: str = "library", **producer_options) -> list[Result]:
    """Run :func:`check` and raise AssertionError listing every failed or
    erroring check not allowed (``allow``: rule ids, or an :class:`AllowList`),
    each with its rule, where the rule is written and what was observed.

    Returns
    -------
    list of Result

    Raises
    ------
    AssertionError
        When a rule that is not allowed fails.
    """
    allowed = allow if isinstance(allow, AllowList) else AllowList().plus(list(allow))
    results = check(producer_factory, from_dlpack, name=name, **producer_options)
    bad = [r for r in results if r.failed and allowed.reason(name, r.rule.id) is None]
    if bad:
        raise AssertionError(f"{len(bad)} DLPack conformance check(s) failed:\n" + format_results(bad))
    return results
