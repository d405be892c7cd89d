"""The independent reader: the fields of any DLPack capsule, read with
:mod:`ctypes`, and :func:`verdict`, an oracle of what ``from_dlpack`` must
refuse.

Why independent of :func:`dlpack_ref.inspect`: ``inspect`` is the core's own
reading, so a test or a conformance check that used it would agree with the
core whatever the core got wrong. This module reads the structs through the
ctypes mirror of the header (:mod:`dlpack_ref.testing.abi`) and judges them
with the project's Python tables (``dlpack_ref._dtypes``,
``dlpack_ref._devices``), never through the Cython core; comparing the two
is then a real check.
"""

from __future__ import annotations

import ctypes
import math
import struct

from .._devices import SUPPORTED, DeviceType
from .._dtypes import from_triple
from .abi import (
    DELETER_T, FLAG_IS_SUBBYTE_TYPE_PADDED, INT64_MAX, MAX_NDIM, NAME_LEGACY, NAME_USED_LEGACY, NAME_USED_VERSIONED,
    NAME_VERSIONED, DLManagedTensor, DLManagedTensorVersioned, PyCapsule_GetName, PyCapsule_GetPointer,
    PyCapsule_SetName,
)

__all__ = ["capsule_name", "read_capsule", "read_values", "Consumed", "verdict", "DEVICE_POLICY"]

#: The device rule dlpack-ref adds on top of the universal checks: the memory
#: it can hold. ``verdict(capsule, devices=None)`` leaves it out.
DEVICE_POLICY = SUPPORTED

_DEVICE_TYPES = frozenset(int(m) for m in DeviceType)


def capsule_name(capsule) -> bytes | None:
    """The current name of a capsule.

    Parameters
    ----------
    capsule : PyCapsule

    Returns
    -------
    bytes or None
        None when the name is NULL.

    Raises
    ------
    TypeError
        For anything that is not a capsule.
    """
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"expected a PyCapsule, got {type(capsule).__name__}")
    address = PyCapsule_GetName(id(capsule))
    return None if not address else ctypes.string_at(address)


def _read_int64s(address: int | None, count: int):
    if not address:
        return None
    return tuple((ctypes.c_int64 * count).from_address(address))


def read_capsule(capsule) -> dict:
    """Every field of the managed tensor behind a DLPack capsule, without
    consuming it.

    Parameters
    ----------
    capsule : PyCapsule
        Named ``dltensor_versioned``, ``dltensor`` or their ``used_`` forms.
        A consumed capsule can be read only while its consumer still holds the
        tensor: once the deleter ran, the fields are freed memory.

    Returns
    -------
    dict
        ``name``, ``versioned``, ``address`` (of the managed struct),
        ``version`` (None for legacy), ``flags`` (None for legacy),
        ``manager_ctx``, ``deleter`` (addresses, 0 for NULL), ``data``,
        ``device``, ``ndim``, ``dtype`` (code, bits, lanes), ``shape_ptr``,
        ``strides_ptr``, ``shape`` and ``strides`` (tuples, None when NULL; read
        only for 0 <= ndim <= 64) and ``byte_offset``.

    Raises
    ------
    TypeError
        For anything that is not a capsule.
    ValueError
        For a capsule whose name is not a DLPack tensor's.
    """
    name = capsule_name(capsule)
    if name not in (NAME_VERSIONED, NAME_LEGACY, NAME_USED_VERSIONED, NAME_USED_LEGACY):
        raise ValueError(f"not a DLPack capsule name: {name!r}")
    versioned = name.endswith(b"versioned")
    address = PyCapsule_GetPointer(id(capsule), name)
    struct = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address)
    tensor = struct.dl_tensor
    readable = 0 <= tensor.ndim <= MAX_NDIM
    return {
        "name": name,
        "versioned": versioned,
        "address": address,
        "version": (struct.version.major, struct.version.minor) if versioned else None,
        "flags": struct.flags if versioned else None,
        "manager_ctx": struct.manager_ctx or 0,
        "deleter": struct.deleter or 0,
        "data": tensor.data or 0,
        "device": (tensor.device.device_type, tensor.device.device_id),
        "ndim": tensor.ndim,
        "dtype": (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes),
        "shape_ptr": tensor.shape or 0,
        "strides_ptr": tensor.strides or 0,
        "shape": _read_int64s(tensor.shape, tensor.ndim) if readable else None,
        "strides": _read_int64s(tensor.strides, tensor.ndim) if readable else None,
        "byte_offset": tensor.byte_offset,
    }


#: (code, bits) -> the struct format of one element, for read_values.
_ELEMENT_FORMATS = {
    (0, 8): "b", (0, 16): "h", (0, 32): "i", (0, 64): "q",
    (1, 8): "B", (1, 16): "H", (1, 32): "I", (1, 64): "Q",
    (2, 16): "e", (2, 32): "f", (2, 64): "d", (4, 16): "H",
    (5, 64): "ff", (5, 128): "dd", (6, 8): "?", (18, 32): "HH",
}
#: Device types whose memory this process reads in place: kDLCPU,
#: kDLCUDAHost, kDLROCMHost, kDLCUDAManaged, kDLTPUHost.
_HOST_READABLE = frozenset({1, 3, 11, 13, 20})
#: Device types whose ``data`` is an address in this process's address
#: space, which the CPU may reach (host-visible oneAPI USM, ROCm or CUDA
#: memory mapped for the host): read where every byte is mapped readable.
#: The others' ``data`` is a handle (an OpenCL cl_mem, a Vulkan buffer),
#: never dereferenced.
_ADDRESSED = frozenset({2, 10, 14})
_PAGE = 1 << 16


def _cpu_reaches(first: int, last: int) -> bool:
    """Whether every byte from ``first`` to ``last`` (inclusive) can be read
    by this process, found without touching it: the kernel copies it into a
    pipe, and answers EFAULT for an address that is not mapped readable."""
    if first <= 0 or last < first:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    for call in (libc.write, libc.read):
        call.argtypes, call.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_ssize_t
    ends = (ctypes.c_int * 2)()
    if libc.pipe(ends) != 0:
        return False
    sink = ctypes.create_string_buffer(_PAGE)
    try:
        for start in range(first, last + 1, _PAGE):
            n = min(_PAGE, last + 1 - start)
            if libc.write(ends[1], start, n) != n:
                return False
            libc.read(ends[0], ctypes.addressof(sink), n)
        return True
    finally:
        libc.close(ends[0])
        libc.close(ends[1])


def _bfloat16(bits: int) -> float:
    """A bfloat16 (its 16 bits) widened exactly: the high half of a float32."""
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def read_values(capsule):
    """The values of the tensor behind a DLPack capsule, as nested lists (a
    Python scalar for ndim 0): bool, int, float (bfloat16 widened exactly)
    and complex elements (bcomplex32's two bfloat16 widened exactly), along the strides (C order when NULL). Nothing is
    consumed; the capsule keeps the tensor alive while it is read.

    Memory is read where this process reaches it: always on the host
    device types, and on those whose ``data`` is an address (CUDA, ROCm,
    oneAPI) when every byte of it is mapped readable here.

    Raises
    ------
    BufferError
        For memory this process cannot read in place, or an element type
        other than the ones above.
    """
    info = read_capsule(capsule)
    code, bits, lanes = info["dtype"]
    fmt = _ELEMENT_FORMATS.get((code, bits))
    if info["device"][0] not in _HOST_READABLE | _ADDRESSED:
        raise BufferError(f"memory on device {info['device']} is not readable here")
    if fmt is None or lanes != 1:
        raise BufferError(f"elements of dtype (code, bits, lanes)={info['dtype']} are not read here")
    shape = info["shape"] or ()
    if info["ndim"] and len(shape) != info["ndim"]:
        raise BufferError(f"no shape to read for ndim {info['ndim']}")
    strides = info["strides"]
    if strides is None:
        strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    first, size = info["data"] + info["byte_offset"], struct.calcsize(fmt)
    if info["device"][0] not in _HOST_READABLE and math.prod(shape):
        low = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0)
        high = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0)
        if not _cpu_reaches(first + low * size, first + high * size + size - 1):
            raise BufferError(f"memory on device {info['device']} is not readable here")

    def element(offset):
        raw = struct.unpack(fmt, ctypes.string_at(first + offset * size, size))
        if code == 4:  # bfloat16: the high half of a float32
            return _bfloat16(raw[0])
        if code == 18:  # bcomplex32: two bfloat16, real part first
            return complex(_bfloat16(raw[0]), _bfloat16(raw[1]))
        return raw[0] if len(raw) == 1 else complex(*raw)

    def at(offset, axis):
        if axis == len(shape):
            return element(offset)
        return [at(offset + i * strides[axis], axis + 1) for i in range(shape[axis])]
    return at(0, 0)


class Consumed:
    """A capsule taken as a consumer takes it: renamed
    ``used_dltensor[_versioned]``, so that its destructor leaves the tensor
    alone, and the tensor held until :meth:`release` calls its deleter, once.

    Raises
    ------
    ValueError
        For a capsule that is not an unconsumed DLPack tensor capsule.
    """

    def __init__(self, capsule):
        name = capsule_name(capsule)
        if name not in (NAME_VERSIONED, NAME_LEGACY):
            raise ValueError(f"capsule named {name!r} cannot be consumed")
        self.info = read_capsule(capsule)
        PyCapsule_SetName(id(capsule), NAME_USED_VERSIONED if self.info["versioned"] else NAME_USED_LEGACY)
        self._deleter = self.info["deleter"]

    def release(self) -> None:
        """Call the tensor's deleter (the consumer is done with it)."""
        deleter, self._deleter = self._deleter, 0
        if deleter:
            DELETER_T(deleter)(self.info["address"])

    def __del__(self):
        self.release()


def verdict(capsule, *, devices=DEVICE_POLICY) -> str | None:
    """Whether ``from_dlpack`` must refuse this capsule, decided without the core.

    The universal checks, in the order the core applies them
    (``dlpack_check_tensor`` of ``dlpack_ref_api.pxd``): the capsule name
    (``dltensor_versioned`` or ``dltensor``; a ``used_`` name is already
    consumed); version major 1 (versioned capsules); ndim 0..64; the dtype a
    DLPack 1.3 type of the dtype table (``dlpack_ref._dtypes.from_triple``);
    the device type a :class:`dlpack_ref.DeviceType` member; device_id >= 0;
    shape not NULL when ndim > 0; strides not NULL when ndim > 0 except in
    legacy and pre-1.2 capsules; no negative extent; the element count (0
    when any extent is 0) within int64 and its bytes within int64 (bits per
    stored element: ``bits * lanes``, 8 for sub-byte types with
    IS_SUBBYTE_TYPE_PADDED); for a non-empty tensor with strides, no stride
    INT64_MAX or INT64_MIN (on any axis, whatever its extent) and the span
    ``sum(|stride| * (extent - 1))`` plus one element within int64 bits;
    data not NULL unless the tensor is empty; byte_offset <= INT64_MAX. Then,
    when ``devices`` is given, dlpack-ref's policy: the device type one of
    them. Nothing is consumed or freed; the arithmetic is exact (Python
    ints), so no overflow in the check itself.

    Parameters
    ----------
    capsule : PyCapsule
        Any capsule; its fields are read, never written.
    devices : collection of int or None
        Device types the consumer holds: dlpack-ref's policy
        (:data:`DEVICE_POLICY`, ``SUPPORTED`` of ``dlpack_ref._devices``) by
        default; None for the universal checks alone (what a library that
        vendors ``dlpack_ref_api.pxd`` gets).

    Returns
    -------
    str or None
        None when the capsule must be accepted, else the reason it must be
        refused (the first rule it breaks).

    Raises
    ------
    TypeError
        For anything that is not a capsule (``from_dlpack`` raises TypeError too).
    """
    name = capsule_name(capsule)
    if name in (NAME_USED_VERSIONED, NAME_USED_LEGACY):
        return f"capsule already consumed (named {name.decode()!r})"
    if name not in (NAME_VERSIONED, NAME_LEGACY):
        return f"capsule named {name!r} is not a DLPack tensor capsule"
    versioned = name == NAME_VERSIONED
    struct = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(
        PyCapsule_GetPointer(id(capsule), name))
    null_strides_ok = True
    flags = 0
    if versioned:
        if struct.version.major != 1:
            return f"version {struct.version.major}.{struct.version.minor}: major must be 1"
        null_strides_ok = struct.version.minor < 2
        flags = struct.flags
    return _tensor_verdict(struct.dl_tensor, flags, null_strides_ok, devices)


def _tensor_verdict(t, flags: int, null_strides_ok: bool, devices) -> str | None:
    nd = t.ndim
    if not 0 <= nd <= MAX_NDIM:
        return f"ndim {nd} out of 0..{MAX_NDIM}"
    dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    try:
        from_triple(*dtype)
    except ValueError:
        return f"dtype {dtype} is not a DLPack 1.3 data type"
    device = (t.device.device_type, t.device.device_id)
    if device[0] not in _DEVICE_TYPES:
        return f"device type {device[0]} is not a DLDeviceType"
    if device[1] < 0:
        return f"device_id {device[1]} is negative"
    if nd > 0 and not t.shape:
        return f"shape is NULL with ndim {nd}"
    if nd > 0 and not t.strides and not null_strides_ok:
        return "strides are NULL in a capsule of version >= 1.2"
    shape = _read_int64s(t.shape, nd) or ()
    for i, extent in enumerate(shape):
        if extent < 0:
            return f"shape[{i}]={extent} is negative"
    count = 0 if 0 in shape else math.prod(shape)
    if count > INT64_MAX:
        return "the product of the extents overflows int64"
    bits = t.dtype.bits * t.dtype.lanes
    if bits < 8 and flags & FLAG_IS_SUBBYTE_TYPE_PADDED:
        bits = 8
    if count > (INT64_MAX - 7) // bits:
        return "the size in bytes overflows int64"
    if count and t.strides:
        strides = _read_int64s(t.strides, nd)
        if any(s == INT64_MAX or s < -INT64_MAX for s in strides):
            return "a stride is INT64_MAX or INT64_MIN"
        span = sum(abs(s) * (n - 1) for n, s in zip(shape, strides) if n > 1)
        if span > INT64_MAX or span + 1 > INT64_MAX // bits:
            return "the stride span overflows int64 bytes"
    if count and not t.data:
        return "data is NULL for a non-empty tensor"
    if t.byte_offset > INT64_MAX:
        return f"byte_offset {t.byte_offset} overflows int64"
    if devices is not None and device[0] not in devices:
        return f"device type {device[0]} is not held by this consumer (policy)"
    return None
