"""The bases of the breaking CUDA producers: dlpack-ref's CUDA arrays
behind a :class:`~.producers.Wrapped` class that drops a stream wait
(:class:`DroppedWait`), copies to the host on a stream of its own
(:class:`HostCopyOnOwnStream`), or reports its memory as something else
(:class:`Misreported`)."""

from __future__ import annotations

import dlpack_ref as dr
from dlpack_ref.harness.subject import CudaProducer

from .producers import Wrapped, own
from .surgery import KEPT, managed

__all__ = ["DroppedWait", "HostCopyOnOwnStream", "Misreported", "cuda_wrapping", "is_int"]


def cuda_wrapping(cls) -> CudaProducer:
    """dlpack-ref's CUDA producer with each array behind ``cls``."""
    cp = own().cuda
    return CudaProducer(f"dlpack_ref behind {cls.__name__}", lambda kind, values: cls(cp.factory(kind, values)),
                        lambda kind, values, stream: cls(cp.write(kind, values, stream)))


def _plain_export(kwargs) -> bool:
    """An export in place: no copy asked for, no other device."""
    return not kwargs.get("copy") and kwargs.get("dl_device") is None


def is_int(stream) -> bool:
    return type(stream) is int


class DroppedWait(Wrapped):
    """Exports in place without ordering the consumer's stream after its
    pending work (as for stream=-1) when ``dropped(stream)``."""

    @staticmethod
    def dropped(stream) -> bool:
        return False

    def __dlpack__(self, stream=None, **kwargs):
        if self.dropped(stream) and _plain_export(kwargs):
            stream = -1
        return self._a.__dlpack__(stream=stream, **kwargs)


def _own_stream() -> int:
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


class HostCopyOnOwnStream(Wrapped):
    """Copies to the host for dl_device=(kDLCPU, 0) on a stream of its own,
    never waited for, when the consumer's stream is one ``diverted(stream)``
    is true of."""

    @staticmethod
    def diverted(stream) -> bool:
        return False

    def __dlpack__(self, stream=None, dl_device=None, **kwargs):
        if dl_device is not None and int(dl_device[0]) == int(dr.DeviceType.CPU) and self.diverted(stream):
            stream = _own_stream()
        return self._a.__dlpack__(stream=stream, dl_device=dl_device, **kwargs)


class Misreported(Wrapped):
    """Its __dlpack_device__ (and, with ``in_capsules``, its capsules)
    report memory of device type ``real`` as ``reported``."""

    real: int = 0
    reported: tuple = ()
    in_capsules = True

    def __dlpack_device__(self):
        kind, ident = self._a.__dlpack_device__()
        return self.reported if int(kind) == self.real else (kind, ident)

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if self.in_capsules and info["device"][0] == self.real:
            m.dl_tensor.device.device_type, m.dl_tensor.device.device_id = map(int, self.reported)
        return capsule
