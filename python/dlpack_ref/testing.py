"""Tools to test DLPack producers and consumers: hand-built capsules.

This module builds DLPack capsules with :mod:`ctypes` (and two small C
trampolines of the core, no NumPy), so that any field can be set to any value,
including values no correct producer would write (a major version of 2, an
ndim of -1, a NULL shape, an unknown device type, ...). It is meant for
consumer tests, ours and other libraries': hand a malformed capsule to a
``from_dlpack`` and check that it raises the documented error, does not crash,
and calls the producer's deleter exactly once.

Main pieces:

:class:`CapsuleFactory`
    ``make(...)`` returns a capsule (``dltensor_versioned`` or ``dltensor``)
    over a ``DLManagedTensorVersioned`` / ``DLManagedTensor`` whose every field
    is controllable. The factory counts how often the deleters of its tensors
    run (``deleter_calls``, ``calls_for(cap_id)``, ``live``).

:class:`ForeignProducer`
    An object with ``__dlpack__`` / ``__dlpack_device__`` that hands out the
    factory's capsules, like a third-party array would. It can behave like a
    pre-1.0 producer that rejects the ``max_version`` keyword (to test the
    legacy fallback), raise a chosen exception, or return something that is not
    a capsule. It records the keywords of every ``__dlpack__`` call.

:func:`read_capsule`, :func:`capsule_name`
    Read the fields of any DLPack capsule (ours or another library's) without
    consuming it.

Lifetime rules the factory follows, which are DLPack's rules:

* The deleter and the capsule destructor are C trampolines of the core
  (``_testing_trampolines``) that call back into this module. They take the
  GIL themselves, so a consumer may call them from any thread, and they keep
  an exception being raised intact (a consumer may destroy a capsule while
  it raises). They do nothing once the interpreter is finalizing. They do not
  free anything in C: every buffer (the managed struct, shape, strides, data) is a ctypes object
  kept alive by a module-level registry until the tensor's deleter runs, and
  released then. A capsule may therefore outlive the factory that made it.
* The capsule destructor calls the deleter only while the capsule still has
  the name it was created with (``dltensor_versioned``, ``dltensor`` or the
  custom ``name=``): a consumer that took ownership renamed it
  ``used_dltensor[_versioned]`` and is responsible for calling the deleter.
* A tensor made with ``deleter=False`` has a NULL deleter; its buffers stay
  alive as long as the factory.
* The deleter of a tensor can be called more than once by a buggy consumer:
  this is counted (``calls_for`` returns 2) and does not crash, since the
  deleter only uses the address it is given as a key.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any

from ._dlpack_ref import _testing_trampolines

__all__ = [
    "CapsuleFactory",
    "ForeignProducer",
    "DLPackVersion",
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "DLPackExchangeAPIHeader",
    "DLPackExchangeAPI",
    "FLAG_READ_ONLY",
    "FLAG_IS_COPIED",
    "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "NAME_VERSIONED",
    "NAME_LEGACY",
    "NAME_USED_VERSIONED",
    "NAME_USED_LEGACY",
    "capsule_name",
    "read_capsule",
]

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

NAME_VERSIONED = b"dltensor_versioned"
NAME_LEGACY = b"dltensor"
NAME_USED_VERSIONED = b"used_dltensor_versioned"
NAME_USED_LEGACY = b"used_dltensor"

# Buffers larger than this are not allocated for data="alloc": such capsules
# (huge shapes or strides) exist to be refused, so a small buffer stands in.
_MAX_ALLOC = 1 << 26
_ALIGN = 256


# --- the DLPack 1.3 structs, as ctypes sees them ---------------------------

class DLPackVersion(ctypes.Structure):
    """``DLPackVersion``: ``major``, ``minor`` (uint32)."""
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    """``DLDevice``: ``device_type`` (the enum, as int32), ``device_id``."""
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """``DLDataType``: ``code`` (uint8), ``bits`` (uint8), ``lanes`` (uint16)."""
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """``DLTensor``. ``shape`` and ``strides`` are raw addresses (c_void_p)
    so that NULL and arbitrary values can be written."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """Legacy ``DLManagedTensor`` (capsule name ``dltensor``). ``deleter`` is
    the raw function address (0 for NULL)."""
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    """``DLManagedTensorVersioned`` (capsule name ``dltensor_versioned``).
    ``deleter`` is the raw function address (0 for NULL)."""
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLPackExchangeAPIHeader(ctypes.Structure):
    """``DLPackExchangeAPIHeader``: ``version`` and ``prev_api`` (a pointer
    to the header of an older table, NULL at the end of the chain)."""


DLPackExchangeAPIHeader._fields_ = [
    ("version", DLPackVersion),
    ("prev_api", ctypes.POINTER(DLPackExchangeAPIHeader)),
]


class DLPackExchangeAPI(ctypes.Structure):
    """``DLPackExchangeAPI`` (behind a ``dlpack_exchange_api`` capsule); the
    function pointers are raw addresses (0 for NULL)."""
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


# --- the Python C API through ctypes ---------------------------------------
# Every PyObject* argument is passed as c_void_p: the capsule destructor runs
# while the capsule is being deallocated, and a py_object argument would
# take a new reference to a dying object.

_DELETER_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _c_api(name: str, restype, *argtypes):
    """A private prototype of a Python C API function: setting argtypes on
    ctypes.pythonapi's function objects would change them for every module."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_PyCapsule_New = _c_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_PyCapsule_GetName = _c_api("PyCapsule_GetName", ctypes.c_void_p, ctypes.c_void_p)
_PyCapsule_GetPointer = _c_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_PyCapsule_GetContext = _c_api("PyCapsule_GetContext", ctypes.c_void_p, ctypes.c_void_p)
_PyCapsule_SetContext = _c_api("PyCapsule_SetContext", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

# Capsules keep a pointer to their name, not a copy: every name ever used
# stays alive here (a handful of short strings).
_NAMES: dict[bytes, ctypes.Array] = {}


def _name_address(name: bytes | None) -> int | None:
    if name is None:
        return None
    buf = _NAMES.get(name)
    if buf is None:
        buf = _NAMES[name] = ctypes.create_string_buffer(name)
    return ctypes.addressof(buf)


def _c_string(address: int | None) -> bytes | None:
    return None if not address else ctypes.string_at(address)


class _Counts:
    """Deleter bookkeeping of one factory; outlives it while capsules do."""

    def __init__(self) -> None:
        self.total = 0
        self.per_id: dict[int, int] = {}
        self.live = 0


class _Record:
    """What one tensor keeps alive until its deleter runs."""

    __slots__ = ("cap_id", "counts", "buffers", "name", "versioned", "released")

    def __init__(self, cap_id, counts, buffers, name, versioned):
        self.cap_id = cap_id
        self.counts = counts
        self.buffers = buffers
        self.name = name
        self.versioned = versioned
        self.released = False


# Managed-struct address -> record. A record stays after its deleter ran
# (without its buffers) so that a second call is counted, until a new tensor
# is made at the same address.
_RECORDS: dict[int, _Record] = {}
# Capsule context value -> record, for the capsule destructor.
_BY_CONTEXT: dict[int, _Record] = {}
_LOCK = threading.RLock()
_CAP_IDS = itertools.count(1)


def _on_delete(address: int | None) -> None:
    with _LOCK:
        record = _RECORDS.get(address or 0)
        if record is None:
            return
        record.counts.total += 1
        record.counts.per_id[record.cap_id] = record.counts.per_id.get(record.cap_id, 0) + 1
        if not record.released:
            record.released = True
            record.counts.live -= 1
            # Freed here, as a DLPack deleter frees its tensor: the caller
            # must not touch the struct after deleter() returns.
            record.buffers = None


def _on_capsule_destroyed(capsule: int) -> None:
    context = _PyCapsule_GetContext(capsule)
    with _LOCK:
        record = _BY_CONTEXT.pop(context or 0, None)
    if record is None:
        return
    name_address = _PyCapsule_GetName(capsule)
    if _c_string(name_address) != record.name:
        return  # a consumer renamed it: it owns the tensor now
    struct_address = _PyCapsule_GetPointer(capsule, name_address)
    struct_type = DLManagedTensorVersioned if record.versioned else DLManagedTensor
    deleter = struct_type.from_address(struct_address).deleter
    if deleter:
        _DELETER_T(deleter)(struct_address)


def _dispatch(kind: int, address: int) -> None:
    (_on_capsule_destroyed if kind else _on_delete)(address)


# The deleter and the capsule destructor are C trampolines of the core that
# call _dispatch with the pending exception saved (a ctypes callback would
# swallow an exception being raised while a capsule dies) and the GIL held.
# One deleter serves every tensor, dispatching on the address it receives.
_DELETER_ADDRESS, _CAPSULE_DESTRUCTOR_ADDRESS = _testing_trampolines(_dispatch)


# --- field helpers -----------------------------------------------------------

def _as_dtype_triple(dtype: Any) -> tuple[int, int, int]:
    if hasattr(dtype, "__dlpack_data_type__"):
        dtype = dtype.__dlpack_data_type__()
    code, bits, lanes = dtype
    return int(code), int(bits), int(lanes)


def _as_device_pair(device: Any) -> tuple[int, int]:
    if hasattr(device, "__dlpack_device__"):
        device = device.__dlpack_device__()
    device_type, device_id = device
    return int(device_type), int(device_id)


def _c_contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _byte_span(shape, strides, bits_per_element: int) -> tuple[int, int]:
    """Bytes addressed below and above the first element: (low <= 0, high)."""
    if any(n <= 0 for n in shape):
        return 0, 0
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + 1
    return -((-low * bits_per_element) // 8), -((-high * bits_per_element) // 8)


def _int64_array(values, length: int, pad: int):
    array = (ctypes.c_int64 * max(length, 1))()
    for i, v in enumerate(values):
        # wrap like C would: out-of-range test values still fit in 64 bits
        array[i] = ((int(v) + (1 << 63)) % (1 << 64)) - (1 << 63)
    for i in range(len(values), length):
        array[i] = pad
    return array


class CapsuleFactory:
    """Makes DLPack capsules with every field under the caller's control and
    counts the calls of their deleters.

    Example::

        f = CapsuleFactory()
        cap = f.make(shape=(2, 3), dtype=(2, 32, 1))        # float32, versioned 1.3
        arr = dlpack_ref.from_dlpack(cap)
        del arr; gc.collect()
        assert f.deleter_calls == 1

    Attributes:
        deleter_calls: how many times any deleter of this factory ran.
        live: tensors made with a deleter whose deleter has not run yet.
        last_data: the ``data`` field of the last capsule made (0 for NULL).
        last_id: the id of the last capsule made, for :meth:`calls_for`.
        last_address: the address of the last managed struct made.
    """

    def __init__(self) -> None:
        self._counts = _Counts()
        self._no_deleter_buffers: list = []
        self.last_data = 0
        self.last_id = 0
        self.last_address = 0

    @property
    def deleter_calls(self) -> int:
        return self._counts.total

    @property
    def live(self) -> int:
        return self._counts.live

    def calls_for(self, cap_id: int) -> int:
        """How many times the deleter of the capsule with this id ran
        (ids come from :attr:`last_id`, in the order capsules were made)."""
        return self._counts.per_id.get(cap_id, 0)

    def make(
        self,
        shape=(2, 3),
        dtype=(2, 32, 1),
        *,
        versioned: bool = True,
        version=(1, 3),
        flags: int = 0,
        strides=None,
        shape_null: bool = False,
        ndim: int | None = None,
        device=(1, 0),
        byte_offset: int = 0,
        data="alloc",
        name=None,
        deleter: bool = True,
        fill: bytes | None = None,
    ):
        """Return a new capsule over a hand-built managed tensor.

        Args:
            shape: the extents written to ``shape`` (any ints, negative too).
            dtype: ``(code, bits, lanes)`` or an object with
                ``__dlpack_data_type__``; written as is (uint8/uint8/uint16).
            versioned: ``DLManagedTensorVersioned`` in a ``dltensor_versioned``
                capsule (True) or legacy ``DLManagedTensor`` in ``dltensor``.
            version: ``(major, minor)`` written to ``version`` (versioned only).
            flags: the ``flags`` field (versioned only).
            strides: None for C-contiguous strides (in elements), a tuple of
                strides, or ``"null"`` for a NULL ``strides`` pointer.
            shape_null: write a NULL ``shape`` pointer.
            ndim: override the ``ndim`` field (default ``len(shape)``). The
                shape and strides arrays are padded (with 1 and 0) up to a
                positive override of at most 1024, so that a consumer that
                reads them before checking ndim reads valid memory.
            device: ``(device_type, device_id)`` or an object with
                ``__dlpack_device__``.
            byte_offset: the ``byte_offset`` field; with ``data="alloc"`` the
                buffer is large enough for the elements at that offset.
            data: ``"alloc"`` (a zeroed, 256-byte-aligned buffer owned by the
                factory until the deleter runs), an int address written as
                is, or None for NULL.
            name: the capsule name: None for the standard name of the kind,
                bytes for any other name, or ``"null"`` for a NULL name. The
                capsule destructor calls the deleter while the capsule keeps
                this name.
            deleter: False writes a NULL deleter (its buffers then live as
                long as the factory).
            fill: bytes copied to the first element (``data + byte_offset``)
                onward; needs ``data="alloc"``.
        """
        shape = tuple(int(n) for n in shape)
        code, bits, lanes = _as_dtype_triple(dtype)
        device_type, device_id = _as_device_pair(device)
        ndim_field = len(shape) if ndim is None else int(ndim)
        length = max(len(shape), ndim_field if 0 < ndim_field <= 1024 else 0)

        if isinstance(strides, str):
            if strides != "null":
                raise ValueError(f"strides must be None, a tuple or 'null', not {strides!r}")
            stride_values = None
        else:
            stride_values = _c_contiguous_strides(shape) if strides is None else tuple(strides)
        if isinstance(name, str) and name != "null":
            raise ValueError(f"name must be None, bytes or 'null', not {name!r}")
        if name is None:
            name = NAME_VERSIONED if versioned else NAME_LEGACY
        elif name == "null":
            name = None

        buffers: list = []
        shape_array = _int64_array(shape, length, 1)
        buffers.append(shape_array)
        strides_array = None
        if stride_values is not None:
            strides_array = _int64_array(stride_values, length, 0)
            buffers.append(strides_array)

        data_address = self._data(data, shape, stride_values, code, bits, lanes, flags,
                                  byte_offset, fill, buffers)

        struct = (DLManagedTensorVersioned if versioned else DLManagedTensor)()
        buffers.append(struct)
        if versioned:
            struct.version.major, struct.version.minor = (int(v) for v in version)
            struct.flags = int(flags) % (1 << 64)
        tensor = struct.dl_tensor
        tensor.data = data_address or None
        tensor.device.device_type = device_type
        tensor.device.device_id = device_id
        tensor.ndim = ndim_field
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, lanes
        tensor.shape = None if shape_null else ctypes.addressof(shape_array)
        tensor.strides = None if strides_array is None else ctypes.addressof(strides_array)
        tensor.byte_offset = int(byte_offset) % (1 << 64)
        struct.deleter = _DELETER_ADDRESS if deleter else None

        address = ctypes.addressof(struct)
        with _LOCK:
            cap_id = next(_CAP_IDS)
            struct.manager_ctx = cap_id
            record = _Record(cap_id, self._counts, buffers, name, versioned)
            if deleter:
                _RECORDS[address] = record
                self._counts.live += 1
            else:
                self._no_deleter_buffers.append(buffers)
                record.released = True
            _BY_CONTEXT[cap_id] = record
        capsule = _PyCapsule_New(address, _name_address(name), _CAPSULE_DESTRUCTOR_ADDRESS)
        _PyCapsule_SetContext(id(capsule), cap_id)
        self.last_data = data_address or 0
        self.last_id = cap_id
        self.last_address = address
        return capsule

    @staticmethod
    def _data(data, shape, strides, code, bits, lanes, flags, byte_offset, fill, buffers) -> int:
        if data is None or (isinstance(data, int) and not isinstance(data, bool)):
            if fill is not None:
                raise ValueError("fill needs data='alloc'")
            return int(data or 0)
        if data != "alloc":
            raise ValueError(f"data must be 'alloc', an int address or None, not {data!r}")
        padded = bits < 8 and flags & FLAG_IS_SUBBYTE_TYPE_PADDED
        bits_per_element = (8 if padded else bits) * lanes
        low, high = _byte_span(shape, strides or _c_contiguous_strides(shape), bits_per_element)
        fill = fill or b""
        size = -low + byte_offset + max(high, len(fill))
        if size > _MAX_ALLOC or byte_offset < 0:
            low, size, fill = 0, 0, b""
        raw = ctypes.create_string_buffer(size + _ALIGN)
        buffers.append(raw)
        base = ctypes.addressof(raw)
        data_address = base + (-base % _ALIGN) - low
        if fill:
            ctypes.memmove(data_address + byte_offset, fill, len(fill))
        return data_address


class ForeignProducer:
    """A third-party array stand-in: ``__dlpack__`` hands out capsules of a
    :class:`CapsuleFactory`.

    Args:
        factory: the factory that makes (and counts) the capsules.
        legacy_only: behave like a pre-1.0 producer: ``__dlpack__(stream=None)``
            only, any other keyword raises TypeError, and the capsule is legacy.
        raises: an exception instance ``__dlpack__`` raises (after recording
            the call).
        returns: an object ``__dlpack__`` returns instead of a capsule.
        device: what ``__dlpack_device__`` returns, and the capsule's device.
        **make_kwargs: passed to ``factory.make`` (shape, dtype, version, ...).

    Without ``legacy_only``, ``__dlpack__`` follows the standard: a versioned
    capsule when ``max_version`` is given with a major >= 1, else legacy
    (``versioned=`` in make_kwargs overrides this). ``dl_device``, ``copy``
    and ``stream`` are only recorded, never acted on.

    Attributes:
        calls: the keywords of every ``__dlpack__`` call, as dicts, in order.
    """

    def __init__(self, factory: CapsuleFactory, *, legacy_only: bool = False, raises=None,
                 returns=None, device=(1, 0), **make_kwargs) -> None:
        self.factory = factory
        self.legacy_only = legacy_only
        self.raises = raises
        self.returns = returns
        self.device = _as_device_pair(device)
        self.make_kwargs = make_kwargs
        self.calls: list[dict] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **kwargs):
        self.calls.append(dict(kwargs))
        if self.legacy_only:
            unexpected = sorted(set(kwargs) - {"stream"})
            if unexpected:
                raise TypeError(
                    f"__dlpack__() got an unexpected keyword argument {unexpected[0]!r}")
        if self.raises is not None:
            raise self.raises
        if self.returns is not None:
            return self.returns
        make_kwargs = dict(self.make_kwargs)
        if "versioned" not in make_kwargs:
            max_version = kwargs.get("max_version")
            make_kwargs["versioned"] = (not self.legacy_only and max_version is not None
                                        and max_version[0] >= 1)
        return self.factory.make(device=self.device, **make_kwargs)


# --- reading capsules ----------------------------------------------------------

def capsule_name(capsule) -> bytes | None:
    """The current name of a capsule (None when NULL); raises TypeError for
    anything that is not a capsule."""
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"expected a PyCapsule, got {type(capsule).__name__}")
    return _c_string(_PyCapsule_GetName(id(capsule)))


def _read_int64s(address: int | None, count: int):
    if not address:
        return None
    return tuple((ctypes.c_int64 * count).from_address(address))


def read_capsule(capsule) -> dict:
    """Every field of the managed tensor behind a DLPack capsule, without
    consuming it: ``name``, ``versioned``, ``address`` (of the managed
    struct), ``version`` (None for legacy), ``flags`` (None for legacy),
    ``manager_ctx``, ``deleter`` (addresses, 0 for NULL), ``data``,
    ``device``, ``ndim``, ``dtype`` (code, bits, lanes), ``shape_ptr``,
    ``strides_ptr``, ``shape`` and ``strides`` (tuples, None when NULL) and
    ``byte_offset``. The name decides the layout (``*dltensor_versioned`` is
    versioned); shape and strides are read only for 0 <= ndim <= 64.
    A consumed capsule (``used_*``) can be read only while its consumer still
    holds the tensor: once the deleter ran, the fields are freed memory.
    """
    name = capsule_name(capsule)
    if name not in (NAME_VERSIONED, NAME_LEGACY, NAME_USED_VERSIONED, NAME_USED_LEGACY):
        raise ValueError(f"not a DLPack capsule name: {name!r}")
    versioned = name.endswith(b"versioned")
    address = _PyCapsule_GetPointer(id(capsule), _name_address(name))
    struct = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address)
    tensor = struct.dl_tensor
    readable = 0 <= tensor.ndim <= 64
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
