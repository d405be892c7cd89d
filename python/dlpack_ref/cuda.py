"""CUDA through cuda-python (``cuda.bindings.driver``): device, managed and
pinned memory, stream-ordered synchronization and cross-device copies.

Public: ``stream`` (set the consumer's current stream), ``is_available``,
``CUDAUnavailableError``, ``CUDAError``. The rest of this module is the
interface the Cython core calls (documented in docs/cuda.md):

- ``require()``: raise CUDAUnavailableError naming what is missing;
- ``allocate(device, nbytes) -> owner`` with ``.ptr``, freed exactly once;
- ``copy_array(dst, src, stream, *, dst_is_new=True)``;
- ``export_sync(array, stream)``: order the consumer's stream after the
  array's stream (event record + wait);
- ``consumer_stream_for(source, target)``: the stream from_dlpack passes;
- ``current_stream_handle(device_id)``: for the C exchange API;
- ``wait_for_producer(array, producer_stream)``: exchange-API imports;
- ``synchronize_for_host(array)`` and ``memset(array, value, nbytes)``.

Importing this module needs neither cuda-python nor a driver; the first
CUDA request loads them.
"""

from __future__ import annotations

from ._cuda_driver import CUDAError, CUDAUnavailableError, LEGACY_STREAM, runtime
from ._cuda_memory import allocate, copy_array, memset, synchronize_for_host
from ._cuda_streams import NO_SYNC, current_stream, normalize, stream, stream_handle

__all__ = ["CUDAError", "CUDAUnavailableError", "is_available", "stream"]

_CUDA_DEVICE_TYPES = (2, 13)  # CUDA, CUDA_MANAGED: memory with a device id


def require() -> None:
    """Load the driver; CUDAUnavailableError says whether cuda-python, the
    NVIDIA driver or a CUDA device is missing."""
    runtime()


def is_available() -> bool:
    """Whether CUDA can be used here (cuda-python, a driver and a device)."""
    try:
        runtime()
    except CUDAUnavailableError:
        return False
    return True


def _array_device(array, handle: int, rt) -> int:
    """The device whose default streams the stream values for `array` name:
    its own device, or for pinned memory the stream's device (a handle) or
    the current device (a default stream)."""
    dev = array.device
    if dev.type in _CUDA_DEVICE_TYPES:
        return dev.id
    return rt.stream_device(handle, 0) if handle > 2 else rt.current_device()


def export_sync(array, stream) -> None:
    """Make the consumer's ``stream`` wait for the work pending on the
    array's stream: an event recorded on ``array._stream`` and waited on by
    the consumer's stream; nothing when they are the same stream or when
    ``stream`` is -1. Never blocks the host, never syncs the device."""
    handle = stream_handle(stream)
    if handle == NO_SYNC:
        return
    producer = normalize(array._stream)
    if handle == producer:
        return
    rt = runtime()
    # Handles > 2 carry their own context; only 1 and 2 need the device.
    dev = _array_device(array, handle if handle > 2 else producer, rt)
    rt.order(handle, dev, producer, dev)


def consumer_stream_for(source, target):
    """The ``stream`` from_dlpack passes to a producer whose data is on
    ``source`` (a Device of the CUDA family) for use on ``target``: the
    stream set with ``stream()`` when it belongs to the source's device
    (DLPack: the stream is on the producer's device), -1 when no sync was
    asked, else None (the legacy default stream)."""
    dev = source.id if int(source.type) in _CUDA_DEVICE_TYPES else None
    return current_stream(dev)


def current_stream_handle(device_id: int):
    """The consumer's current stream for ``device_id`` as a CUstream value
    (what the C exchange API's current_work_stream reports), or None for
    the legacy default stream / no stream."""
    h = current_stream(device_id)
    return None if h is None or h == NO_SYNC else h


def wait_for_producer(array, producer_stream: int) -> None:
    """An exchange-API import (no sync by the producer): make our current
    stream (the one set with ``stream()``, else the legacy default) wait
    for the producer's current work stream (0/NULL: its legacy default),
    and remember it as the Array's stream."""
    rt = runtime()
    producer = producer_stream or LEGACY_STREAM
    dev = _array_device(array, producer, rt)
    ours = current_stream(dev)
    if ours == NO_SYNC:
        array._stream = producer if producer != LEGACY_STREAM else 0
        return
    ours = ours or LEGACY_STREAM
    if ours != producer:
        rt.order(ours, dev, producer, dev)
    array._stream = 0 if ours == LEGACY_STREAM else ours
