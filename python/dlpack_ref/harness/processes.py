"""The processes of a run and the signals that stop it, one policy for
``check``, ``bench`` and every call through the runner.

- Every worker is the leader of a session of its own, and carries a mark
  in its environment (:data:`MARK_VARIABLE`) that its descendants inherit.
  When a worker ends, its process group is killed and so is every process
  that still carries its mark, wherever it went (a helper that forked and
  detached, one reparented to init).
- The command line's process is also a child subreaper (Linux): whatever a
  run started and orphaned becomes its child, and is killed and reaped
  before the command exits (:func:`end_children`).
- SIGINT and SIGTERM (:func:`interruptible`): the first kills every live
  worker's process group at once and raises :class:`Interrupted` in the
  main thread; the runner's other threads raise it at their next step, and
  no worker starts after it. The command reports what was done, marks its
  report partial, and exits ``128 + signal`` (130, 143). A second signal
  ends the process at once with the same status.

Linux reads ``/proc``; elsewhere the process groups alone are ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["Interrupted", "MARK_VARIABLE", "interruptible", "stopping", "stop_status", "check_stopping", "new_mark",
           "enlist", "discharge", "end_group", "end_marked", "become_subreaper", "end_children"]

#: The environment variable that marks a worker and its descendants.
MARK_VARIABLE = "DLPACK_REF_WORKER"
_PR_SET_CHILD_SUBREAPER = 36


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: the run stops (a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` of a check takes it)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.signal = signal.Signals(signum).name
        self.exit_status = 128 + signum
        super().__init__(f"interrupted by {self.signal}")


_state: dict = {"signum": None}
_live: dict[int, str] = {}          # pid of each live worker (a session leader) -> its mark
_sequence = iter(range(1, 1 << 62))


def stopping() -> bool:
    """Whether SIGINT or SIGTERM has arrived: no worker starts any more."""
    return _state["signum"] is not None


def stop_status() -> int | None:
    """The exit status of a run a signal stopped (``128 + signal``), None
    when none has arrived."""
    return None if _state["signum"] is None else 128 + _state["signum"]


def check_stopping() -> None:
    """Raise :class:`Interrupted` where a signal has arrived."""
    if _state["signum"] is not None:
        raise Interrupted(_state["signum"])


def new_mark() -> str:
    """A mark no other worker of any run carries."""
    return f"{os.getpid()}.{time.monotonic_ns()}.{next(_sequence)}"


def enlist(pid: int, mark: str) -> None:
    """A worker started: it is killed when a signal arrives. One that starts
    after the signal is killed here, and the caller is interrupted."""
    _live[pid] = mark
    if stopping():
        end_group(pid)
        check_stopping()


def discharge(pid: int) -> None:
    _live.pop(pid, None)


def end_group(pgid: int) -> None:
    """SIGKILL to the process group ``pgid`` (a worker's session), if any
    of it is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _carries(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in b"\0" + f.read()
    except OSError:
        return False


def end_marked(mark: str) -> int:
    """SIGKILL to every process whose environment carries ``mark``; how
    many there were. The environment a process started with is what
    ``/proc`` shows, so that a worker's mark is found in any descendant
    that did not clear its environment, wherever it was reparented."""
    needle = f"\0{MARK_VARIABLE}={mark}\0".encode()
    me, found = os.getpid(), 0
    for _ in range(10):  # a process killed here may have forked meanwhile: look again
        pids = [p for p in _proc_pids() if p != me and _carries(p, needle)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        found += len(pids)
        if not pids:
            break
        time.sleep(0.01)
    return found


def become_subreaper() -> bool:
    """Make this process the child subreaper of what it starts (Linux):
    a descendant whose parent ends becomes this process's child instead of
    init's, and :func:`end_children` finds it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    me, found = os.getpid(), []
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(pid)
    return found


def end_children() -> int:
    """Kill and reap every child of this process, and the children they
    leave (this process being their subreaper); how many there were. Only
    for a process that is the run alone (the command line)."""
    ended = 0
    for _ in range(50):
        children = _children()
        if not children:
            break
        for pid in children:
            _end_child(pid)
        ended += len(children)
    return ended


def _end_child(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def _on_signal(signum, frame) -> None:
    first = _state["signum"] is None
    if first:
        _state["signum"] = signum
    for pid in list(_live):
        end_group(pid)
    if first:
        raise Interrupted(signum)
    # A second signal: the orderly stop is taking too long for the user.
    for mark in list(_live.values()):
        end_marked(mark)
    os.write(2, f"dlpack-ref: {signal.Signals(signum).name} again: stopped at once\n".encode())
    os._exit(128 + (_state["signum"] or signum))


@contextlib.contextmanager
def interruptible():
    """SIGINT and SIGTERM stop the run (see the module's text) inside;
    the handlers before are put back after. Outside the main thread, where
    Python cannot catch signals, it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    _state.update(signum=None)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        _state.update(signum=None)
