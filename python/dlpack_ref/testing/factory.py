"""The capsule factory: DLPack capsules built with :mod:`ctypes`, any field
set to any value, deleter calls counted.

:class:`CapsuleFactory`
    ``make(...)`` returns a capsule (``dltensor_versioned`` or ``dltensor``)
    over a ``DLManagedTensorVersioned`` / ``DLManagedTensor`` whose every field
    is controllable, including values no correct producer would write (a major
    version of 2, an ndim of -1, a NULL shape, an unknown device type, ...). The
    factory counts how often the deleters of its tensors run
    (``deleter_calls``, ``calls_for(cap_id)``, ``live``).

:class:`ForeignProducer`
    An object with ``__dlpack__`` / ``__dlpack_device__`` that hands out the
    factory's capsules, like a third-party array would. It can behave like a
    pre-1.0 producer that rejects the ``max_version`` keyword (to test the
    legacy fallback), raise a chosen exception, or return something that is not
    a capsule. It records the keywords of every ``__dlpack__`` call.

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
* A factory made with ``keep_freed=True`` releases a tensor's buffers at its
  deleter's call as any other, but does not hand their memory back at once:
  the buffers of the last 16 tensors freed are kept as they were. A consumer
  that reads a tensor after its deleter ran (a use after free) then reads
  the tensor as it was, whatever the allocator does: what it does next, and
  so a verdict on it, is the same in every run. The conformance checker's
  consumer cases use it. The default frees the memory at once, so that a
  sanitizer reports such a read by dlpack-ref itself.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import itertools
import os
import threading
from typing import Any

from .abi import (
    DELETER_T, FLAG_IS_SUBBYTE_TYPE_PADDED, NAME_LEGACY, NAME_VERSIONED, DLManagedTensor,
    DLManagedTensorVersioned, PyCapsule_GetContext, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_New,
    PyCapsule_SetContext,
)

__all__ = ["CapsuleFactory", "ForeignProducer"]

# Buffers larger than this are not allocated for data="alloc": such capsules
# (huge shapes or strides) exist to be refused, so a small buffer stands in.
_MAX_ALLOC = 1 << 26
_ALIGN = 256

# Capsules keep a pointer to their name, not a copy: every name ever used
# stays alive here (a handful of short strings).
_NAMES: dict[bytes, ctypes.Array] = {}


def _name_buffer(name: bytes | None):
    """A char buffer of ``name`` that lives as long as the process (None for NULL)."""
    # setdefault, not a store: two threads making the first capsule of a
    # name must share one buffer, or the loser's capsule names freed memory.
    return None if name is None else _NAMES.setdefault(name, ctypes.create_string_buffer(name))


class _Counts:
    """Deleter bookkeeping of one factory; outlives it while capsules do."""

    def __init__(self, keep_freed: bool) -> None:
        self.total = 0
        self.per_id: dict[int, int] = {}
        self.pending = 0  # tensors whose deleter has not run
        self.keep_freed = keep_freed


@dataclasses.dataclass(slots=True)
class _Record:
    """What one tensor keeps alive until its deleter runs."""

    cap_id: int
    counts: _Counts
    buffers: list | None
    #: where the capsule's name was when it was made (0 for NULL)
    name_address: int
    versioned: bool
    released: bool = False


# Managed-struct address -> record. A record stays after its deleter ran
# (without its buffers) so that a second call is counted, until a new tensor
# is made at the same address.
_RECORDS: dict[int, _Record] = {}
# Capsule context value -> record, for the capsule destructor.
_BY_CONTEXT: dict[int, _Record] = {}
_LOCK = threading.RLock()
# The buffers of the last tensors freed by factories made with keep_freed.
# A count, not bytes: the checker's cases, which keep them, make small tensors.
_FREED: collections.deque = collections.deque(maxlen=16)


def _fresh_lock_in_child() -> None:
    # A forked child has only the forking thread: a lock another thread held
    # at the fork would be held forever there.
    global _LOCK
    _LOCK = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)
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
            record.counts.pending -= 1
            # Freed here, as a DLPack deleter frees its tensor: the caller
            # must not touch the struct after deleter() returns.
            if record.counts.keep_freed:
                _FREED.append(record.buffers)
            record.buffers = None


def _on_capsule_destroyed(capsule: int) -> None:
    context = PyCapsule_GetContext(capsule)
    with _LOCK:
        record = _BY_CONTEXT.pop(context or 0, None)
    if record is None:
        return
    name_address = PyCapsule_GetName(capsule) or 0
    if name_address != record.name_address:
        # A consumer renamed it: it owns the tensor now. Compared by address,
        # not text: a capsule made named used_* and consumed by one that
        # ignores the name is renamed used_* again, by the consumer's string.
        return
    struct_address = PyCapsule_GetPointer(capsule, ctypes.string_at(name_address) if name_address else None)
    if record.released:
        # The deleter ran already, from a consumer that kept the capsule's
        # name: the struct is freed. Count the second call a real destructor
        # makes instead of reading the freed struct.
        _on_delete(struct_address)
        return
    struct_type = DLManagedTensorVersioned if record.versioned else DLManagedTensor
    deleter = struct_type.from_address(struct_address).deleter
    if deleter:
        DELETER_T(deleter)(struct_address)


def _dispatch(kind: int, address: int) -> None:
    (_on_capsule_destroyed if kind else _on_delete)(address)


_CALLBACKS: list = []  # ctypes callbacks must outlive every call through them


def _trampolines(dispatch) -> tuple[int, int]:
    """The addresses of the deleter and the capsule destructor, which call
    ``dispatch(0, tensor)`` and ``dispatch(1, capsule)``: the core's C
    trampolines, which keep the pending exception of a capsule that dies
    while one is raised and take the GIL themselves; plain ctypes callbacks
    where dlpack-ref is not installed (a reproduction run with the library
    alone)."""
    try:
        from dlpack_ref._dlpack_ref import _testing_trampolines
    except ImportError:
        callbacks = (DELETER_T(lambda address: dispatch(0, address)), DELETER_T(lambda capsule: dispatch(1, capsule)))
        _CALLBACKS.extend(callbacks)
        deleter, destructor = (ctypes.cast(c, ctypes.c_void_p).value for c in callbacks)
        return deleter, destructor
    return _testing_trampolines(dispatch)


# One deleter serves every tensor, dispatching on the address it receives.
_DELETER_ADDRESS, _CAPSULE_DESTRUCTOR_ADDRESS = _trampolines(_dispatch)


# --- field helpers -----------------------------------------------------------

def _ints(value: Any, protocol: str) -> tuple[int, ...]:
    """``value`` (a dtype triple, a device pair), or what its method
    ``protocol`` (``__dlpack_data_type__``, ``__dlpack_device__``) returns, as ints."""
    if hasattr(value, protocol):
        value = getattr(value, protocol)()
    return tuple(int(v) for v in value)


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

    Args:
        keep_freed: hold the memory of the last 16 tensors whose deleter
            ran instead of freeing it at once, so that a consumer that reads
            a tensor after its deleter ran reads it as it was. Each holds its
            data too: meant for small tensors.

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

    def __init__(self, *, keep_freed: bool = False) -> None:
        self._counts = _Counts(keep_freed)
        self._no_deleter_buffers: list = []
        self.last_data = 0
        self.last_id = 0
        self.last_address = 0

    @property
    def deleter_calls(self) -> int:
        return self._counts.total

    @property
    def live(self) -> int:
        return self._counts.pending

    def calls_for(self, cap_id: int) -> int:
        """How many times the deleter of the capsule with this id ran
        (ids come from :attr:`last_id`, in the order capsules were made)."""
        return self._counts.per_id.get(cap_id, 0)

    def make(self, shape=(2, 3), dtype=(2, 32, 1), *, versioned: bool = True, version=(1, 3), flags: int = 0,
             strides=None, shape_null: bool = False, ndim: int | None = None, device=(1, 0), byte_offset: int = 0,
             data="alloc", name=None, deleter: bool = True, fill: bytes | None = None):
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
        # The valid capsule first; each option that breaks it is a statement
        # of its own, which a reproduction whose rule never gives it leaves out.
        shape = tuple(int(n) for n in shape)
        code, bits, lanes = _ints(dtype, "__dlpack_data_type__")
        device_type, device_id = _ints(device, "__dlpack_device__")
        ndim_field, length = len(shape), len(shape)
        if ndim is not None:
            ndim_field, length = _ndim_override(shape, ndim)
        stride_values = _c_contiguous_strides(shape)
        if strides is not None:
            stride_values = _given_strides(strides)
        name_bytes = NAME_VERSIONED if versioned else NAME_LEGACY
        if name is not None:
            name_bytes = _given_name(name)
        struct = (DLManagedTensorVersioned if versioned else DLManagedTensor)()
        buffers: list = [struct]
        data_address = None
        if data != "alloc":
            data_address = _given_data(data, fill)
        if data_address is None:
            data_address = _allocated(shape, stride_values, (code, bits, lanes), flags, byte_offset, fill, buffers)
        if versioned:
            struct.version.major, struct.version.minor = (int(v) for v in version)
            struct.flags = int(flags) % (1 << 64)
        tensor = struct.dl_tensor
        tensor.data = data_address or None
        tensor.device.device_type, tensor.device.device_id = device_type, device_id
        tensor.ndim = ndim_field
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, lanes
        tensor.shape = _kept(buffers, _int64_array(shape, length, 1))
        if shape_null:
            tensor.shape = None
        if stride_values is not None:
            tensor.strides = _kept(buffers, _int64_array(stride_values, length, 0))
        tensor.byte_offset = int(byte_offset) % (1 << 64)
        struct.deleter = _DELETER_ADDRESS
        if not deleter:
            struct.deleter = None
        return self._capsule(struct, buffers, name_bytes, versioned, data_address)

    def _capsule(self, struct, buffers: list, name: bytes | None, versioned: bool, data_address: int):
        """The capsule of ``struct``, its deleter counted (a NULL one: its
        ``buffers`` kept as long as the factory)."""
        address = ctypes.addressof(struct)
        name_buffer = _name_buffer(name)
        with _LOCK:
            cap_id = next(_CAP_IDS)
            struct.manager_ctx = cap_id
            name_address = 0 if name_buffer is None else ctypes.addressof(name_buffer)
            record = _Record(cap_id, self._counts, buffers, name_address, versioned, released=not struct.deleter)
            if struct.deleter:
                _RECORDS[address] = record
                self._counts.pending += 1
            else:
                self._no_deleter_buffers.append(buffers)
            _BY_CONTEXT[cap_id] = record
        capsule = PyCapsule_New(address, name_buffer, _CAPSULE_DESTRUCTOR_ADDRESS)
        PyCapsule_SetContext(id(capsule), cap_id)
        self.last_data = data_address or 0
        self.last_id = cap_id
        self.last_address = address
        return capsule


# --- the options of make(): a valid tensor's fields, then what breaks it -------

def _kept(buffers: list, array) -> int:
    """The address of ``array``, kept in ``buffers`` (alive until the deleter runs)."""
    buffers.append(array)
    return ctypes.addressof(array)


def _allocated(shape, strides, dtype, flags, byte_offset, fill, buffers) -> int:
    """data="alloc": the address of a zeroed, 256-byte-aligned buffer for
    the elements at ``byte_offset``, ``fill`` written from the first."""
    code, bits, lanes = dtype
    padded = bits < 8 and flags & FLAG_IS_SUBBYTE_TYPE_PADDED
    bits_per_element = (8 if padded else bits) * lanes
    low, high = _byte_span(shape, strides or _c_contiguous_strides(shape), bits_per_element)
    fill = fill or b""
    size = -low + byte_offset + max(high, len(fill))
    if size > _MAX_ALLOC or byte_offset < 0:
        low, size, fill = 0, 0, b""
    base = _kept(buffers, ctypes.create_string_buffer(size + _ALIGN))
    data_address = base + (-base % _ALIGN) - low
    if fill:
        ctypes.memmove(data_address + byte_offset, fill, len(fill))
    return data_address


def _given_data(data, fill) -> int | None:
    """An int address (0 for None) written as is; None for "alloc"."""
    if data is None or (isinstance(data, int) and not isinstance(data, bool)):
        if fill is not None:
            raise ValueError("fill needs data='alloc'")
        return int(data or 0)
    if data != "alloc":
        raise ValueError(f"data must be 'alloc', an int address or None, not {data!r}")
    return None


def _ndim_override(shape: tuple, ndim) -> tuple[int, int]:
    """(the ndim field, the length of the shape and strides arrays): padded
    up to a positive override of at most 1024, for a consumer that reads
    them before it checks ndim."""
    ndim_field = int(ndim)
    return ndim_field, max(len(shape), ndim_field if 0 < ndim_field <= 1024 else 0)


def _given_strides(strides):
    """The strides given: a tuple, or None for "null" (a NULL pointer)."""
    if isinstance(strides, str):
        if strides != "null":
            raise ValueError(f"strides must be None, a tuple or 'null', not {strides!r}")
        return None
    return tuple(strides)


def _given_name(name) -> bytes | None:
    """The capsule name given: bytes, or None for "null" (a NULL name)."""
    if isinstance(name, str) and name != "null":
        raise ValueError(f"name must be None, bytes or 'null', not {name!r}")
    return None if name == "null" else name


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
        self.device = _ints(device, "__dlpack_device__")
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
