"""The stream model (docs/cuda.md): the record of the work pending on a
block of memory, and the consumer's current stream (set by
``dlpack_ref.cuda.stream``, which checks its value).
"""

from __future__ import annotations

import contextvars
import os
import threading
import weakref

from ._cuda_driver import check, runtime
from ._streams import LEGACY_STREAM

__all__ = ["PendingWork", "current_stream", "enter_stream", "leave_stream"]


class PendingWork:
    """The last write enqueued on one block of CUDA-family memory: every
    Array on the block (the owner and all its views) holds this same
    record, so a write through any of them is seen by all.

    Three states: nothing pending; the write is on the legacy default
    stream of ``device`` (kept as that, since the legacy stream of a
    context never dies and is the same on every thread); or an event
    recorded right after the write, for every other stream, so a
    per-thread default stream is resolved on the thread that wrote, and a
    stream that is destroyed afterwards is never used again.

    Threads: the state is one attribute (``_last``), replaced whole, so
    ``idle`` reads it without a lock and never sees a half-made state.
    Every method that reads the state and acts on it (waits for its event,
    re-records it, gives it back to the pool) holds ``lock``, and so does a
    writer from the wait for the previous write until its own record
    (``copy_array``, ``memset``): two threads writing the same block at
    once leave a record that covers both writes, and an event is never
    waited on while another thread re-records it or hands it to another
    block. ``lock`` is reentrant (the methods call each other) and is only
    ever held for one record at a time, so two records never deadlock.
    """

    __slots__ = ("_last", "_uses", "lock", "__weakref__")

    def __init__(self, legacy_device: int = -1):
        """Nothing pending, or (``legacy_device`` >= 0) the last write is on
        that device's legacy default stream."""
        # None: nothing pending; (None, device): on the legacy stream of
        # device; (event, device): an event of device recorded after it.
        self._last = None if legacy_device < 0 else (None, legacy_device)
        self._uses = []     # (event, device) after reads by copies enqueued here
        self.lock = threading.RLock()
        _EVERY_RECORD.add(self)

    @property
    def idle(self) -> bool:
        """Whether no write is pending (nothing to wait for)."""
        return self._last is None

    def record(self, handle: int, device_id: int, *, lazy_legacy: bool = True) -> None:
        """The last write was enqueued on stream ``handle`` (1 and 2 name
        default streams of ``device_id``; a handle > 2 carries its own
        device), by the calling thread, just now. ``lazy_legacy=False``
        records an event on the legacy stream too."""
        with self.lock:
            old = self._last
            if handle == LEGACY_STREAM and lazy_legacy:
                self._last = (None, device_id)
                _give_back(old)
                return
            rt = runtime()
            dev = rt.stream_device(handle, device_id)
            # The event of the last write is recorded again when it is of
            # the same device (a wait already enqueued on it waits for the
            # record made before it); another device's goes back.
            reuse = old is not None and old[0] is not None and old[1] == dev
            ev = _record_event(rt, old[0] if reuse else None, handle, dev)
            self._last = (ev, dev)
            if not reuse:
                _give_back(old)

    def _with_pending(self, act, *args) -> None:
        """``act(last, runtime, *args)`` under the lock, ``last`` the pending
        write; nothing when none is pending (looked at first without the
        lock: nothing pending, the common case, takes no lock)."""
        if self._last is None:
            return
        with self.lock:
            last = self._last
            if last is not None:
                act(last, runtime(), *args)

    def order_before(self, waiter: int, device_id: int) -> None:
        """Make stream ``waiter`` (1 and 2: of ``device_id``) wait for the
        pending write: ``cuStreamWaitEvent``, never a host wait; nothing
        when the write is on that same legacy stream."""
        self._with_pending(self._order_before, waiter, device_id)

    def _order_before(self, last, rt, waiter: int, device_id: int) -> None:
        if last[0] is None:
            if waiter == LEGACY_STREAM and last[1] == device_id:
                return
            self.record_legacy_event()
        dev = rt.stream_device(waiter, device_id)
        pushed = rt.enter(dev)
        try:
            check(rt.driver.cuStreamWaitEvent(waiter, self._last[0], 0), "cuStreamWaitEvent")
        finally:
            rt.leave(pushed)

    def record_legacy_event(self) -> None:
        """Turn a write on a legacy stream into an event recorded there now
        (later writes by others do not matter: only what came before)."""
        with self.lock:
            last = self._last
            if last is not None and last[0] is None:
                # The state stays "on the legacy stream" until the event
                # replaces it, and stays so when recording fails.
                self.record(LEGACY_STREAM, last[1], lazy_legacy=False)

    def wait_on_host(self) -> None:
        """Block the host until the pending write is done (an event or a
        legacy-stream sync, never a device sync); nothing pending after."""
        self._with_pending(self._wait_on_host)

    def _wait_on_host(self, last, rt) -> None:
        ev, dev = last
        if ev is None:
            rt.synchronize(LEGACY_STREAM, dev)
            self._last = None
            return
        pushed = rt.enter(dev)
        try:
            check(rt.driver.cuEventSynchronize(ev), "cuEventSynchronize")
        finally:
            rt.leave(pushed)
        self._last = None
        _give_back(last)

    def record_use(self, handle: int, device_id: int) -> None:
        """A copy enqueued here on stream ``handle`` reads the memory: the
        memory must outlive it (``wait_unused``). Finished uses are
        forgotten as new ones come."""
        rt = runtime()
        dev = rt.stream_device(handle, device_id)
        ev = _record_event(rt, None, handle, dev)
        with self.lock:
            uses = self._uses
            if len(uses) >= 8:
                busy = []
                for used, used_dev in uses:
                    if rt.driver.cuEventQuery(used)[0]:
                        busy.append((used, used_dev))
                    else:
                        rt.give_event(used_dev, used)
                uses[:] = busy
            uses.append((ev, dev))

    def wait_unused(self) -> None:
        """Block until the last write and every recorded use are done:
        before the memory is freed."""
        with self.lock:
            self.wait_on_host()
            uses, self._uses = self._uses, []
            if not uses:
                return
            rt = runtime()
            for ev, dev in uses:
                pushed = rt.enter(dev)
                try:
                    check(rt.driver.cuEventSynchronize(ev), "cuEventSynchronize")
                finally:
                    rt.leave(pushed)
                rt.give_event(dev, ev)

    def order_all_before(self, waiter: int, device_id: int) -> None:
        """Make stream ``waiter`` (1 and 2: of ``device_id``) wait for the
        pending write and every recorded use (event waits, the host never
        blocks); nothing is pending here after. Before the memory is freed
        or handed to a new owner in the order of ``waiter``."""
        with self.lock:
            self.order_before(waiter, device_id)
            last, self._last = self._last, None
            _give_back(last)
            uses, self._uses = self._uses, []
            if not uses:
                return
            rt = runtime()
            d = rt.driver
            dev = rt.stream_device(waiter, device_id)
            pushed = rt.enter(dev)
            try:
                for ev, _ in uses:
                    check(d.cuStreamWaitEvent(waiter, ev, 0), "cuStreamWaitEvent")
            finally:
                rt.leave(pushed)
                for ev, used_dev in uses:
                    rt.give_event(used_dev, ev)

    @property
    def unused(self) -> bool:
        """Whether neither a write nor a recorded use is pending."""
        return self._last is None and not self._uses

    def __del__(self):
        _give_back(self._last)
        try:
            rt = runtime()
            for ev, dev in self._uses:
                rt.give_event(dev, ev)
        except Exception:
            pass

    def __repr__(self):
        last = self._last
        if last is None:
            return "<PendingWork idle>"
        if last[0] is None:
            return f"<PendingWork on the legacy stream of cuda:{last[1]}>"
        return f"<PendingWork event {int(last[0]):#x} of cuda:{last[1]}>"


def _give_back(last) -> None:
    """Return the event of a state no record holds any more to the pool."""
    if last is not None and last[0] is not None:
        try:
            runtime().give_event(last[1], last[0])
        except Exception:
            pass


def _record_event(rt, event, handle: int, device_id: int):
    """Record ``event`` (None: one from the pool) on stream ``handle`` of
    ``device_id`` and return it; a pool event goes back on failure."""
    ev = event if event is not None else rt.take_event(device_id)
    pushed = rt.enter(device_id)
    try:
        out = rt.driver.cuEventRecord(ev, handle)
    finally:
        rt.leave(pushed)
    if out[0]:
        if event is None:
            rt.give_event(device_id, ev)
        check(out, "cuEventRecord")
    return ev


# Every live record, so that a forked child can give each a fresh lock: one
# another thread held at the fork would be held forever in the child.
_EVERY_RECORD: weakref.WeakSet = weakref.WeakSet()


def _fresh_locks_in_child() -> None:
    for record in list(_EVERY_RECORD):
        record.lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_locks_in_child)


# --- the consumer's current stream -------------------------------------------

# (sync, handle, device of the handle or None for 1 and 2) set by `stream`:
# the fields of the header's parse, as it left them.
_current: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("dlpack_ref_cuda_stream", default=None)

def enter_stream(value: tuple):
    """Make ``value`` (sync, handle, device of the handle or None for 1 and
    2) the current stream of this thread or task; returns the token that
    ``leave_stream`` restores the previous one with."""
    return _current.set(value)


def leave_stream(token) -> None:
    """Restore the current stream that ``enter_stream`` replaced."""
    _current.reset(token)


def current_stream(device_id: int | None) -> tuple[int, int] | None:
    """The consumer's stream for data on CUDA device ``device_id`` (None:
    a device-agnostic location such as pinned host memory), as the fields
    ``(sync, handle)`` of the stream set with ``stream`` when it applies
    there, else None (none given: the legacy default stream)."""
    value = _current.get()
    if value is None:
        return None
    sync, handle, dev = value
    if dev is not None and device_id is not None and dev != device_id:
        return None
    return sync, handle
