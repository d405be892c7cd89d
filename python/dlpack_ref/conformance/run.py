"""Running the checks, every call into a library in a child process (the
harness's runner): a library's rules in one worker, which first says what
the library is (:func:`dlpack_ref.harness.runner.description_of`), and the
exchange matrix, each pair of libraries in a worker of its own, so that no
library's import reaches another pair's cells."""

from __future__ import annotations

from typing import Callable, Iterable

from dlpack_ref.harness.exchange import exchange_task
from dlpack_ref.harness.registry import Description
from dlpack_ref.harness.runner import Worker, description_of, run_groups, task

from .model import Result, result_from_outcome
from .rules import RULES, entries, tasks_for

__all__ = ["Checked", "sides", "check_spec", "run", "run_here", "run_matrix"]


def _results(worker: Worker, tasks: list[dict], name: str, on_result) -> list[Result]:
    results = []
    for task in tasks:
        results.append(result_from_outcome(worker.ask(task), RULES[task["rule"]].rule, name))
        if on_result:
            on_result(results[-1])
    return results


def sides(target) -> dict[str, bool]:
    """Which sides (producer, consumer, cuda) a subject or a spec has; a
    spec's are found in a child process (its import and its adapter run
    there, never here).

    Raises
    ------
    ImportError
        When a spec's library cannot be had (its import raises, crashes or
        exits; its adapter fails; nothing can be checked in it).
    """
    if isinstance(target, str) or target.spec:
        spec = target if isinstance(target, str) else target.spec
        found = description_of(spec)
        if found.error is not None:
            raise ImportError(f"{spec}: {found.error}")
        return found.sides
    return {"producer": target.producer is not None, "consumer": target.consumer is not None,
            "cuda": target.cuda is not None}


def run(target, only: Iterable[str] | None = None,
        on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Check one library: every rule of the sides it has (or those in
    ``only``), each in a child process. ``target`` is a spec (or a Subject
    with one), rebuilt in a fresh interpreter that also says what the
    library is, or a Subject that exists only here (a lambda), checked in
    a forked copy of this process.

    Returns
    -------
    list of Result
        In rule order.

    Raises
    ------
    ImportError
        When a spec's library cannot be had (see :func:`sides`).
    """
    wanted = None if only is None else set(only)
    if isinstance(target, str) or target.spec:
        checked = check_spec(target if isinstance(target, str) else target.spec, wanted, on_result)
        if checked.error is not None:
            raise ImportError(f"{checked.spec}: {checked.error}")
        return checked.results
    with Worker(None, target) as worker:
        return _results(worker, tasks_for(sides(target), wanted), target.name, on_result)


def run_here(subject, only: Iterable[str] | None = None) -> list[Result]:
    """The rules of ``subject`` (or those in ``only``) in this process, not
    in a child: for tests that count what a check leaves behind. A crash
    here is this process's."""
    from .rules.support import outcome
    wanted = None if only is None else set(only)
    return [result_from_outcome(outcome(e.check, getattr(subject, e.side)), e.rule, subject.name)
            for e in entries() if getattr(subject, e.side) is not None and (wanted is None or e.rule.id in wanted)]


class Checked(Description):
    """What checking one spec found: the library's description (or why it
    could not be had) and its results."""

    def __init__(self, spec: str, description: dict, results: list[Result]):
        super().__init__(spec, description)
        self.results = results


def check_spec(spec: str, only: set[str] | None = None, on_result=None, on_description=None) -> Checked:
    """Describe the library ``spec`` names and check it, in one worker."""
    with Worker(spec) as worker:
        checked = Checked(spec, description_of(spec, worker).description, [])
        if on_description:
            on_description(checked)
        if checked.error is None:
            checked.results = _results(worker, tasks_for(checked.sides, only, spec), spec, on_result)
    return checked


def run_matrix(producers: list[str], consumers: list[str],
               on_done: Callable[[dict, dict], None] | None = None) -> dict:
    """Each producer's array handed to each consumer: {(producer, consumer):
    cell}; the cells of a pair of libraries run in a worker of their own."""
    groups: dict[frozenset, list[dict]] = {}
    for p in producers:
        for c in consumers:
            groups.setdefault(frozenset((p, c)), []).append(task(exchange_task, producer=p, consumer=c))
    ordered = list(groups.values())
    outcomes = run_groups(ordered, on_done)
    return {(t["producer"], t["consumer"]): out for group, outs in zip(ordered, outcomes)
            for t, out in zip(group, outs)}
