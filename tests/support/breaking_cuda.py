"""CUDA producers made to break one rule each (tests/support/breakers.py):
dlpack-ref's CUDA arrays behind a :class:`~.breaking_producers.Wrapped`
class that drops a stream wait, adds a synchronization, accepts stream 0,
aliases or misflags a copy, copies to the host off the consumer's stream,
or reports its memory as something else (tests/test_conformance_cuda.py's
broken producers, one rule each)."""

from __future__ import annotations

from typing import Callable

import dlpack_ref as dr
from dlpack_ref.conformance import CudaProducer
from dlpack_ref.testing import FLAG_IS_COPIED

from .breaking_producers import KEPT, Wrapped, managed, own, set_flag


def cuda_wrapping(cls) -> CudaProducer:
    """dlpack-ref's CUDA producer with each array behind ``cls``."""
    cp = own().cuda
    return CudaProducer(f"dlpack_ref behind {cls.__name__}", lambda kind, values: cls(cp.factory(kind, values)),
                        lambda kind, values, stream: cls(cp.write(kind, values, stream)))


def plain_export(kwargs) -> bool:
    """An export in place: no copy asked for, no other device."""
    return not kwargs.get("copy") and kwargs.get("dl_device") is None


def dropping_wait(name: str, which: str, dropped: Callable) -> type:
    """A wrapper exporting in place without ordering the consumer's stream
    (as for -1) when ``dropped(stream)``: for the streams ``which`` says."""

    def __dlpack__(self, stream=None, **kwargs):
        if dropped(stream) and plain_export(kwargs):
            stream = -1
        return self._a.__dlpack__(stream=stream, **kwargs)

    doc = f"Exports in place without ordering {which} after its pending work (as for stream=-1)."
    return type(name, (Wrapped,), {"__dlpack__": __dlpack__, "__doc__": doc})


def is_int(stream) -> bool:
    return type(stream) is int


NoWaitForHandles = dropping_wait("NoWaitForHandles", "a consumer's stream handle (> 2)",
                                 lambda s: is_int(s) and s > 2)
NoWaitForLegacy = dropping_wait("NoWaitForLegacy", "the legacy default stream (stream=1)",
                                lambda s: is_int(s) and s == 1)
NoWaitForPerThread = dropping_wait("NoWaitForPerThread", "the per-thread default stream (stream=2)",
                                   lambda s: is_int(s) and s == 2)
NoWaitForNone = dropping_wait("NoWaitForNone", "the legacy default stream for stream=None", lambda s: s is None)
NoWaitForObjects = dropping_wait("NoWaitForObjects", "a __cuda_stream__ object's stream",
                                 lambda s: hasattr(s, "__cuda_stream__"))


class SyncsOnMinusOne(Wrapped):
    """Waits on the host for the pending work although -1 asks for no synchronization."""

    def __dlpack__(self, stream=None, **kwargs):
        if stream == -1:
            self._a.to_device("cpu")  # the host waits for the pending write
        return self._a.__dlpack__(stream=stream, **kwargs)


class AcceptsStreamZero(Wrapped):
    """Takes the ambiguous stream 0 as the legacy default stream."""

    def __dlpack__(self, stream=None, **kwargs):
        return self._a.__dlpack__(stream=1 if is_int(stream) and stream == 0 else stream, **kwargs)


class InPlaceDeviceCopy(Wrapped):
    """copy=True of CUDA memory (no dl_device) exports in place, flagged IS_COPIED."""

    def __dlpack__(self, copy=None, **kwargs):
        if copy and kwargs.get("dl_device") is None:
            return set_flag(self._a.__dlpack__(**kwargs), FLAG_IS_COPIED, True)
        return self._a.__dlpack__(copy=copy, **kwargs)


class UnflaggedDeviceCopy(Wrapped):
    """A copy=True copy on the device, with IS_COPIED cleared."""

    def __dlpack__(self, copy=None, **kwargs):
        capsule = self._a.__dlpack__(copy=copy, **kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, False) if copy and kwargs.get("dl_device") is None else capsule


class UnflaggedHostCopy(Wrapped):
    """A host copy for dl_device=(kDLCPU, 0), with IS_COPIED cleared."""

    def __dlpack__(self, dl_device=None, **kwargs):
        capsule = self._a.__dlpack__(dl_device=dl_device, **kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, False) if dl_device is not None else capsule


def own_stream() -> int:
    """A new non-blocking stream on device 0 that nothing waits for."""
    from cuda.bindings import driver
    from dlpack_ref._cuda_driver import check, runtime
    rt = runtime()
    pushed = rt.enter(0)
    try:
        s = int(check(driver.cuStreamCreate(1), "cuStreamCreate"))
    finally:
        rt.leave(pushed)
    KEPT.append(s)
    return s


def host_copy_on_own_stream(name: str, which: str, diverted: Callable) -> type:
    """A wrapper copying to the host on a stream of its own, never waited
    for, when the consumer's stream is one ``diverted(stream)`` is true of."""

    def __dlpack__(self, stream=None, dl_device=None, **kwargs):
        if dl_device is not None and int(dl_device[0]) == int(dr.DeviceType.CPU) and diverted(stream):
            stream = own_stream()
        return self._a.__dlpack__(stream=stream, dl_device=dl_device, **kwargs)

    doc = f"Copies to the host for dl_device=(kDLCPU, 0) with {which} on a stream of its own, never waited for."
    return type(name, (Wrapped,), {"__dlpack__": __dlpack__, "__doc__": doc})


HostCopyUnwaited = host_copy_on_own_stream("HostCopyUnwaited", "stream=None", lambda s: s is None)
HostCopyOffStream = host_copy_on_own_stream("HostCopyOffStream", "a consumer's stream S", lambda s: s is not None)


def reporting(name: str, real: int, reported: tuple, doc: str, in_capsules: bool = True) -> type:
    """A wrapper whose __dlpack_device__ (and, with ``in_capsules``, whose
    capsules) report memory of device type ``real`` as ``reported``."""

    def __dlpack_device__(self):
        kind, ident = self._a.__dlpack_device__()
        return reported if int(kind) == real else (kind, ident)

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if in_capsules and info["device"][0] == real:
            m.dl_tensor.device.device_type, m.dl_tensor.device.device_id = map(int, reported)
        return capsule

    return type(name, (Wrapped,), {"__dlpack_device__": __dlpack_device__, "__dlpack__": __dlpack__,
                                   "__doc__": doc})


ManagedAsCuda = reporting("ManagedAsCuda", 13, (dr.DeviceType.CUDA, 0),
                          "Reports managed memory as plain CUDA memory (kDLCUDA), in its capsules too.")
PinnedAsCpu = reporting("PinnedAsCpu", 3, (dr.DeviceType.CPU, 0),
                        "Reports page-locked memory as ordinary CPU memory (kDLCPU), in its capsules too.")
CudaOnDeviceOne = reporting("CudaOnDeviceOne", 2, (dr.DeviceType.CUDA, 1),
                            "__dlpack_device__() names device 1 for memory its capsules place on device 0.",
                            in_capsules=False)
