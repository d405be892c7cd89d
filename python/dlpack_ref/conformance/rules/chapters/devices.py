"""Devices: what ``__dlpack_device__`` answers, which ``dl_device`` a
producer takes, which devices a consumer takes in place or refuses, and
CUDA, managed and pinned memory reported as what they are."""

from __future__ import annotations

import enum

import dlpack_ref as dr
from dlpack_ref import DeviceType
from dlpack_ref.harness.subject import ask, first_element
from dlpack_ref.testing.reader import read_capsule

from ..breaking.consumers import Importer
from ..breaking.cuda import Misreported
from ..breaking.producers import Wrapped
from ..breaking.surgery import managed
from ..consumer_cases import F64, V123, cpu_device_call, f64, import_asked, import_made, judged
from ..consumer_judges import BOGUS_DEVICE_POINTER, accepts_in_place, refuses_device
from ..cuda_lab import KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED, Lab, export_versioned, fresh_values
from ..producer_cases import beside_plain_export, device_of, device_pair, made
from ..support import CheckFailed, device_value, must_succeed, refused_with_buffererror
from ..table import breaks, rule


# --- producers ----------------------------------------------------------------------------

@rule(side="producer", source="array-api", where="array.__dlpack__, dl_device")
def dl_device_own(p) -> str:
    """dl_device equal to __dlpack_device__() is accepted and exports in place"""
    x = made(p, "float32", (2, 3))
    dev = device_of(x)
    info, base = beside_plain_export(p, x, f"dl_device={device_pair(dev)} (its own __dlpack_device__())",
                                     dl_device=dev)
    if info["device"] != device_pair(dev):
        raise CheckFailed(f"exported on {info['device']}, asked for {device_pair(dev)}")
    if first_element(info) != base:
        raise CheckFailed("dl_device equal to the array's own device made a copy")
    return f"dl_device={info['device']} in place"


@breaks(dl_device_own, shows="dl_device equal to the array's own device made a copy")
class CopiesForOwnDevice(Wrapped):
    """A dl_device equal to its own device makes a copy."""

    def __dlpack__(self, dl_device=None, copy=None, **kwargs):
        own_device = dl_device is not None and tuple(map(int, dl_device)) == tuple(map(int, self.__dlpack_device__()))
        return self._a.__dlpack__(dl_device=dl_device, copy=True if own_device else copy, **kwargs)


# A device no CPU library can export to: kDLOpenCL.
UNSUPPORTED_DEVICE = (4, 0)


@rule(side="producer", source="array-api", where="array.__dlpack__, dl_device: 'must raise BufferError'")
def dl_device_unsupported(p) -> str:
    """a dl_device the producer cannot handle (kDLOpenCL) is refused with BufferError"""
    x = made(p, "float32", (2, 3))
    return refused_with_buffererror(f"dl_device={UNSUPPORTED_DEVICE}", lambda: ask(x, dl_device=UNSUPPORTED_DEVICE))


@breaks(dl_device_unsupported, shows="dl_device=(4, 0) was accepted")
class IgnoresDlDevice(Wrapped):
    """Ignores a dl_device it cannot handle and exports on its own device."""

    def __dlpack__(self, dl_device=None, **kwargs):
        return self._a.__dlpack__(**kwargs)


#: The DLDeviceType values (dlpack_ref.DeviceType).
DEVICE_TYPES = frozenset(int(m) for m in DeviceType)


@rule(side="producer", source="array-api", where="array.__dlpack_device__, Returns")
def dlpack_device_type(p) -> str:
    """__dlpack_device__() returns a 2-tuple (device_type, device_id): device_type an Enum member with the DLDeviceType
    value, device_id an int"""
    x = made(p, "float32", (2, 3))
    dev = must_succeed("__dlpack_device__()", x.__dlpack_device__)
    if not isinstance(dev, tuple) or len(dev) != 2:
        raise CheckFailed(f"returned {dev!r} ({type(dev).__name__}), not a 2-tuple")
    kind, ident = dev
    if not isinstance(ident, int) or isinstance(ident, bool):
        raise CheckFailed(f"device_id {ident!r} is a {type(ident).__name__}, not an int")
    if not isinstance(kind, enum.Enum):
        raise CheckFailed(f"device_type {kind!r} is a plain {type(kind).__name__}, not an Enum member "
                          "(the standard types the result Tuple[Enum, int])")
    if device_value(kind) not in DEVICE_TYPES:
        raise CheckFailed(f"device_type {kind!r} is not a DLDeviceType value (dlpack_ref.DeviceType)")
    return f"({type(kind).__name__}.{kind.name}={device_value(kind)}, {ident})"


@breaks(dlpack_device_type, shows="device_type 1 is a plain int, not an Enum member")
class PlainIntDevice(Wrapped):
    """__dlpack_device__() answers plain ints, not an Enum member."""

    def __dlpack_device__(self):
        kind, ident = self._a.__dlpack_device__()
        return int(kind), ident


# --- consumers ----------------------------------------------------------------------------

@rule(side="consumer", source="array-api", where="from_dlpack, device")
def device_cpu(c):
    """from_dlpack(x, device=<CPU>) of CPU data imports in place"""
    return judged(c, lambda f: import_asked(c, f, cpu_device_call(c), shape=(3,), dtype=F64, fill=f64(V123)),
                  accepts_in_place, want=V123)


@breaks(device_cpu, shows="copied (pointer")
class CopiesForDevice(Importer):
    """Copies whenever a device is given, its data's own included."""

    def keywords(self, device, copy):
        return device, True if device is not None else copy


@rule(side="consumer", source="array-api", where="from_dlpack, Raises: BufferError (incompatible device)")
def device_opencl(c):
    """an OpenCL tensor (bogus pointer) is refused with BufferError (or kept as device memory), never read"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, device=(4, 0), data=BOGUS_DEVICE_POINTER,
                                           read_values="unless_on_a_device"), refuses_device)


@breaks(device_opencl, shows="refused with ValueError, not BufferError")
class ValueErrorForOpenCL(Importer):
    """Refuses an OpenCL tensor with ValueError, not BufferError."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["device"][0] == int(dr.DeviceType.OPENCL):
            raise ValueError("OpenCL tensors are not supported")
        return capsule


@rule(side="consumer", source="array-api", where="from_dlpack, Raises: BufferError (incompatible device)")
def device_cuda_unreachable(c):
    """a CUDA tensor (bogus pointer) the consumer cannot reach is refused with BufferError (or kept as a device array),
    never read"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, device=(2, 0), data=BOGUS_DEVICE_POINTER,
                                           read_values="unless_on_a_device"), refuses_device)


@breaks(device_cuda_unreachable, shows="the consumer crashed the process (")
class CudaAsHost(Importer):
    """Takes CUDA memory for host memory and copies it on the host: a device
    pointer dereferenced (the process dies)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["device"][0] == int(dr.DeviceType.CUDA):
            managed(capsule)[0].dl_tensor.device.device_type = int(dr.DeviceType.CPU)
        return capsule

    def result(self, r, asked, device, copy):
        cuda = asked.info is not None and asked.info["device"][0] == int(dr.DeviceType.CUDA)
        return r.copy() if cuda else r


# --- CUDA producers: managed and pinned memory reported as what they are -------------------

def _device_reported(cp, kind: str, device_type: int, label: str) -> str:
    with Lab():
        x = cp.make(kind, fresh_values())
        dev = tuple(device_value(v) for v in x.__dlpack_device__())
        info = read_capsule(export_versioned(x))
        notes = f"__dlpack_device__() {dev}, capsule {info['device']}"
        if dev != info["device"]:
            raise CheckFailed(f"{notes}: they disagree")
        if dev[0] != device_type:
            raise CheckFailed(f"{notes}: {kind} memory is {label} ({device_type})")
        return notes


@rule(side="cuda", source="header",
      where="DLDeviceType: kDLCUDAManaged, 'CUDA managed/unified memory allocated by cudaMallocManaged'")
def managed_device(cp) -> str:
    """CUDA managed memory is reported as kDLCUDAManaged (13) by __dlpack_device__ and in the capsule"""
    return _device_reported(cp, "managed", KDL_CUDA_MANAGED, "kDLCUDAManaged")


@breaks(managed_device, shows="managed memory is kDLCUDAManaged (13)")
class ManagedAsCuda(Misreported):
    """Reports managed memory as plain CUDA memory (kDLCUDA), in its capsules too."""

    real, reported = 13, (dr.DeviceType.CUDA, 0)


@rule(side="cuda", source="header", where="DLDeviceType: kDLCUDAHost, 'Pinned CUDA CPU memory by cudaMallocHost'")
def pinned_device(cp) -> str:
    """page-locked host memory is reported as kDLCUDAHost (3) by __dlpack_device__ and in the capsule"""
    return _device_reported(cp, "pinned", KDL_CUDA_HOST, "kDLCUDAHost")


@breaks(pinned_device, shows="pinned memory is kDLCUDAHost (3)")
class PinnedAsCpu(Misreported):
    """Reports page-locked memory as ordinary CPU memory (kDLCPU), in its capsules too."""

    real, reported = 3, (dr.DeviceType.CPU, 0)


@rule(side="cuda", source="array-api", where="array.__dlpack_device__; header: DLDeviceType kDLCUDA")
def device_reported(cp) -> str:
    """CUDA device memory is reported as (kDLCUDA, device id) by __dlpack_device__ and in the capsule"""
    return _device_reported(cp, "cuda", KDL_CUDA, "kDLCUDA")


@breaks(device_reported, shows="__dlpack_device__() (2, 1), capsule (2, 0): they disagree")
class CudaOnDeviceOne(Misreported):
    """__dlpack_device__() names device 1 for memory its capsules place on device 0."""

    real, reported, in_capsules = 2, (dr.DeviceType.CUDA, 1), False
