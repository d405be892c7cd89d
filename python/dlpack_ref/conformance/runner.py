"""The one runner: every check that calls into the library under check runs
here, in a child process, so that a crash or a hang is a result instead of
the end of the run. The Python API, the CLI and the pytest plugin all go
through :func:`run`.

A subject with a ``spec`` is rebuilt in a fresh interpreter
(``sys.executable -c ...``), which imports nothing of the parent; one without
(a Consumer made from a lambda, a factory defined in a test) runs in a forked
copy of this process. Either way one worker serves a list of tasks and
reports each on a pipe; when it dies (a signal, an abort) or hangs, the task
in flight is reported as crashed and a fresh worker takes the rest.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Callable, Iterable

from .adapters import subject as adapter_subject
from .consumer import CASES, run_case
from .cuda_rules import CHECKS as CUDA_CHECKS, run_cuda_check
from .exchange_matrix import exchange_pair
from .model import Result, Rule, Status, Subject, exc_name, result_from_dict, short
from .producer import CHECKS, run_producer_check

MARK = "\x1edlpack-ref-conformance "
TASK_TIMEOUT_S = 60.0

#: rule id -> Rule, producer rules first, then consumer and CUDA rules, in report order.
RULES: dict[str, Rule] = {**{rule.id: rule for rule, _ in CHECKS}, **{case.rule.id: case.rule for case in CASES},
                          **{rule.id: rule for rule, _ in CUDA_CHECKS}}
_CASES = {case.rule.id: case for case in CASES}


def rules() -> list[Rule]:
    """Every rule checked, producer rules first."""
    return list(RULES.values())


def tasks_for(subject: Subject, only: Iterable[str] | None = None) -> list[dict]:
    """The tasks that check ``subject``: its producer rules, its consumer
    cases, then its CUDA rules when it can make CUDA arrays (those named in
    ``only``, when given)."""
    wanted = None if only is None else set(only)
    tasks = []
    if subject.producer is not None:
        tasks += [{"kind": "producer", "rule": rule.id} for rule, _ in CHECKS]
    if subject.consumer is not None:
        tasks += [{"kind": "consumer", "rule": case.rule.id} for case in CASES]
    if subject.cuda is not None:
        tasks += [{"kind": "cuda", "rule": rule.id} for rule, _ in CUDA_CHECKS]
    return [t for t in tasks if wanted is None or t["rule"] in wanted]


def perform(task: dict, subject: Subject | None) -> dict:
    """Child side: one task's outcome, a JSON-able dict. A task of kind
    ``"function"`` names its own ``"module:function"``, called with the task
    (how other commands, ``dlpack-ref bench``, run a call in a child)."""
    if task["kind"] == "function":
        module, _, attr = task["function"].partition(":")
        return getattr(importlib.import_module(module), attr)(task)
    if task["kind"] == "producer":
        return run_producer_check(subject.producer, task["rule"]).to_dict()
    if task["kind"] == "consumer":
        return run_case(subject.consumer, _CASES[task["rule"]]).to_dict()
    if task["kind"] == "cuda":
        return run_cuda_check(subject.cuda, task["rule"]).to_dict()
    if task["kind"] == "pair":
        return exchange_pair(adapter_subject(task["producer"]).producer,
                             adapter_subject(task["consumer"]).consumer)
    raise ValueError(f"unknown task kind {task['kind']!r}")


def serve(tasks: list[dict], subject: Subject | None, fd: int) -> None:
    """Child side: run each task and write its outcome on a marked line to fd."""
    with os.fdopen(fd, "w", buffering=1) as out:
        for task in tasks:
            out.write(MARK + json.dumps({"start": task}) + "\n")
            out.flush()
            try:
                outcome = perform(task, subject)
            except BaseException as e:  # a task must always answer
                outcome = {"worker_error": f"{exc_name(e)}: {short(e)}"}
            out.write(MARK + json.dumps({"done": outcome}, default=repr) + "\n")
            out.flush()


def serve_spec(spec: str, tasks_json: str, fd: str) -> None:
    """Entry point of a fresh worker interpreter."""
    serve(json.loads(tasks_json), adapter_subject(spec) if spec else None, int(fd))


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class _Spawned:
    """A fresh interpreter that rebuilds the subject from its spec."""

    def __init__(self, spec: str | None, tasks: list[dict]):
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from dlpack_ref.conformance.runner import serve_spec; serve_spec(*sys.argv[1:])",
             spec or "", json.dumps(tasks), str(write)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write,))
        os.close(write)
        self.stream = os.fdopen(read)

    def kill(self) -> None:
        self.proc.kill()

    def wait(self) -> int:
        return self.proc.wait()


class _Forked:
    """A forked copy of this process, which has the subject already."""

    def __init__(self, subject: Subject, tasks: list[dict]):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            try:
                os.close(read)
                # A crash is the expected outcome of some cases: no traceback
                # dump into the parent's stderr (pytest enables faulthandler).
                faulthandler.disable()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                serve(tasks, subject, write)
            finally:
                os._exit(0)
        os.close(write)
        self.pid = pid
        self.stream = os.fdopen(read)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run_tasks(tasks: list[dict], subject: Subject | None = None, spec: str | None = None,
              on_done: Callable[[dict, dict], None] | None = None) -> list[dict]:
    """Parent side: the outcome of each task, in order, from workers that
    rebuild the subject from ``spec`` (or from ``subject.spec``) or, without
    one, fork. A task whose worker died gets ``{"crashed": "<how>"}``."""
    spec = spec if spec is not None else (subject.spec if subject is not None else None)
    outcomes: list[dict] = []
    pending = list(tasks)
    while pending:
        worker = _Spawned(spec, pending) if spec is not None or subject is None else _Forked(subject, pending)
        lines: queue.Queue = queue.Queue()

        def pump(stream=worker.stream):
            with stream:
                for line in stream:
                    if line.startswith(MARK):
                        lines.put(json.loads(line[len(MARK):]))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        crashed = None
        while pending:
            try:
                msg = lines.get(timeout=TASK_TIMEOUT_S)
            except queue.Empty:
                worker.kill()
                worker.wait()
                crashed = f"hung for more than {TASK_TIMEOUT_S:.0f} s (killed)"
                break
            if msg is None:
                crashed = _how_it_ended(worker.wait())
                break
            if "done" in msg:
                outcomes.append(msg["done"])
                if on_done:
                    on_done(pending[0], msg["done"])
                pending.pop(0)
        else:
            worker.wait()
        if crashed is not None and pending:
            outcomes.append({"crashed": crashed})
            if on_done:
                on_done(pending[0], outcomes[-1])
            pending.pop(0)
    return outcomes


def result_of(task: dict, outcome: dict, subject_name: str) -> Result:
    """The Result of one producer or consumer task's outcome."""
    rule = RULES[task["rule"]]
    if "crashed" in outcome:
        side = "consumer" if task["kind"] == "consumer" else "library"
        return Result(rule, Status.FAIL, f"the {side} crashed the process ({outcome['crashed']})",
                      subject=subject_name)
    if "worker_error" in outcome:
        return Result(rule, Status.ERROR, outcome["worker_error"], subject=subject_name)
    return result_from_dict(outcome, rule)


def run(subject: Subject, only: Iterable[str] | None = None,
        on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Check one subject: every rule (or those in ``only``), each in a child
    process.

    Parameters
    ----------
    subject : Subject
        What to check; see :func:`adapters.subject` to build one by name.
    only : iterable of str, optional
        Rule ids to run.
    on_result : callable, optional
        Called with each Result as it arrives (progress).

    Returns
    -------
    list of Result
        In rule order.
    """
    tasks = tasks_for(subject, only)
    results: list[Result] = []

    def done(task, outcome):
        results.append(result_of(task, outcome, subject.name))
        if on_result:
            on_result(results[-1])

    run_tasks(tasks, subject, on_done=done)
    return results


def run_matrix(specs: list[str], on_done: Callable[[dict, dict], None] | None = None) -> dict:
    """Each producer of ``specs`` handed to each consumer: {(producer, consumer): cell}."""
    pairs = [{"kind": "pair", "producer": p, "consumer": c} for p in specs for c in specs]
    outcomes = run_tasks(pairs, spec="", on_done=on_done) if pairs else []
    return {(t["producer"], t["consumer"]): out for t, out in zip(pairs, outcomes)}
