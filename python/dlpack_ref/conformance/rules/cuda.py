"""CUDA checks (``cuda.*``): what ``__dlpack__`` / ``__dlpack_device__`` must
do for memory of the CUDA family, for any library that can make such arrays
(a :class:`CudaProducer`).

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

from dlpack_ref.harness.observe import exc_name
from dlpack_ref.harness.subject import NotSupported, first_element
from dlpack_ref.testing.abi import DLPACK_VERSION, FLAG_IS_COPIED
from dlpack_ref.testing.reader import read_capsule

from .table import rule
from .support import CheckFailed, device_value, flag_set, refused_streams

N_VALUES = 1 << 14                 # float32 values per array
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
LEGACY_STREAM, PER_THREAD_STREAM = 1, 2
_NON_BLOCKING = 1                  # CU_STREAM_NON_BLOCKING
_NOT_READY = 600                   # CUDA_ERROR_NOT_READY
# How long a GPU keeps the producer's stream busy before its write: enough
# memsets of a scratch buffer for tens of milliseconds on any current GPU.
BUSY_BYTES = 256 << 20
BUSY_MEMSETS = 600


# --- the checker's side of CUDA -----------------------------------------------------

class _Lab:
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


class _StreamObject:
    """A consumer's stream as an object of the ``__cuda_stream__`` protocol."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _values():
    """Fresh random float32 values: never the bytes a reused block held before."""
    import numpy as np
    return np.random.default_rng().standard_normal(N_VALUES, dtype=np.float32)


def _export(x, **kwargs):
    """``x.__dlpack__(max_version=(1, 3), **kwargs)``, a legacy export for a
    producer that has no max_version."""
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, **kwargs)
    except TypeError as e:
        if "max_version" not in str(e):
            raise
        return x.__dlpack__(**kwargs)


def _scope(cp, stream: int | None):
    return cp.export_scope(stream) if cp.export_scope is not None and stream is not None else contextlib.nullcontext()


def _pending(cp, lab, kind: str = "cuda"):
    """(array, its values, the producer's stream P): the library's copy of
    the values into new memory is still pending on P."""
    if cp.write is None:
        cp.make(kind, _values())       # what keeps the library from making one, first
        raise NotSupported(f"{cp.name}'s adapter cannot tell it which stream to write on, so no write can "
                           "be left pending: the ordering cannot be observed")
    values = _values()
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


def _ptr(info: dict) -> int:
    return first_element(info)


def _compare(got: bytes, want: bytes, what: str) -> None:
    if got != want:
        differ = sum(a != b for a, b in zip(got, want))
        raise CheckFailed(f"{what}: {differ} of {len(want)} bytes differ from the array's values")


def _exported(fn, what: str):
    try:
        return fn()
    except Exception as e:
        raise CheckFailed(f"{what} raised", e) from e


def _ordered(cp, stream_value, read_stream, label: str) -> str:
    """The consumer reading on ``read_stream`` after ``__dlpack__(stream=stream_value)``
    sees the producer's pending write."""
    with _Lab() as lab:
        x, values, p = _pending(cp, lab)
        c = lab.stream()
        value = stream_value(c)
        with _scope(cp, p):
            cap = _exported(lambda: _export(x, stream=value), f"__dlpack__(stream={label})")
        info = read_capsule(cap)
        reader = read_stream(c)
        _compare(lab.read(reader, _ptr(info), values.nbytes), values.tobytes(),
                 f"a read enqueued on the consumer's stream after __dlpack__(stream={label})")
        del cap
        return (f"stream={label}: a read on the consumer's stream after the export sees the write still pending "
                f"on the producer's stream ({'simulated driver' if lab.simulated else 'GPU, stream kept busy'})")


# --- (a) stream values -----------------------------------------------------------------------

@rule("array-api",
      "array.__dlpack__, stream: '> 2: stream number represented as a Python integer'; the producer must ensure "
      "operations can safely be performed on the array, e.g. by 'wait for event'")
def stream_handle_waits(cp) -> str:
    """__dlpack__(stream=S) with S a consumer's stream handle (> 2): the producer orders S after its pending work (an
    event recorded after its last write, waited on by S), so work the consumer enqueues on S reads the array's
    values"""
    return _ordered(cp, lambda c: c, lambda c: c, "<consumer stream>")


@rule("dlpack-ref", "docs/cuda.md, Streams: object with __cuda_stream__ (cuda.core's stream protocol)")
def stream_object_waits(cp) -> str:
    """a stream object of the __cuda_stream__ protocol, when the producer accepts one, is ordered like its handle (a
    producer that accepts only ints says TypeError: not supported)"""
    try:
        return _ordered(cp, _StreamObject, lambda c: c, "<__cuda_stream__ object>")
    except CheckFailed as e:
        if isinstance(e.exc, TypeError):
            raise NotSupported("__cuda_stream__ objects are refused with TypeError (the standard asks for ints)",
                               e.exc) from e
        raise


@rule("array-api", "array.__dlpack__, stream: '1: the legacy default stream'")
def stream_legacy_waits(cp) -> str:
    """__dlpack__(stream=1): the legacy default stream is ordered after the producer's pending work"""
    return _ordered(cp, lambda c: LEGACY_STREAM, lambda c: LEGACY_STREAM, "1")


@rule("array-api",
      "array.__dlpack__, stream: '-1: if provided, indicates the producer must not perform any synchronization'")
def stream_no_sync(cp) -> str:
    """__dlpack__(stream=-1) is accepted and synchronizes nothing: the host does not wait and no stream is made to wait
    (a read on an unrelated stream still sees the bytes from before the pending write)"""
    with _Lab() as lab:
        x, values, p = _pending(cp, lab)
        c = lab.stream()
        with _scope(cp, p):
            cap = _exported(lambda: _export(x, stream=-1), "__dlpack__(stream=-1)")
        still_pending = not lab.done(p)
        got = lab.read(c, _ptr(read_capsule(cap)), values.nbytes)
        del cap
        if got == values.tobytes():
            if not still_pending:
                raise CheckFailed("__dlpack__(stream=-1) returned only after the producer's pending write had "
                                  "finished: the producer synchronized")
            raise CheckFailed("a read on an unrelated stream already sees the pending write: the producer ordered "
                              "or synchronized although -1 asks for no synchronization")
        return "accepted; the pending write stays pending (a read on an unrelated stream sees the old bytes)"


@rule("array-api", "array.__dlpack__, stream: '2: the per-thread default stream'")
def stream_per_thread_waits(cp) -> str:
    """__dlpack__(stream=2): the calling thread's per-thread default stream is ordered after the producer's pending
    work"""
    return _ordered(cp, lambda c: PER_THREAD_STREAM, lambda c: PER_THREAD_STREAM, "2")


@rule("array-api", "array.__dlpack__, stream: '0 is disallowed due to its ambiguity'")
def stream_invalid_refused(cp) -> str:
    """for CUDA memory stream=0 (ambiguous: None, 1 or 2) and other invalid values (-2, a str) are refused with an
    exception, not an assert"""
    with _Lab():
        x = cp.make("cuda", _values())
        return "; ".join(refused_streams(lambda stream: _export(x, stream=stream), (0, -2, "1"), "CUDA memory"))


@rule("array-api", "array.__dlpack__, stream: 'None: the legacy default stream'")
def stream_none_waits(cp) -> str:
    """__dlpack__(stream=None) of CUDA memory: the legacy default stream is ordered after the producer's pending work"""
    return _ordered(cp, lambda c: None, lambda c: LEGACY_STREAM, "None")


# --- (b) copy=True between CUDA arrays ---------------------------------------------------------

def _copy_true(x, c, refusal=CheckFailed):
    """The capsule of ``copy=True``; a producer without the keyword (a
    TypeError) is not supported, any other refusal raises ``refusal``: the
    standard says copy=True must always copy."""
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, copy=True, stream=c)
    except TypeError as e:
        raise NotSupported("copy keyword not accepted (a producer older than DLPack 1.0)", e) from e
    except Exception as e:
        raise refusal("copy=True of CUDA memory raised; the standard says it must always copy", e) from e


@rule("array-api", "array.__dlpack__, copy: 'If True, ... always copy'")
def copy_true_copies(cp) -> str:
    """copy=True of CUDA memory (no dl_device) copies on the device: another data pointer, the copy holds the array's
    values for work on the consumer's stream, and writes to it leave the array unchanged"""
    with _Lab() as lab:
        values = _values()
        want = values.tobytes()
        x = cp.make("cuda", values)
        c = lab.stream()
        base = _ptr(read_capsule(_exported(lambda: _export(x, stream=c), "__dlpack__(stream=<consumer>)")))
        cap = _copy_true(x, c)
        info = read_capsule(cap)
        ptr = _ptr(info)
        if info["device"][0] != KDL_CUDA:
            raise CheckFailed(f"the copy is on device {info['device']}, the array on CUDA")
        if ptr == base:
            raise CheckFailed(f"copy=True exported the array's own data pointer {ptr:#x}")
        _compare(lab.read(c, ptr, len(want)), want, "the copy, read on the consumer's stream")
        lab.fill(c, ptr, 0x5A, len(want))
        _compare(lab.read(c, base, len(want)), want, "the array after writing to the copy")
        del cap
        return f"pointer {ptr:#x} != {base:#x}; the copy holds the values; writes to it do not reach the array"


@rule("header", "DLPACK_FLAG_BITMASK_IS_COPIED")
def copy_true_flag(cp) -> str:
    """a CUDA copy made for copy=True carries DLPACK_FLAG_BITMASK_IS_COPIED"""
    with _Lab() as lab:
        x = cp.make("cuda", _values())
        return _is_copied(read_capsule(_copy_true(x, lab.stream(), refusal=NotSupported)))


def _is_copied(info: dict) -> str:
    return flag_set(info, FLAG_IS_COPIED, "legacy capsule: no flags to set", "IS_COPIED not set on a copy")


# --- (c) dl_device moves to the host ------------------------------------------------------------

def _to_host(x, **kwargs):
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, dl_device=(KDL_CPU, 0), **kwargs)
    except (BufferError, TypeError) as e:
        raise NotSupported("dl_device=(kDLCPU, 0) is refused for CUDA memory", e) from e


def _pending_host_copy(cp, lab, stream: int | None):
    """(array, capsule, host pointer, values) of ``dl_device=(kDLCPU, 0)``
    with ``stream``, exported while the array's write is pending. Both must
    be kept until the bytes are read: the host copy lives as long as the
    capsule, and freeing the array may wait on the host for its pending
    work (dlpack-ref's does), which would hide a missing synchronization."""
    x, values, p = _pending(cp, lab)
    with _scope(cp, p):
        cap = _to_host(x, stream=stream)
    info = read_capsule(cap)
    if info["device"] != (KDL_CPU, 0):
        raise CheckFailed(f"asked for dl_device=(kDLCPU, 0), exported on {info['device']}")
    return x, cap, _ptr(info), values


@rule("array-api", "array.__dlpack__, dl_device and stream (None: the host may read on return)")
def dl_device_cpu_readable(cp) -> str:
    """__dlpack__(dl_device=(kDLCPU, 0), stream=None) of CUDA memory returns host memory the host can read on return:
    the copy was made after the pending write and has finished"""
    with _Lab() as lab:
        x, cap, ptr, values = _pending_host_copy(cp, lab, None)
        _compare(ctypes.string_at(ptr, values.nbytes), values.tobytes(), "the host copy read on return")
        del cap, x
        return "device (1, 0); the values are readable on return"


@rule("array-api", "array.__dlpack__, dl_device and stream (the stream is the consumer's, on the producer's device)")
def dl_device_cpu_on_stream(cp) -> str:
    """__dlpack__(dl_device=(kDLCPU, 0), stream=S): the copy to the host is ordered on S after the pending write; once
    S is synchronized the host reads the values (the host need not block before)"""
    with _Lab() as lab:
        c = lab.stream()
        x, cap, ptr, values = _pending_host_copy(cp, lab, c)
        early = ctypes.string_at(ptr, values.nbytes) == values.tobytes()
        lab.call("cuStreamSynchronize", c)
        _compare(ctypes.string_at(ptr, values.nbytes), values.tobytes(), "the host copy once S is synchronized")
        del cap, x
        return ("the values are there once S is synchronized; "
                + ("the producer blocked until then" if early else "enqueued, nothing blocked"))


@rule("header", "DLPACK_FLAG_BITMASK_IS_COPIED ('the data was copied')")
def dl_device_cpu_flag(cp) -> str:
    """a host copy made for dl_device=(kDLCPU, 0) of CUDA memory carries DLPACK_FLAG_BITMASK_IS_COPIED"""
    with _Lab():
        x = cp.make("cuda", _values())
        return _is_copied(read_capsule(_to_host(x)))


# --- (d) managed and pinned memory reported as what they are --------------------------------------

def _device_reported(cp, kind: str, device_type: int, label: str) -> str:
    with _Lab():
        x = cp.make(kind, _values())
        dev = tuple(device_value(v) for v in x.__dlpack_device__())
        info = read_capsule(_export(x))
        notes = f"__dlpack_device__() {dev}, capsule {info['device']}"
        if dev != info["device"]:
            raise CheckFailed(f"{notes}: they disagree")
        if dev[0] != device_type:
            raise CheckFailed(f"{notes}: {kind} memory is {label} ({device_type})")
        return notes


@rule("header", "DLDeviceType: kDLCUDAManaged, 'CUDA managed/unified memory allocated by cudaMallocManaged'")
def managed_device(cp) -> str:
    """CUDA managed memory is reported as kDLCUDAManaged (13) by __dlpack_device__ and in the capsule"""
    return _device_reported(cp, "managed", KDL_CUDA_MANAGED, "kDLCUDAManaged")


@rule("header", "DLDeviceType: kDLCUDAHost, 'Pinned CUDA CPU memory by cudaMallocHost'")
def pinned_device(cp) -> str:
    """page-locked host memory is reported as kDLCUDAHost (3) by __dlpack_device__ and in the capsule"""
    return _device_reported(cp, "pinned", KDL_CUDA_HOST, "kDLCUDAHost")


@rule("array-api", "array.__dlpack_device__; header: DLDeviceType kDLCUDA")
def device_reported(cp) -> str:
    """CUDA device memory is reported as (kDLCUDA, device id) by __dlpack_device__ and in the capsule"""
    return _device_reported(cp, "cuda", KDL_CUDA, "kDLCUDA")
