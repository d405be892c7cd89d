"""Streams: which ``stream`` values a producer takes, and, for CUDA memory,
that the consumer's stream is ordered after the producer's pending work
(checked by data, :mod:`..cuda_lab`) or, for -1, that nothing is."""

from __future__ import annotations

from dlpack_ref.harness.subject import NotSupported, ask, first_element
from dlpack_ref.testing.reader import read_capsule

from ..breaking.cuda import DroppedWait, is_int
from ..breaking.producers import Wrapped
from ..cuda_lab import (
    LEGACY_STREAM, Lab, PER_THREAD_STREAM, StreamObject, export_versioned, exported, fresh_values, ordered,
    pending_write, scoped,
)
from ..producer_cases import device_of, device_pair, made
from ..support import CheckFailed, must_succeed, refused_streams
from ..table import breaks, rule

#: What a dropped wait shows: a read on the consumer's stream sees the bytes from before the pending write.
STALE = "bytes differ from the array's values"


# --- producers ----------------------------------------------------------------------------

@rule(side="producer", source="array-api",
      where="array.__dlpack__, stream: 'On CPU and other device types without streams, only None is accepted'")
def stream_cpu(p) -> str:
    """for CPU data only stream=None is accepted (stream=1 and -1 are refused)"""
    x = made(p, "float32", (2, 3))
    if device_pair(device_of(x))[0] != 1:
        raise NotSupported("the array is not on the CPU")
    def array():
        return made(p, "float32", (2, 3)) if p.exports_once() else x
    must_succeed("stream=None", lambda: ask(array(), stream=None))
    return "; ".join(refused_streams(lambda stream: ask(array(), stream=stream), (1, -1), "CPU data"))


@breaks(stream_cpu, shows="stream=1 was accepted for CPU data")
class AcceptsAnyStream(Wrapped):
    """Accepts any stream for CPU data (ignores it)."""

    def __dlpack__(self, stream=None, **kwargs):
        return self._a.__dlpack__(**kwargs)


# --- CUDA producers -----------------------------------------------------------------------

@rule(side="cuda", source="array-api",
      where="array.__dlpack__, stream: '> 2: stream number represented as a Python integer'; the producer must ensure "
      "operations can safely be performed on the array, e.g. by 'wait for event'")
def stream_handle_waits(cp) -> str:
    """__dlpack__(stream=S) with S a consumer's stream handle (> 2): the producer orders S after its pending work (an
    event recorded after its last write, waited on by S), so work the consumer enqueues on S reads the array's
    values"""
    return ordered(cp, lambda c: c, lambda c: c, "<consumer stream>")


@breaks(stream_handle_waits, shows=STALE)
class NoWaitForHandles(DroppedWait):
    """Exports in place without ordering a consumer's stream handle (> 2) after its pending work (as for
    stream=-1)."""

    @staticmethod
    def dropped(stream) -> bool:
        return is_int(stream) and stream > 2


@rule(side="cuda", source="dlpack-ref",
      where="docs/cuda.md, Streams: object with __cuda_stream__ (cuda.core's stream protocol)")
def stream_object_waits(cp) -> str:
    """a stream object of the __cuda_stream__ protocol, when the producer accepts one, is ordered like its handle (a
    producer that accepts only ints says TypeError: not supported)"""
    try:
        return ordered(cp, StreamObject, lambda c: c, "<__cuda_stream__ object>")
    except CheckFailed as e:
        if isinstance(e.exc, TypeError):
            raise NotSupported("__cuda_stream__ objects are refused with TypeError (the standard asks for ints)",
                               e.exc) from e
        raise


@breaks(stream_object_waits, shows=STALE)
class NoWaitForObjects(DroppedWait):
    """Exports in place without ordering a __cuda_stream__ object's stream after its pending work (as for
    stream=-1)."""

    @staticmethod
    def dropped(stream) -> bool:
        return hasattr(stream, "__cuda_stream__")


@rule(side="cuda", source="array-api", where="array.__dlpack__, stream: '1: the legacy default stream'")
def stream_legacy_waits(cp) -> str:
    """__dlpack__(stream=1): the legacy default stream is ordered after the producer's pending work"""
    return ordered(cp, lambda c: LEGACY_STREAM, lambda c: LEGACY_STREAM, "1")


@breaks(stream_legacy_waits, shows=STALE)
class NoWaitForLegacy(DroppedWait):
    """Exports in place without ordering the legacy default stream (stream=1) after its pending work (as
    for stream=-1)."""

    @staticmethod
    def dropped(stream) -> bool:
        return is_int(stream) and stream == 1


@rule(side="cuda", source="array-api",
      where="array.__dlpack__, stream: '-1: if provided, indicates the producer must not perform any synchronization'")
def stream_no_sync(cp) -> str:
    """__dlpack__(stream=-1) is accepted and synchronizes nothing: the host does not wait and no stream is made to wait
    (a read on an unrelated stream still sees the bytes from before the pending write)"""
    with Lab() as lab:
        x, values, p = pending_write(cp, lab)
        c = lab.stream()
        with scoped(cp, p):
            cap = exported(lambda: export_versioned(x, stream=-1), "__dlpack__(stream=-1)")
        still_pending = not lab.done(p)
        got = lab.read(c, first_element(read_capsule(cap)), values.nbytes)
        del cap
        if got == values.tobytes():
            if not still_pending:
                raise CheckFailed("__dlpack__(stream=-1) returned only after the producer's pending write had "
                                  "finished: the producer synchronized")
            raise CheckFailed("a read on an unrelated stream already sees the pending write: the producer ordered "
                              "or synchronized although -1 asks for no synchronization")
        return "accepted; the pending write stays pending (a read on an unrelated stream sees the old bytes)"


@breaks(stream_no_sync, shows="the producer synchronized")
class SyncsOnMinusOne(Wrapped):
    """Waits on the host for the pending work although -1 asks for no synchronization."""

    def __dlpack__(self, stream=None, **kwargs):
        if stream == -1:
            self._a.to_device("cpu")  # the host waits for the pending write
        return self._a.__dlpack__(stream=stream, **kwargs)


@rule(side="cuda", source="array-api", where="array.__dlpack__, stream: '2: the per-thread default stream'")
def stream_per_thread_waits(cp) -> str:
    """__dlpack__(stream=2): the calling thread's per-thread default stream is ordered after the producer's pending
    work"""
    return ordered(cp, lambda c: PER_THREAD_STREAM, lambda c: PER_THREAD_STREAM, "2")


@breaks(stream_per_thread_waits, shows=STALE)
class NoWaitForPerThread(DroppedWait):
    """Exports in place without ordering the per-thread default stream (stream=2) after its pending work
    (as for stream=-1)."""

    @staticmethod
    def dropped(stream) -> bool:
        return is_int(stream) and stream == 2


@rule(side="cuda", source="array-api", where="array.__dlpack__, stream: '0 is disallowed due to its ambiguity'")
def stream_invalid_refused(cp) -> str:
    """for CUDA memory stream=0 (ambiguous: None, 1 or 2) and other invalid values (-2, a str) are refused with an
    exception, not an assert"""
    with Lab():
        x = cp.make("cuda", fresh_values())
        return "; ".join(refused_streams(lambda stream: export_versioned(x, stream=stream), (0, -2, "1"),
                                         "CUDA memory"))


@breaks(stream_invalid_refused, shows="stream=0 was accepted for CUDA memory")
class AcceptsStreamZero(Wrapped):
    """Takes the ambiguous stream 0 as the legacy default stream."""

    def __dlpack__(self, stream=None, **kwargs):
        return self._a.__dlpack__(stream=1 if is_int(stream) and stream == 0 else stream, **kwargs)


@rule(side="cuda", source="array-api", where="array.__dlpack__, stream: 'None: the legacy default stream'")
def stream_none_waits(cp) -> str:
    """__dlpack__(stream=None) of CUDA memory: the legacy default stream is ordered after the producer's pending work"""
    return ordered(cp, lambda c: None, lambda c: LEGACY_STREAM, "None")


@breaks(stream_none_waits, shows=STALE)
class NoWaitForNone(DroppedWait):
    """Exports in place without ordering the legacy default stream for stream=None after its pending work
    (as for stream=-1)."""

    @staticmethod
    def dropped(stream) -> bool:
        return stream is None
