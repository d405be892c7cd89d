"""How a task ended when its function gave no answer: the child died (a
signal, an exit), hung, or its function raised. One typed value,
:class:`Failure`, written into the outcome that crosses the runner's pipe
by :func:`failure_json` and read back by :func:`failure_of`; the readers
(the checks' results, the exchange matrix, the bench, a library's
description) take the signal and the hang from its fields, never from
its words.

The JSON of a failure (a task's outcome, a report's exchange cell) keeps
the words people read (``{"crashed": "killed by SIGSEGV"}``,
``{"worker_error": "ValueError: ..."}``) and adds what readers use:
``"signal"`` (the number) for a process a signal ended, ``"hung": true``
for a task that did not end in time, ``"exception_type"`` for a function
that raised.
"""

from __future__ import annotations

import dataclasses
import signal as _signals

__all__ = ["Failure", "failure_json", "failure_of", "signal_name"]


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number with no name here."""
    try:
        return _signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclasses.dataclass(frozen=True)
class Failure:
    """A task that gave no answer. ``status``: ``"crashed"`` (its process
    ended: ``signal`` or ``exit_status`` says how), ``"hung"`` (killed
    after ``detail``'s time) or ``"error"`` (its function raised
    ``exception_type``); ``detail``: the words a report shows."""

    status: str
    detail: str
    signal: int | None = None
    exit_status: int | None = None
    exception_type: str | None = None

    @property
    def hung(self) -> bool:
        return self.status == "hung"

    @property
    def crashed(self) -> bool:
        """The process died or hung: the library took the process down."""
        return self.status in ("crashed", "hung")

    @property
    def signal_name(self) -> str | None:
        """``SIGSEGV`` where a signal ended the process, else None."""
        return None if self.signal is None else signal_name(self.signal)

    @classmethod
    def ended(cls, returncode: int) -> Failure:
        """The failure of a child that ended with ``returncode`` (negative:
        the signal that killed it)."""
        if returncode < 0:
            return cls("crashed", f"killed by {signal_name(-returncode)}", signal=-returncode)
        return cls("crashed", f"exited with status {returncode}", exit_status=returncode)

    @classmethod
    def timed_out(cls, seconds: float) -> Failure:
        return cls("hung", f"hung for more than {seconds:.0f} s (killed)")

    @classmethod
    def raised(cls, exception_type: str, message: str) -> Failure:
        return cls("error", f"{exception_type}: {message}", exception_type=exception_type)


def failure_json(failure: Failure) -> dict:
    """The outcome that carries ``failure`` (the inverse of :func:`failure_of`)."""
    if failure.status == "error":
        return {"worker_error": failure.detail, "exception_type": failure.exception_type}
    fields = {"crashed": failure.detail}
    if failure.signal is not None:
        fields["signal"] = failure.signal
    if failure.exit_status is not None:
        fields["exit_status"] = failure.exit_status
    if failure.hung:
        fields["hung"] = True
    return fields


def failure_of(outcome: dict) -> Failure | None:
    """The failure an outcome carries, None for an answer of the task's function."""
    if "worker_error" in outcome:
        return Failure("error", outcome["worker_error"], exception_type=outcome.get("exception_type"))
    if "crashed" in outcome:
        return Failure("hung" if outcome.get("hung") else "crashed", outcome["crashed"], outcome.get("signal"),
                       outcome.get("exit_status"))
    return None
