"""The one child-process runner: every call into a library under check or
benchmark (its import included) runs in a child process, so that a crash,
a hang or an exit is an outcome instead of the end of the run.

A :class:`Worker` is one child serving tasks one at a time over pipes. A
worker for a spec (a library name, ``module``, ``module:attr``) is a fresh
interpreter that imports nothing of the parent and builds the subjects its
tasks name; a worker for a subject that exists only in this process (a
lambda, a factory defined in a test) is a forked copy of it. When a worker
dies (a signal, an abort, an exit) or a task hangs, that task's outcome is
a :class:`~.outcome.Failure` (written by :func:`~.outcome.failure_json`)
and a fresh worker takes the next task.

A task is a dict made by :func:`task` from its function (a module-level
function, named to the child by its module and name), which the child
calls with the task and a :class:`Subjects` (the subject of the
worker, or any spec's, built on first use). Whatever a library writes
goes to the parent's stderr, at the file-descriptor level: a child's
stdout is the parent's stderr. A fresh worker's ``sys.path`` is the
parent's, exactly. Each worker leads a session of its own, is judged by
how its process ended (a pidfd, not the end of its pipe), and takes what
it started with it when it ends (:mod:`.processes`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import faulthandler
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Iterable

from . import processes
from .observe import exc_name, short
from .outcome import Failure, failure_json
from .registry import Description, description_task, subject
from .subject import Subject

__all__ = ["TASK_TIMEOUT_S", "Subjects", "Worker", "task", "function_name", "description_of", "run_tasks", "run_groups"]

MARK = "\x1edlpack-ref-runner "
_MARK = MARK.encode()
TASK_TIMEOUT_S = 60.0
#: How often a worker's end is looked for where no pidfd tells it.
_POLL_S = 0.05
#: A fresh worker's command: the parent's sys.path, set before any import
#: (-P: no working folder first, as the console script has none), after any
#: folder of the worker's own PYTHONPATH the parent lacks (one a long-lived
#: process set after it started).
_CHILD = ("import sys; sys.path[:] = [p for p in sys.path if p not in sys.argv[4:]] + sys.argv[4:]; "
          "from dlpack_ref.harness.runner import serve_spec; serve_spec(*sys.argv[1:4])")
#: This process's ends of every live worker's pipes: a forked worker closes
#: them, so that no other worker's pipe stays open in it.
_PARENT_FDS: set[int] = set()


class Subjects:
    """The child's subjects: the worker's own (a forked worker's object, or
    the one its spec names) and any other spec's, each built once."""

    def __init__(self, subject: Subject | None = None, spec: str | None = None):
        self._own, self._spec, self._built = subject, spec, {}

    def own(self) -> Subject:
        return self._own if self._own is not None else self.of(self._spec)

    def of(self, spec: str) -> Subject:
        if spec not in self._built:
            self._built[spec] = subject(spec)
        return self._built[spec]


def function_name(function: Callable) -> str:
    """``module:name`` of a module-level function, which a child imports by it.

    Raises
    ------
    ValueError
        For a function a child cannot import by name (a lambda, a nested function).
    """
    name = f"{function.__module__}:{function.__qualname__}"
    if not function.__qualname__.isidentifier() or function.__module__ == "__main__":
        raise ValueError(f"{name}: a task's function must be a module-level function of an importable module")
    return name


def task(function: Callable[[dict, Subjects], dict], **fields) -> dict:
    """A task that runs ``function(task, subjects)`` in a worker; ``fields``
    (JSON values) travel with it."""
    return {"function": function_name(function), **fields}


def _perform(task: dict, subjects: Subjects) -> dict:
    module, _, attr = task["function"].partition(":")
    return getattr(importlib.import_module(module), attr)(task, subjects)


def _serve(read_fd: int, write_fd: int, subjects: Subjects) -> None:
    """Child side: answer each task line on read_fd with marked lines on write_fd."""
    # What a library starts does not inherit the pipes (a forked helper still
    # may: the parent judges the worker by its process, not by the pipe).
    os.set_inheritable(read_fd, False)
    os.set_inheritable(write_fd, False)
    with os.fdopen(read_fd, "r") as tasks, os.fdopen(write_fd, "w", buffering=1) as out:
        for line in tasks:
            task = json.loads(line)
            out.write(MARK + json.dumps({"start": task.get("function")}) + "\n")
            try:
                outcome = _perform(task, subjects)
            except BaseException as e:  # a task must always answer, SystemExit included
                outcome = failure_json(Failure.raised(exc_name(e), short(e)))
            out.write(MARK + json.dumps({"done": outcome}, default=repr) + "\n")


def serve_spec(spec: str, read_fd: str, write_fd: str) -> None:
    """Entry point of a fresh worker interpreter."""
    _serve(int(read_fd), int(write_fd), Subjects(spec=spec or None))


def _status_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


class Worker:
    """A child process serving tasks: :meth:`ask` sends one and waits for
    its outcome; a worker that died is started afresh by the next task.

    A worker leads a session of its own (a signal to the parent's group
    does not reach it) and is judged by how its process ended, whoever
    else holds its pipe; when it ends, whatever it started ends with it
    (:mod:`dlpack_ref.harness.processes`)."""

    def __init__(self, spec: str | None = None, subject: Subject | None = None,
                 timeout: float | None = None):
        self.spec, self.subject = spec, subject
        self.timeout = TASK_TIMEOUT_S if timeout is None else timeout
        self._proc = self._pid = None

    def _start(self) -> None:
        processes.check_stopping()
        to_child, tasks = os.pipe()
        answers, from_child = os.pipe()
        self._mark = processes.new_mark()
        if self.subject is not None and self.spec is None:
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller's code
                try:
                    self._become_forked_worker(tasks, answers)
                    _serve(to_child, from_child, Subjects(subject=self.subject))
                finally:
                    os._exit(0)
            self._pid = pid
        else:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-c", _CHILD, self.spec or "", str(to_child), str(from_child), *sys.path],
                stdin=subprocess.DEVNULL, stdout=2, pass_fds=(to_child, from_child), start_new_session=True,
                env={**os.environ, processes.MARK_VARIABLE: self._mark})
            self._pid = self._proc.pid
        os.close(to_child)
        os.close(from_child)
        self._tasks, self._tasks_fd = os.fdopen(tasks, "w", buffering=1), tasks
        self._answers = answers
        os.set_blocking(answers, False)
        try:
            self._pidfd = os.pidfd_open(self._pid)
        except (AttributeError, OSError):
            self._pidfd = None
        self._buffer, self._pending, self._eof, self._code = b"", collections.deque(), False, None
        _PARENT_FDS.update(fd for fd in (tasks, answers, self._pidfd) if fd is not None)
        processes.enlist(self._pid, self._mark)

    def _become_forked_worker(self, tasks: int, answers: int) -> None:
        os.setsid()
        os.environ[processes.MARK_VARIABLE] = self._mark
        for fd in {tasks, answers} | _PARENT_FDS:
            try:
                os.close(fd)
            except OSError:
                pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # A crash is the expected outcome of some cases: no traceback
        # dump into the parent's stderr (pytest enables faulthandler).
        faulthandler.disable()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(2, 1)

    def _read(self) -> None:
        """What the worker wrote so far, without blocking."""
        while not self._eof:
            try:
                data = os.read(self._answers, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                self._eof = True
                return
            *lines, self._buffer = (self._buffer + data).split(b"\n")
            self._pending.extend(json.loads(line[len(_MARK):]) for line in lines if line.startswith(_MARK))

    def _exited(self) -> bool:
        """Whether the worker's process has ended (not yet reaped when a pidfd tells it)."""
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        if self._proc is not None:
            self._code = self._proc.poll()
        else:
            pid, status = os.waitpid(self._pid, os.WNOHANG)
            self._code = _status_code(status) if pid else None
        return self._code is not None

    def _wait_for(self, deadline: float, answer: bool) -> bool:
        """Wait until the worker answers (``answer``) or its process ends,
        or ``deadline``; whether it ended."""
        while True:
            if answer:
                self._read()
                if any("done" in m for m in self._pending):
                    return False
            if self._exited():
                self._read()  # what it wrote before it ended
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            waits = [] if self._eof or not answer else [self._answers]
            if self._pidfd is not None:
                select.select(waits + [self._pidfd], [], [], left)
            else:
                select.select(waits, [], [], min(left, _POLL_S))

    def _reap(self) -> int:
        """End the worker now (its process group, then whatever carries its
        mark) and its pipes; how its process ended."""
        pid, self._pid = self._pid, None
        processes.discharge(pid)
        processes.end_group(pid)  # before the wait: the group is surely the worker's
        if self._code is None:
            self._code = self._proc.wait() if self._proc is not None else _status_code(os.waitpid(pid, 0)[1])
        processes.end_marked(self._mark)
        for fd in (self._answers, self._pidfd):
            if fd is not None:
                _PARENT_FDS.discard(fd)
                os.close(fd)
        _PARENT_FDS.discard(self._tasks_fd)
        self._close_tasks()
        self._proc = None
        return self._code

    def ask(self, task: dict) -> dict:
        """The outcome of one task: what its function returned, or
        a :class:`~.outcome.Failure`'s JSON when the child died or hung.

        Raises
        ------
        Interrupted
            When SIGINT or SIGTERM arrived (no outcome is a verdict then).
        """
        if self._pid is None:
            self._start()
        try:
            self._tasks.write(json.dumps(task) + "\n")
            self._tasks.flush()
        except OSError:
            pass  # the child is gone: its end is read below
        ended = self._wait_for(time.monotonic() + self.timeout, answer=True)
        while self._pending:
            msg = self._pending.popleft()
            if "done" in msg:
                processes.check_stopping()
                return msg["done"]
        if ended:
            outcome = failure_json(Failure.ended(self._reap()))
        else:
            self._reap()
            outcome = failure_json(Failure.timed_out(self.timeout))
        processes.check_stopping()
        return outcome

    def _close_tasks(self) -> None:
        try:
            self._tasks.close()
        except OSError:
            pass

    def close(self) -> None:
        """End the child: it exits when its task pipe closes, and is killed
        (with whatever it started) when it has not within the timeout."""
        if self._pid is None:
            return
        try:
            _PARENT_FDS.discard(self._tasks_fd)
            self._close_tasks()
            self._wait_for(time.monotonic() + self.timeout, answer=False)
        finally:
            self._reap()

    def kill(self) -> None:
        """Kill the worker's process group now, from any thread: the task it
        serves ends as a crash, which the thread that asked reads."""
        pid = self._pid
        if pid is not None:
            processes.end_group(pid)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None and self._pid is not None:
            self._reap()  # interrupted (Ctrl-C in the caller): no wait for the task at hand
        else:
            self.close()
        return False


def _outcomes(worker: Worker, tasks: Iterable[dict], on_done, stop: threading.Event | None = None) -> list[dict]:
    outcomes = []
    for each in tasks:
        outcome = worker.ask(each)
        if stop is not None and stop.is_set():
            break  # the run was given up: an outcome of a killed worker is no verdict
        outcomes.append(outcome)
        if on_done:
            on_done(each, outcome)
    return outcomes


def run_tasks(tasks: Iterable[dict], spec: str | None = None, subject: Subject | None = None,
              on_done: Callable[[dict, dict], None] | None = None) -> list[dict]:
    """The outcome of each task, in order, from one worker (restarted after
    each crash) for ``spec`` or, without one, forked with ``subject``."""
    with Worker(spec, subject) as worker:
        return _outcomes(worker, tasks, on_done)


def _wait_interruptibly(futures: list) -> None:
    """Wait until every future is done or one has raised (then raise it).

    The wait is cut into waits of _POLL_S: the kernel hands a Ctrl-C or
    SIGTERM to any thread of the process, and when it picks one of the
    pool's, no lock wait of this thread is interrupted, so one long wait
    would see the signal only when every worker's task had ended (never,
    for a task that hangs). Between two waits this thread runs the
    signal's handler."""
    pending = futures
    while pending:
        done, pending = concurrent.futures.wait(pending, timeout=_POLL_S,
                                                return_when=concurrent.futures.FIRST_EXCEPTION)
        for future in done:
            if future.exception() is not None:
                future.result()


def run_groups(groups: list[list[dict]], on_done: Callable[[dict, dict], None] | None = None,
               parallel: int | None = None) -> list[list[dict]]:
    """Each group of tasks in a worker of its own (no other group's imports
    in it), ``parallel`` workers at a time (default: the CPUs). When this
    thread is interrupted (KeyboardInterrupt, :class:`~.processes.Interrupted`),
    every group's worker is killed at once and no group starts after."""
    lock, stop, workers = threading.Lock(), threading.Event(), []

    def done(task, outcome):
        if on_done:
            with lock:
                on_done(task, outcome)

    def group_outcomes(group):
        if stop.is_set():
            return []
        with Worker("") as worker:
            workers.append(worker)
            return _outcomes(worker, group, done, stop)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=parallel or os.cpu_count() or 1)
    try:
        futures = [pool.submit(group_outcomes, group) for group in groups]
        _wait_interruptibly(futures)
        return [f.result() for f in futures]
    except BaseException:
        stop.set()
        for worker in list(workers):
            worker.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def description_of(spec: str, worker: Worker | None = None) -> Description:
    """What the library ``spec`` is, asked of ``worker`` (a :class:`Worker`
    of that spec, kept for what follows) or of a child of its own: its
    import and its adapter run there, never here."""
    asked = task(description_task, spec=spec)
    if worker is not None:
        return Description(spec, worker.ask(asked))
    with Worker(spec) as child:
        return Description(spec, child.ask(asked))
