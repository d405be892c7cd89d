"""The checker's side of CUDA, which the CUDA rules (``cuda.*``: what
``__dlpack__`` / ``__dlpack_device__`` must do for memory of the CUDA
family, for any library that can make such arrays, a :class:`CudaProducer`)
share: its own streams, reads and busy work (:class:`Lab`), and a write
left pending on a stream of its own (:func:`pending_write`).

Ordering is checked by data, as a consumer that follows the rules reads it:
the checker makes its own streams, leaves the library's last write pending
on one of them, exports with the consumer's stream and reads the bytes with
a copy enqueued on that stream. A missing event record or stream wait gives
the bytes from before the write. On dlpack-ref's simulated driver stream
work runs only when CUDA's rules force it, so nothing more is needed; on a
GPU the producer's stream is first kept busy (memsets of a scratch buffer,
tens of milliseconds) so that the write is still pending when the consumer
reads. A check whose write finished before the export proves nothing and
says "not supported"; so does every check where no CUDA device can be used
or the library cannot make what it needs: never a pass that was not seen.
"""

from __future__ import annotations

import contextlib
import ctypes

from dlpack_ref.harness.subject import NotSupported, first_element
from dlpack_ref.testing.abi import DLPACK_VERSION
from dlpack_ref.testing.reader import read_capsule

from .support import CheckFailed

N_VALUES = 1 << 14                 # float32 values per array
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
LEGACY_STREAM, PER_THREAD_STREAM = 1, 2
_NON_BLOCKING = 1                  # CU_STREAM_NON_BLOCKING
_NOT_READY = 600                   # CUDA_ERROR_NOT_READY
# How long a GPU keeps the producer's stream busy before its write: enough
# memsets of a scratch buffer for tens of milliseconds on any current GPU.
BUSY_BYTES = 256 << 20
BUSY_MEMSETS = 600


class Lab:
    """The consumer side: the checker's own streams on device 0, reads on a
    stream, a busy stream. Used as a context manager: on exit every stream
    it made is synchronized and destroyed, its scratch memory freed."""

    def __init__(self):
        from dlpack_ref import cuda
        try:
            cuda.require()
        except cuda.CUDAUnavailableError as e:
            raise NotSupported("no CUDA device can be used here", e) from e
        from dlpack_ref._cuda_driver import check, runtime
        self._check = check
        self.rt = runtime()
        self.d = self.rt.driver
        name = self.call("cuDeviceGetName", 64, self.call("cuDeviceGet", 0))
        self.simulated = bytes(name).split(b"\0")[0].startswith(b"dlpack-ref simulated")
        self.streams: list[int] = []
        self._scratch = 0

    def call(self, fn: str, *args):
        """A driver call in device 0's primary context; CUDAError when it fails."""
        pushed = self.rt.enter(0)
        try:
            return self._check(getattr(self.d, fn)(*args), fn)
        finally:
            self.rt.leave(pushed)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for s in self.streams:
            self.call("cuStreamSynchronize", s)
            self.call("cuStreamDestroy", s)
        if self._scratch:
            self.call("cuMemFree", self._scratch)
        return False

    def stream(self) -> int:
        s = int(self.call("cuStreamCreate", _NON_BLOCKING))
        self.streams.append(s)
        return s

    def busy(self, stream: int) -> None:
        """Keep ``stream`` busy for a while (a GPU; the simulator runs work late anyway)."""
        if self.simulated:
            return
        if not self._scratch:
            self._scratch = int(self.call("cuMemAlloc", BUSY_BYTES))
        for i in range(BUSY_MEMSETS):
            self.call("cuMemsetD8Async", self._scratch, i & 0xFF, BUSY_BYTES, stream)

    def done(self, stream: int) -> bool:
        pushed = self.rt.enter(0)
        try:
            (err,) = self.d.cuStreamQuery(stream)
        finally:
            self.rt.leave(pushed)
        if int(err) not in (0, _NOT_READY):
            self._check((err,), "cuStreamQuery")
        return int(err) == 0

    def read(self, stream: int, ptr: int, n: int) -> bytes:
        """The bytes at ``ptr`` as work enqueued on ``stream`` sees them."""
        out = ctypes.create_string_buffer(n)
        self.call("cuMemcpyAsync", ctypes.addressof(out), ptr, n, stream)
        self.call("cuStreamSynchronize", stream)
        return out.raw

    def fill(self, stream: int, ptr: int, byte: int, n: int) -> None:
        self.call("cuMemsetD8Async", ptr, byte, n, stream)
        self.call("cuStreamSynchronize", stream)


class StreamObject:
    """A consumer's stream as an object of the ``__cuda_stream__`` protocol."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def fresh_values():
    """Fresh random float32 values: never the bytes a reused block held before."""
    import numpy as np
    return np.random.default_rng().standard_normal(N_VALUES, dtype=np.float32)


def export_versioned(x, **kwargs):
    """``x.__dlpack__(max_version=(1, 3), **kwargs)``, a legacy export for a
    producer that has no max_version."""
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, **kwargs)
    except TypeError as e:
        if "max_version" not in str(e):
            raise
        return x.__dlpack__(**kwargs)


def scoped(cp, stream: int | None):
    return cp.export_scope(stream) if cp.export_scope is not None and stream is not None else contextlib.nullcontext()


def pending_write(cp, lab, kind: str = "cuda"):
    """(array, its values, the producer's stream P): the library's copy of
    the values into new memory is still pending on P."""
    if cp.write is None:
        cp.make(kind, fresh_values())       # what keeps the library from making one, first
        raise NotSupported(f"{cp.name}'s adapter cannot tell it which stream to write on, so no write can "
                           "be left pending: the ordering cannot be observed")
    values = fresh_values()
    p = lab.stream()
    lab.busy(p)
    try:
        x = cp.write(kind, values, p)
    except NotSupported:
        raise
    except Exception as e:
        raise NotSupported(f"{cp.name} cannot write {kind} memory on a given stream", e) from e
    if lab.done(p):
        raise NotSupported("the producer's write finished before the export (its stream was not kept busy "
                           "long enough): the ordering cannot be observed")
    return x, values, p


def compare_bytes(got: bytes, want: bytes, what: str) -> None:
    if got != want:
        differ = sum(a != b for a, b in zip(got, want))
        raise CheckFailed(f"{what}: {differ} of {len(want)} bytes differ from the array's values")


def exported(fn, what: str):
    try:
        return fn()
    except Exception as e:
        raise CheckFailed(f"{what} raised", e) from e


def ordered(cp, stream_value, read_stream, label: str) -> str:
    """The consumer reading on ``read_stream`` after ``__dlpack__(stream=stream_value)``
    sees the producer's pending write."""
    with Lab() as lab:
        x, values, p = pending_write(cp, lab)
        c = lab.stream()
        value = stream_value(c)
        with scoped(cp, p):
            cap = exported(lambda: export_versioned(x, stream=value), f"__dlpack__(stream={label})")
        info = read_capsule(cap)
        reader = read_stream(c)
        compare_bytes(lab.read(reader, first_element(info), values.nbytes), values.tobytes(),
                 f"a read enqueued on the consumer's stream after __dlpack__(stream={label})")
        del cap
        return (f"stream={label}: a read on the consumer's stream after the export sees the write still pending "
                f"on the producer's stream ({'simulated driver' if lab.simulated else 'GPU, stream kept busy'})")
