"""The stream model (docs/cuda.md): the record of the work pending on a
block of memory, and the consumer's current stream.

Stream values are checked by ``dlpack_ref._streams.stream_handle``.
"""

from __future__ import annotations

import contextvars

from ._cuda_driver import check, runtime
from ._streams import LEGACY_STREAM, NO_SYNC, PER_THREAD_STREAM, stream_handle

__all__ = ["PendingWork", "stream", "current_stream", "set_context_counter"]


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
    """

    __slots__ = ("_event", "_event_device", "_legacy_device", "_uses", "__weakref__")

    def __init__(self, legacy_device: int = -1):
        """Nothing pending, or (``legacy_device`` >= 0) the last write is on
        that device's legacy default stream."""
        self._event = None
        self._event_device = -1
        self._legacy_device = legacy_device
        self._uses = []     # (event, device) after reads by copies enqueued here

    @property
    def idle(self) -> bool:
        """Whether no write is pending (nothing to wait for)."""
        return self._event is None and self._legacy_device < 0

    def record(self, handle: int, device_id: int, *, lazy_legacy: bool = True) -> None:
        """The last write was enqueued on stream ``handle`` (1 and 2 name
        default streams of ``device_id``; a handle > 2 carries its own
        device), by the calling thread, just now. ``lazy_legacy=False``
        records an event on the legacy stream too."""
        if handle == NO_SYNC:
            raise ValueError("a write is enqueued on a stream, not on -1")
        if handle == LEGACY_STREAM and lazy_legacy:
            self._drop_event()
            self._legacy_device = device_id
            return
        rt = runtime()
        dev = rt.stream_device(handle, device_id)
        if self._event is not None and self._event_device != dev:
            self._drop_event()
        self._event = _record_event(rt, self._event, handle, dev)
        self._event_device, self._legacy_device = dev, -1

    def order_before(self, waiter: int, device_id: int) -> None:
        """Make stream ``waiter`` (1 and 2: of ``device_id``) wait for the
        pending write: ``cuStreamWaitEvent``, never a host wait; nothing
        when the write is on that same legacy stream."""
        if self.idle:
            return
        rt = runtime()
        if self._legacy_device >= 0:
            if waiter == LEGACY_STREAM and self._legacy_device == device_id:
                return
            self.record_legacy_event()
        d = rt.driver
        dev = rt.stream_device(waiter, device_id)
        pushed = rt.enter(dev)
        try:
            check(d.cuStreamWaitEvent(waiter, self._event, 0), "cuStreamWaitEvent")
        finally:
            rt.leave(pushed)

    def record_legacy_event(self) -> None:
        """Turn a write on a legacy stream into an event recorded there now
        (later writes by others do not matter: only what came before)."""
        device_id = self._legacy_device
        self._legacy_device = -1
        try:
            self.record(LEGACY_STREAM, device_id, lazy_legacy=False)
        except BaseException:
            self._legacy_device = device_id
            raise

    def wait_on_host(self) -> None:
        """Block the host until the pending write is done (an event or a
        legacy-stream sync, never a device sync); nothing pending after."""
        if self.idle:
            return
        rt = runtime()
        if self._legacy_device >= 0:
            rt.synchronize(LEGACY_STREAM, self._legacy_device)
            self._legacy_device = -1
            return
        pushed = rt.enter(self._event_device)
        try:
            check(rt.driver.cuEventSynchronize(self._event), "cuEventSynchronize")
        finally:
            rt.leave(pushed)
        self._drop_event()

    def record_use(self, handle: int, device_id: int) -> None:
        """A copy enqueued here on stream ``handle`` reads the memory: the
        memory must outlive it (``wait_unused``). Finished uses are
        forgotten as new ones come."""
        rt = runtime()
        dev = rt.stream_device(handle, device_id)
        ev = _record_event(rt, None, handle, dev)
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
        self.order_before(waiter, device_id)
        self._drop_event()
        self._legacy_device = -1
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
        return self.idle and not self._uses

    def _drop_event(self) -> None:
        ev, self._event = self._event, None
        if ev is not None:
            try:
                runtime().give_event(self._event_device, ev)
            except Exception:
                pass

    def __del__(self):
        self._drop_event()
        try:
            rt = runtime()
            for ev, dev in self._uses:
                rt.give_event(dev, ev)
        except Exception:
            pass

    def __repr__(self):
        if self._legacy_device >= 0:
            return f"<PendingWork on the legacy stream of cuda:{self._legacy_device}>"
        if self._event is not None:
            return f"<PendingWork event {int(self._event):#x} of cuda:{self._event_device}>"
        return "<PendingWork idle>"


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


# --- the consumer's current stream -------------------------------------------

# (handle, device of the handle or None for 1, 2 and -1) set by `stream`.
_current: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("dlpack_ref_cuda_stream", default=None)

# The core registers a function told +1 / -1 as stream contexts are entered
# and left, so its from_dlpack keeps a fast path while none is active.
_context_counter = None


def set_context_counter(fn) -> None:
    """Register ``fn(delta)``, called with +1 and -1 as ``stream`` blocks
    are entered and left (the core's from_dlpack fast path)."""
    global _context_counter
    _context_counter = fn


class stream:
    """Set the consumer's current CUDA stream for this thread (or task:
    a contextvar), as a context manager::

        with dlpack_ref.cuda.stream(s):          # s: int handle, 1, 2, -1,
            a = dlpack_ref.from_dlpack(x)        # or __cuda_stream__ object

    Inside, ``from_dlpack`` passes ``s`` to producers whose data is on the
    stream's device (so the producer orders its pending work before ``s``,
    or enqueues a requested copy on it), waits for exchange-API producers on
    ``s``, and the Array's exchange API reports ``s`` as its current work
    stream. ``-1`` asks producers not to synchronize. A handle > 2 applies
    to its own device only; on other devices the legacy default stream is
    used. Nestable; the previous stream is restored on exit.
    """

    __slots__ = ("_value", "_tokens")

    def __init__(self, s):
        handle = stream_handle(s)
        self._value = (handle, None)
        self._tokens = []

    def __enter__(self):
        handle, _ = self._value
        if handle > PER_THREAD_STREAM and self._value[1] is None:
            rt = runtime()
            self._value = (handle, rt.stream_device(handle, 0))
        self._tokens.append(_current.set(self._value))
        if _context_counter is not None:
            _context_counter(1)
        return self

    def __exit__(self, *exc):
        _current.reset(self._tokens.pop())
        if _context_counter is not None:
            _context_counter(-1)
        return False


def current_stream(device_id: int | None):
    """The consumer's stream for data on CUDA device ``device_id`` (None:
    a device-agnostic location such as pinned host memory): the handle set
    with ``stream`` when it applies there, -1 when no sync was asked, else
    None (the legacy default stream)."""
    value = _current.get()
    if value is None:
        return None
    handle, dev = value
    if dev is not None and device_id is not None and dev != device_id:
        return None
    return handle
