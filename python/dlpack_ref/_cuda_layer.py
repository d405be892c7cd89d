"""The CUDA layer as the compiled core calls it: the stream-order rules of
exports and imports (docs/cuda.md), and the allocation and copy calls of
``_cuda_memory``. The core passes what each call needs (pointers, devices,
strides, the memory's ``PendingWork`` record, shared by an Array and all its
views) and a stream parsed once where it entered, as the fields of the
header's ``dlpack_ref_stream`` (plain ints ``sync`` and ``handle``, and
``given`` where it matters: see ``dlpack_ref._streams``); nothing here
reads an Array or parses a stream argument, and nothing here imports the
core.

- ``require()``: raise CUDAUnavailableError naming what is missing;
- ``allocate(device, nbytes, copy_from=None) -> owner`` with ``.ptr`` and
  ``.work``, given back exactly once (to the device's memory pool, a cache
  or the driver), in the order of the copy ``copy_from`` names;
- ``copy_array(dst, src, shape, itemsize, nbytes, given, sync, handle)``
  with two ``Block`` descriptions, and ``memset(...)``;
- ``export_sync(work, device_type, device_id, given, sync, handle)``: what
  ``__dlpack__`` does for the consumer's stream; ``export_copy(...)`` the
  same for a copy it made;
- ``host_wait(work)``: before the host reads pinned or managed memory;
- ``imported(work, device_type, device_id, handle)``: a producer ordered
  its data on stream ``handle``;
- ``consumer_stream_for(source, target)``: the stream from_dlpack passes,
  as ``(sync, handle)`` or None;
- the exchange API: ``current_stream_handle(device_id)``,
  ``export_no_sync``, ``record_current``, ``wait_for_producer``.

Importing this module needs neither cuda-python nor a driver.
"""

from __future__ import annotations

from ._cuda_driver import runtime
from ._cuda_memory import Block, allocate, copy_array, memset
from ._cuda_streams import PendingWork, current_stream
from ._devices import CUDA_DEVICE_BOUND, HOST_ACCESSIBLE
from ._streams import LEGACY_STREAM, PER_THREAD_STREAM

__all__ = ["Block", "PendingWork", "allocate", "consumer_stream_for", "copy_array", "current_stream_handle",
           "export_copy", "export_no_sync", "export_sync", "host_wait", "imported", "memset", "record_current",
           "require", "wait_for_producer"]


def require() -> None:
    """Load the driver; CUDAUnavailableError says whether cuda-python, the
    NVIDIA driver or a CUDA device is missing."""
    runtime()


def _waiter_device(device_type: int, device_id: int, handle: int, rt) -> int:
    """The device whose default streams 1 and 2 name for memory on
    ``(device_type, device_id)``: its own GPU, or for pinned memory the
    current device (DLPack: the consumer's stream is current there)."""
    if device_type in CUDA_DEVICE_BOUND:
        return device_id
    return rt.stream_device(handle, 0) if handle > PER_THREAD_STREAM else rt.current_device()


def export_sync(work: PendingWork, device_type: int, device_id: int, given: int, sync: int, handle: int) -> None:
    """Order the consumer's stream after the memory's pending work.

    Parameters
    ----------
    work
        The memory's pending-work record.
    device_type, device_id
        Where the memory is (a device of the CUDA family).
    given, sync, handle
        The stream as parsed where it entered. ``sync`` 0: nothing. Not
        ``given`` (stream=None) for memory the host reads (pinned,
        managed): the host may read it on return, so the host waits for the
        pending work (an event or stream sync, never a device sync).
        Otherwise an event wait on stream ``handle``; the host never
        blocks.
    """
    if not sync or work.idle:
        return
    if not given and device_type in HOST_ACCESSIBLE:
        work.wait_on_host()
        return
    rt = runtime()
    work.order_before(handle, _waiter_device(device_type, device_id, handle, rt))


def export_copy(work: PendingWork, device_type: int, device_id: int, given: int, sync: int, handle: int) -> None:
    """Order the consumer's stream after the copy an export just made
    (``copy=True``, or a ``dl_device`` move) into memory of the CUDA
    family on ``(device_type, device_id)``, as ``export_sync`` orders it
    after any write: the consumer uses the copy there, so handles 1 and 2
    name default streams of the copy's device, while the copy ran on a
    default stream of the source's device (see ``copy_array``). A handle
    (> 2) is the stream the copy ran on: nothing more to order."""
    if handle > PER_THREAD_STREAM:
        return
    export_sync(work, device_type, device_id, given, sync, handle)


def host_wait(work: PendingWork) -> None:
    """Block until the host can read memory with this record (pinned or
    managed memory): the pending write is done."""
    work.wait_on_host()


def imported(work: PendingWork, device_type: int, device_id: int, handle: int) -> None:
    """A producer ordered its data on the consumer's stream ``handle``
    (one with sync): that is the memory's last write now. An event is
    recorded on it at once, so the stream may be destroyed afterwards and a
    per-thread default stream means the importing thread's."""
    rt = runtime()
    work.record(handle, _waiter_device(device_type, device_id, handle, rt))


def consumer_stream_for(source, target) -> tuple[int, int] | None:
    """The stream from_dlpack passes to a producer whose data is on
    ``source`` (a Device of the CUDA family) for use on ``target``, as the
    fields ``(sync, handle)`` of the stream set with ``stream()`` when it
    belongs to the source's device (DLPack: the stream is on the producer's
    device), else None (none given: the legacy default stream)."""
    dev = source.id if source.type in CUDA_DEVICE_BOUND else None
    return current_stream(dev)


def current_stream_handle(device_id: int):
    """The consumer's current stream for ``device_id`` as a CUstream value
    (what the C exchange API's current_work_stream reports), or None for
    the legacy default stream / no sync."""
    current = current_stream(device_id)
    return current[1] if current is not None and current[0] else None


def _current_work_stream(device_type: int, device_id: int) -> int:
    current = current_stream(device_id if device_type in CUDA_DEVICE_BOUND else None)
    return current[1] if current is not None and current[0] else LEGACY_STREAM


def export_no_sync(work: PendingWork, device_type: int, device_id: int) -> None:
    """The exchange API hands the memory out without synchronizing: order
    the stream that ``current_work_stream`` reports for the device after
    the pending work (an event wait), so a consumer that waits for that
    stream sees the data."""
    if work.idle:
        return
    handle = _current_work_stream(device_type, device_id)
    work.order_before(handle, _waiter_device(device_type, device_id, handle, runtime()))


def record_current(work: PendingWork, device_type: int, device_id: int) -> None:
    """The exchange API received memory from a library that enqueued its
    work on the stream ``current_work_stream`` reported: that is the last
    write."""
    handle = _current_work_stream(device_type, device_id)
    work.record(handle, _waiter_device(device_type, device_id, handle, runtime()))


def wait_for_producer(work: PendingWork, device_type: int, device_id: int, producer_stream: int) -> None:
    """An exchange-API import (no sync by the producer): the producer's
    current work stream (0/NULL: its legacy default) holds the last write;
    our current stream (the one set with ``stream()``, else the legacy
    default) waits for it and becomes the last write; with ``stream(-1)``
    nothing waits."""
    rt = runtime()
    producer = producer_stream or LEGACY_STREAM
    with work.lock:     # one read-modify-write of the record
        work.record(producer, _waiter_device(device_type, device_id, producer, rt))
        current = current_stream(device_id if device_type in CUDA_DEVICE_BOUND else None)
        if current is None:
            ours = LEGACY_STREAM
        elif not current[0]:
            return
        else:
            ours = current[1]
        dev = _waiter_device(device_type, device_id, ours, rt)
        work.order_before(ours, dev)
        work.record(ours, dev)
