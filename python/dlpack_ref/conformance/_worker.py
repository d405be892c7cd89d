"""Tasks run in a child process, so that a crash is a result, not the end of
the run. One worker serves a list of tasks; when it dies (a signal, an abort)
or hangs, the task in flight is reported as crashed and a fresh worker takes
the rest."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from typing import Callable

MARK = "\x1edlpack-ref-conformance "
TASK_TIMEOUT_S = 60.0


def serve(tasks_json: str) -> None:
    """Child side: run each task and print its outcome on a marked line."""
    from . import _tasks
    for task in json.loads(tasks_json):
        print(MARK + json.dumps({"start": task}), flush=True)
        try:
            outcome = _tasks.run(task)
        except BaseException as e:  # a task must always answer
            outcome = {"worker_error": f"{type(e).__name__}: {e}"}
        print(MARK + json.dumps({"done": outcome}, default=repr), flush=True)


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def run_tasks(tasks: list[dict], on_done: Callable[[dict, dict], None] | None = None) -> list[dict]:
    """Parent side: the outcome of each task, in order. A task whose worker
    died gets ``{"crashed": "<how>"}``; one that hung, ``{"crashed": "hung ..."}``."""
    outcomes: list[dict] = []
    pending = list(tasks)
    while pending:
        proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from dlpack_ref.conformance._worker import serve; serve(sys.argv[1])",
             json.dumps(pending)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue = queue.Queue()

        def pump(stream=proc.stdout):
            for line in stream:
                if line.startswith(MARK):
                    lines.put(json.loads(line[len(MARK):]))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        in_flight = None
        while True:
            try:
                msg = lines.get(timeout=TASK_TIMEOUT_S)
            except queue.Empty:
                proc.kill()
                proc.wait()
                outcome = {"crashed": f"hung for more than {TASK_TIMEOUT_S:.0f} s (killed)"}
                break
            if msg is None:
                proc.wait()
                outcome = {"crashed": _signal_name(proc.returncode)} if in_flight is not None else None
                break
            if "start" in msg:
                in_flight = msg["start"]
                continue
            outcomes.append(msg["done"])
            if on_done:
                on_done(pending[0], msg["done"])
            pending.pop(0)
            in_flight = None
        if outcome is not None and pending:
            outcomes.append(outcome)
            if on_done:
                on_done(pending[0], outcome)
            pending.pop(0)
        elif outcome is None and pending:
            # the worker ended between tasks without a crash report: say so
            outcomes.append({"crashed": _signal_name(proc.returncode)})
            pending.pop(0)
    return outcomes
