"""The one child-process runner: every call into a library under check or
benchmark (its import included) runs in a child process, so that a crash,
a hang or an exit is an outcome instead of the end of the run.

A :class:`Worker` is one child serving tasks one at a time over pipes. A
worker for a spec (a library name, ``module``, ``module:attr``) is a fresh
interpreter that imports nothing of the parent and builds the subjects its
tasks name; a worker for a subject that exists only in this process (a
lambda, a factory defined in a test) is a forked copy of it. When a worker
dies (a signal, an abort, an exit) or a task hangs, that task's outcome is
``{"crashed": how}`` and a fresh worker takes the next task.

A task is a dict naming its function, ``"module:function"``, which the
child calls with the task and a :class:`Subjects` (the subject of the
worker, or any spec's, built on first use). Whatever a library writes
goes to the parent's stderr, at the file-descriptor level: a child's
stdout is the parent's stderr.
"""

from __future__ import annotations

import concurrent.futures
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

from .observe import exc_name, short
from .registry import Described, subject
from .subject import Subject

__all__ = ["TASK_TIMEOUT_S", "Subjects", "Worker", "described", "run_tasks", "run_groups", "how_it_ended"]

MARK = "\x1edlpack-ref-runner "
TASK_TIMEOUT_S = 60.0


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


def _perform(task: dict, subjects: Subjects) -> dict:
    module, _, attr = task["function"].partition(":")
    return getattr(importlib.import_module(module), attr)(task, subjects)


def _serve(read_fd: int, write_fd: int, subjects: Subjects) -> None:
    """Child side: answer each task line on read_fd with marked lines on write_fd."""
    with os.fdopen(read_fd, "r") as tasks, os.fdopen(write_fd, "w", buffering=1) as out:
        for line in tasks:
            task = json.loads(line)
            out.write(MARK + json.dumps({"start": task.get("function")}) + "\n")
            try:
                outcome = _perform(task, subjects)
            except BaseException as e:  # a task must always answer, SystemExit included
                outcome = {"worker_error": f"{exc_name(e)}: {short(e)}"}
            out.write(MARK + json.dumps({"done": outcome}, default=repr) + "\n")


def serve_spec(spec: str, read_fd: str, write_fd: str) -> None:
    """Entry point of a fresh worker interpreter."""
    _serve(int(read_fd), int(write_fd), Subjects(spec=spec or None))


def how_it_ended(returncode: int) -> str:
    """A child's end in words: ``killed by SIGSEGV``, ``exited with status 3``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class Worker:
    """A child process serving tasks: :meth:`ask` sends one and waits for
    its outcome; a worker that died is started afresh by the next task."""

    def __init__(self, spec: str | None = None, subject: Subject | None = None,
                 timeout: float | None = None):
        self.spec, self.subject = spec, subject
        self.timeout = TASK_TIMEOUT_S if timeout is None else timeout
        self._proc = self._pid = None

    def _start(self) -> None:
        to_child, tasks = os.pipe()
        answers, from_child = os.pipe()
        if self.subject is not None and self.spec is None:
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller's code
                try:
                    os.close(tasks)
                    os.close(answers)
                    # A crash is the expected outcome of some cases: no traceback
                    # dump into the parent's stderr (pytest enables faulthandler).
                    faulthandler.disable()
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    os.dup2(2, 1)
                    _serve(to_child, from_child, Subjects(subject=self.subject))
                finally:
                    os._exit(0)
            self._pid = pid
        else:
            self._proc = subprocess.Popen(
                [sys.executable, "-c",
                 "import sys; from dlpack_ref.harness.runner import serve_spec; serve_spec(*sys.argv[1:])",
                 self.spec or "", str(to_child), str(from_child)],
                stdin=subprocess.DEVNULL, stdout=2, pass_fds=(to_child, from_child))
        os.close(to_child)
        os.close(from_child)
        self._tasks = os.fdopen(tasks, "w", buffering=1)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(os.fdopen(answers), self._lines), daemon=True).start()

    @staticmethod
    def _pump(stream, lines) -> None:
        with stream:
            for line in stream:
                if line.startswith(MARK):
                    lines.put(json.loads(line[len(MARK):]))
        lines.put(None)

    def _wait(self) -> int:
        if self._proc is not None:
            code = self._proc.wait()
        else:
            _, status = os.waitpid(self._pid, 0)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self._proc = self._pid = None
        return code

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
        elif self._pid is not None:
            os.kill(self._pid, signal.SIGKILL)

    def ask(self, task: dict) -> dict:
        """The outcome of one task: what its function returned, or
        ``{"crashed": how}`` when the child died or hung."""
        if self._proc is None and self._pid is None:
            self._start()
        try:
            self._tasks.write(json.dumps(task) + "\n")
            self._tasks.flush()
        except OSError:
            pass  # the child is gone: its end is read below
        while True:
            try:
                msg = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                self._kill()
                self._wait()
                return {"crashed": f"hung for more than {self.timeout:.0f} s (killed)"}
            if msg is None:
                self._close_pipe()
                return {"crashed": how_it_ended(self._wait())}
            if "done" in msg:
                return msg["done"]

    def _close_pipe(self) -> None:
        try:
            self._tasks.close()
        except OSError:
            pass

    def close(self) -> None:
        """End the child (it exits when its task pipe closes)."""
        if self._proc is None and self._pid is None:
            return
        self._close_pipe()
        try:
            if self._proc is not None:
                self._proc.wait(timeout=self.timeout)
            else:
                self._wait()
        except subprocess.TimeoutExpired:
            self._kill()
        self._proc = self._pid = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def run_tasks(tasks: Iterable[dict], spec: str | None = None, subject: Subject | None = None,
              on_done: Callable[[dict, dict], None] | None = None) -> list[dict]:
    """The outcome of each task, in order, from one worker (restarted after
    each crash) for ``spec`` or, without one, forked with ``subject``."""
    outcomes = []
    with Worker(spec, subject) as worker:
        for task in tasks:
            outcomes.append(worker.ask(task))
            if on_done:
                on_done(task, outcomes[-1])
    return outcomes


def run_groups(groups: list[list[dict]], on_done: Callable[[dict, dict], None] | None = None,
               parallel: int | None = None) -> list[list[dict]]:
    """Each group of tasks in a worker of its own (no other group's imports
    in it), ``parallel`` workers at a time (default: the CPUs)."""
    lock = threading.Lock()

    def done(task, outcome):
        if on_done:
            with lock:
                on_done(task, outcome)

    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda group: run_tasks(group, spec="", on_done=done), groups))


def described(spec: str, worker: Worker | None = None) -> Described:
    """What the library ``spec`` is, asked of ``worker`` (a :class:`Worker`
    of that spec, kept for what follows) or of a child of its own: its
    import and its adapter run there, never here."""
    task = {"function": "dlpack_ref.harness.registry:describe", "spec": spec}
    if worker is not None:
        return Described(spec, worker.ask(task))
    with Worker(spec) as child:
        return Described(spec, child.ask(task))
