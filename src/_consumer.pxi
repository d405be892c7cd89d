# The consumer: capsules in, validated field by field. Ownership is taken
# first (the capsule renamed, the managed tensor stored in a fresh Array), so
# every later failure ends in Array.__dealloc__ calling the deleter exactly once.

cdef tuple _MAX_VERSION = (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
cdef tuple _KW_MAX_VERSION = ("max_version",)
cdef object _DLPACK_NAME = "__dlpack__"

cdef extern from "Python.h":
    object PyObject_VectorcallMethod(object name, PyObject** args, size_t nargsf, object kwnames)

# Non-zero while any thread has a consumer stream set (dlpack_ref.cuda.stream);
# with none set, the consumer's stream is the legacy default, which is exactly
# what stream=None asks a producer for, so the device query can be skipped.
cdef int _stream_contexts = 0

cdef object _stream_contexts_lock = __import__("threading").Lock()

def _stream_context_entered(int delta):
    # Written rarely (entering/leaving a stream context), read on every
    # import; the lock keeps concurrent writers exact without the GIL.
    global _stream_contexts
    with _stream_contexts_lock:
        _stream_contexts += delta


cdef Array _array_from_capsule(object capsule):
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"__dlpack__ returned {type(capsule).__name__}, not a DLPack capsule")
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef void* ptr
    if name != NULL and strcmp(name, NAME_VERSIONED) == 0:
        ptr = PyCapsule_GetPointer(capsule, NAME_VERSIONED)
        PyCapsule_SetName(capsule, NAME_USED_VERSIONED)
        return _array_from_versioned(<DLManagedTensorVersioned*>ptr)
    if name != NULL and strcmp(name, NAME_LEGACY) == 0:
        ptr = PyCapsule_GetPointer(capsule, NAME_LEGACY)
        PyCapsule_SetName(capsule, NAME_USED_LEGACY)
        return _array_from_legacy(<DLManagedTensor*>ptr)
    if name != NULL and (strcmp(name, NAME_USED_VERSIONED) == 0 or strcmp(name, NAME_USED_LEGACY) == 0):
        raise BufferError(
            f"this DLPack capsule was already consumed (it is named {name.decode()!r}); "
            "a capsule can be imported once")
    shown = "NULL" if name == NULL else repr((<bytes>name).decode("utf-8", "replace"))
    raise BufferError(
        f"a capsule named {shown} is not a DLPack capsule; expected 'dltensor_versioned' or 'dltensor'")


cdef Array _owner_of(void* managed, bint versioned):
    """A fresh Array owning `managed`: from here on its __dealloc__ calls the
    deleter whatever happens; if not even the Array can be made, it is
    called here."""
    cdef Array a
    try:
        a = Array.__new__(Array)
    except BaseException:
        _call_deleter(managed, versioned)
        raise
    a._managed = managed
    a._managed_versioned = versioned
    return a


cdef Array _array_from_versioned(DLManagedTensorVersioned* m):
    cdef Array a = _owner_of(m, True)
    if m.version.major != DLPACK_MAJOR_VERSION:
        raise BufferError(
            f"DLPack capsule has version {m.version.major}.{m.version.minor}; dlpack-ref reads major "
            f"version {DLPACK_MAJOR_VERSION} (ABI {DLPACK_MAJOR_VERSION}.{DLPACK_MINOR_VERSION}). "
            "The capsule's deleter was called.")
    # NULL strides meant row-major until DLPack 1.2 made them mandatory.
    _adopt(a, &m.dl_tensor, m.flags, m.version.minor < 2)
    return a


cdef Array _array_from_legacy(DLManagedTensor* m):
    cdef Array a = _owner_of(m, False)
    _adopt(a, &m.dl_tensor, 0, True)
    return a


cdef int _adopt(Array a, DLTensor* t, uint64_t flags, bint null_strides_ok) except -1:
    """Validate t and describe it in a (which already owns it)."""
    cdef int32_t nd = t.ndim
    cdef int i
    cdef int64_t n = 1
    cdef int64_t extent, stride, span, bits
    if nd < 0 or nd > MAX_NDIM:
        raise BufferError(f"DLTensor.ndim={nd} is out of range; dlpack-ref accepts 0 to {MAX_NDIM}")
    _check_dtype(t.dtype)
    if not _supported_device_type(t.device.device_type):
        raise BufferError(
            f"DLTensor.device=({<int>t.device.device_type}, {t.device.device_id}) is not supported: "
            "dlpack-ref holds memory of kDLCPU (1), kDLCUDA (2), kDLCUDAHost (3) and kDLCUDAManaged (13)")
    if t.device.device_id < 0:
        raise BufferError(f"DLTensor.device.device_id={t.device.device_id} is negative")
    if nd > 0 and t.shape == NULL:
        raise BufferError(f"DLTensor.shape is NULL with ndim={nd}")
    if nd > 0 and t.strides == NULL and not null_strides_ok:
        raise BufferError(
            "DLTensor.strides is NULL with ndim > 0, which DLPack >= 1.2 forbids (NULL meant "
            "row-major only in legacy and pre-1.2 capsules)")
    _set_ndim(a, nd)
    for i in range(nd):
        extent = t.shape[i]
        if extent < 0:
            raise BufferError(f"DLTensor.shape[{i}]={extent} is negative")
        if extent and n > INT64_MAX // extent:
            raise BufferError(f"DLTensor shape overflows int64 at axis {i} (extent {extent})")
        n *= extent
        a._shape[i] = extent
    if nd > 0 and t.strides == NULL:
        _set_c_strides(a)
    else:
        for i in range(nd):
            a._strides[i] = t.strides[i]
    a._flags = flags & (FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED)
    bits = _storage_bits(t.dtype, a._flags)
    if n > 0:
        # The farthest element must be addressable: sum |stride| * (extent-1)
        # elements, times the element size, within int64.
        span = 0
        for i in range(nd):
            stride = a._strides[i]
            if stride == INT64_MAX or stride < -INT64_MAX:
                raise BufferError(f"DLTensor.strides[{i}]={stride} overflows")
            if stride < 0:
                stride = -stride
            if a._shape[i] > 1:
                if stride and (a._shape[i] - 1) > (INT64_MAX - span) // stride:
                    raise BufferError(
                        f"DLTensor strides overflow int64 at axis {i} (stride {a._strides[i]}, "
                        f"extent {a._shape[i]})")
                span += stride * (a._shape[i] - 1)
        if span + 1 > INT64_MAX // bits:
            raise BufferError(
                f"DLTensor's extent in bytes overflows int64 (shape {a.shape}, strides {a.strides}, "
                f"{bits} bits per element)")
        if t.data == NULL:
            raise BufferError(f"DLTensor.data is NULL for a non-empty tensor (shape {a.shape})")
    if t.byte_offset > <uint64_t>INT64_MAX:
        raise BufferError(f"DLTensor.byte_offset={t.byte_offset} overflows int64")
    a._data = <char*>t.data + t.byte_offset
    a._dtype = t.dtype
    a._device = t.device
    return 0


# --- from_dlpack -----------------------------------------------------------

cdef object _call_dlpack_versioned(object x):
    """x.__dlpack__(max_version=(1, 3)) through vectorcall (no kwargs dict)."""
    cdef PyObject* args[2]
    args[0] = <PyObject*>x
    args[1] = <PyObject*>_MAX_VERSION
    return PyObject_VectorcallMethod(_DLPACK_NAME, args, 1, _KW_MAX_VERSION)


cdef Array _import_plain(object x):
    """Zero-copy import with no device, copy or stream request."""
    cdef void* api
    if PyCapsule_CheckExact(x):
        return _array_from_capsule(x)
    if type(x) is Array:
        return _alias(<Array>x)
    api = _exchange_api_of(type(x))
    if api != NULL:
        return _import_via_exchange_api(<DLPackExchangeAPI*>api, x)
    try:
        capsule = _call_dlpack_versioned(x)
    except TypeError:
        if not hasattr(x, "__dlpack__"):
            raise _not_dlpack(x) from None
        # A producer older than DLPack 1.0 rejects max_version.
        capsule = x.__dlpack__()
    except AttributeError:
        if not hasattr(x, "__dlpack__"):
            raise _not_dlpack(x) from None
        raise
    return _array_from_capsule(capsule)


cdef object _not_dlpack(object x):
    return TypeError(
        f"from_dlpack expects an object with __dlpack__ and __dlpack_device__ or a DLPack capsule, "
        f"not {type(x).__name__}")


cdef Array _alias(Array x):
    """A new Array object on x's memory: what from_dlpack(Array) returns."""
    cdef Array v = _view(x, x._ndim)
    if x._ndim:
        memcpy(v._shape, x._shape, x._ndim * sizeof(int64_t))
        memcpy(v._strides, x._strides, x._ndim * sizeof(int64_t))
    return v


def from_dlpack(x, /, *, device=None, copy=None):
    """An Array from any DLPack producer or capsule.

    Zero-copy when neither ``device`` nor ``copy`` asks otherwise. Asks the
    producer for ``max_version=(1, 3)`` and falls back to the legacy call only
    on TypeError. ``device``: where the result must be usable (memory usable
    there in place is kept under its true device type). ``copy``: True always
    copies, False never does (CopyForbiddenError when one is needed), None
    copies only when needed. The producer moves or copies data itself when it
    can; an older producer's data is moved here.
    """
    if device is None and copy is None and _stream_contexts == 0:
        return _import_plain(x)
    if copy is not None and copy is not True and copy is not False:
        raise TypeError(f"copy must be True, False or None, not {copy!r}")
    cdef DLDevice target
    cdef DLDevice source
    cdef bint have_target = device is not None
    cdef Array a
    if have_target:
        target = _parse_device(device)
    if PyCapsule_CheckExact(x):
        a = _array_from_capsule(x)
        return _finish_import(a, target if have_target else a._device, copy, False)
    dlpack_device = getattr(x, "__dlpack_device__", None)
    if dlpack_device is None or not hasattr(x, "__dlpack__"):
        raise _not_dlpack(x)
    source = _parse_device(dlpack_device())
    if not have_target:
        target = source
    stream = None
    if _cuda_family(source.device_type) and (_stream_contexts or _cuda_family(target.device_type)):
        stream = _cuda().consumer_stream_for(_device_object(source), _device_object(target))
    kwargs = {"max_version": _MAX_VERSION}
    if stream is not None:
        kwargs["stream"] = stream
    if have_target:
        kwargs["dl_device"] = _dlpack_device_tuple(target)
    if copy is not None:
        kwargs["copy"] = copy
    cdef bint producer_did_it = True
    try:
        capsule = x.__dlpack__(**kwargs)
    except TypeError:
        # Pre-1.0 producer: no max_version, dl_device or copy; move/copy here.
        producer_did_it = False
        capsule = x.__dlpack__() if stream is None else x.__dlpack__(stream=stream)
    except BufferError:
        if not have_target or _can_access(target, source):
            raise
        # The producer cannot reach the target device: take the data as it
        # is and move it here (a copy, so copy=False cannot be honoured).
        if copy is False:
            raise CopyForbiddenError(
                f"copy=False, but the data on {_device_object(source)} cannot be used on "
                f"{_device_object(target)} without a copy") from None
        producer_did_it = False
        capsule = x.__dlpack__(max_version=_MAX_VERSION) if stream is None else \
            x.__dlpack__(max_version=_MAX_VERSION, stream=stream)
    a = _array_from_capsule(capsule)
    if stream is not None and stream != -1 and _cuda_family(a._device.device_type) and \
            (stream > 2 or a._device.device_id == source.device_id):
        # The producer ordered the data on our stream: it is the Array's now.
        a._stream = 0 if stream == 1 else <uintptr_t>stream
    return _finish_import(a, target, copy, producer_did_it, stream)


cdef Array _finish_import(Array a, DLDevice target, object copy, bint producer_did_it, object stream=None):
    """Apply the device and copy requests the producer did not."""
    cdef bint copied = producer_did_it and a._managed_versioned and \
        ((<DLManagedTensorVersioned*>a._managed).flags & FLAG_IS_COPIED) != 0
    if copy is True and not copied:
        return _copy_to(a, target, stream)
    if not _can_access(target, a._device):
        if copy is False:
            raise CopyForbiddenError(
                f"copy=False, but the data on {a.device} cannot be used on {_device_object(target)} "
                "without a copy")
        return _copy_to(a, target, stream)
    return a


# --- buffer-protocol import (asarray) and capsule inspection ---------------

cdef class _BufferOwner:
    """Holds a Py_buffer of another object for as long as views need it."""
    cdef Py_buffer view
    cdef bint acquired

    def __dealloc__(self):
        if self.acquired:
            PyBuffer_Release(&self.view)
            self.acquired = False


cdef DLDataType _dtype_of_format(const char* fmt, Py_ssize_t itemsize) except *:
    cdef DLDataType dt
    dt.lanes = 1
    raw = (<bytes>fmt).decode("ascii", "replace") if fmt != NULL else "B"
    s = raw
    if s[:1] in ("@", "=", "<", ">", "!"):
        import sys
        if s[0] in (">", "!") and sys.byteorder == "little" or s[0] == "<" and sys.byteorder == "big":
            raise BufferError(f"buffer format {raw!r} is not in native byte order, which DLPack cannot describe")
        s = s[1:]
    dt.bits = <uint8_t>(itemsize * 8) if itemsize <= 16 else 0
    if s == "?":
        dt.code = kDLBool
    elif len(s) == 1 and s in "bhilqn":
        dt.code = kDLInt
    elif len(s) == 1 and s in "BHILQNc":
        dt.code = kDLUInt
    elif len(s) == 1 and s in "efd":
        dt.code = kDLFloat
    elif s in ("Zf", "Zd"):
        dt.code = kDLComplex
    else:
        raise BufferError(f"buffer format {raw!r} has no DLPack data type")
    _check_dtype(dt)
    return dt


def _from_buffer(obj, bint writable_required=False):
    """A zero-copy Array over obj's buffer (CPU); the result keeps the buffer."""
    cdef _BufferOwner owner = _BufferOwner.__new__(_BufferOwner)
    PyObject_GetBuffer(obj, &owner.view, PyBUF_RECORDS_RO | (PyBUF_WRITABLE if writable_required else 0))
    owner.acquired = True
    cdef Py_ssize_t itemsize = owner.view.itemsize
    cdef DLDataType dt = _dtype_of_format(owner.view.format, itemsize)
    cdef int32_t nd = owner.view.ndim
    if nd > MAX_NDIM:
        raise BufferError(f"buffer has ndim={nd}; dlpack-ref accepts up to {MAX_NDIM}")
    cdef Array a = _new_array(nd)
    cdef int i
    for i in range(nd):
        a._shape[i] = owner.view.shape[i]
        if owner.view.strides == NULL:
            pass
        elif owner.view.strides[i] % itemsize:
            raise BufferError(
                f"buffer strides {tuple(owner.view.strides[j] for j in range(nd))} are not multiples of "
                f"the item size {itemsize}; DLPack strides count elements")
        else:
            a._strides[i] = owner.view.strides[i] // itemsize
    if owner.view.strides == NULL:
        _set_c_strides(a)
    a._data = <char*>owner.view.buf
    a._dtype = dt
    a._device.device_type = kDLCPU
    a._device.device_id = 0
    a._flags = FLAG_READ_ONLY if owner.view.readonly else 0
    a._base = owner
    return a


def _write_host_bytes(Array a, const unsigned char[::1] data not None):
    """Fill a freshly allocated C-contiguous host Array from raw bytes."""
    cdef size_t n = <size_t>((_size_of(a) * _storage_bits(a._dtype, a._flags) + 7) // 8)
    if <size_t>data.shape[0] != n:
        raise ValueError(f"expected {n} bytes, got {data.shape[0]}")
    if not _host_accessible(a._device.device_type) or not _is_c_contiguous(a):
        raise BufferError("raw writes need a C-contiguous host Array")
    if n:
        memcpy(a._data, &data[0], n)


def empty(shape, *, dtype=None, device=None):
    """An uninitialized C-contiguous Array (host memory 256-byte aligned).
    ``dtype`` defaults to float64, ``device`` to the CPU."""
    cdef DLDevice dev
    cdef DLDataType dt
    if device is None:
        dev.device_type = kDLCPU
        dev.device_id = 0
    else:
        dev = _parse_device(device)
    code, bits, lanes = (_as_dtype(dtype) if dtype is not None else _as_dtype("float64")).__dlpack_data_type__()
    dt.code = code
    dt.bits = bits
    dt.lanes = lanes
    return _empty(_shape_tuple(shape), dt, dev)


cdef tuple _shape_tuple(object shape):
    if isinstance(shape, int) and not isinstance(shape, bool):
        return (shape,)
    try:
        t = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, not {type(shape).__name__}") from None
    for s in t:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"shape entries must be ints, got {s!r} in {shape!r}")
    return t


def inspect(obj):
    """Describe a DLPack capsule (or ``obj.__dlpack__()``'s) without consuming
    it: name, version, flags, device, dtype, shape, strides, byte_offset and
    the data address. A capsule passed in stays usable; one made here from an
    object is released afterwards."""
    cap = obj
    if not PyCapsule_CheckExact(obj):
        if not hasattr(obj, "__dlpack__"):
            raise _not_dlpack(obj)
        try:
            cap = _call_dlpack_versioned(obj)
        except TypeError:
            cap = obj.__dlpack__()
    cdef const char* name = PyCapsule_GetName(cap)
    info = {"name": None if name == NULL else (<bytes>name).decode("utf-8", "replace")}
    cdef DLTensor* t = NULL
    cdef DLManagedTensorVersioned* mv
    cdef const char* key = name
    if name == NULL or strcmp(name, NAME_USED_VERSIONED) == 0 or strcmp(name, NAME_USED_LEGACY) == 0:
        info["consumed"] = name != NULL
        return info
    info["consumed"] = False
    if strcmp(name, NAME_VERSIONED) == 0:
        mv = <DLManagedTensorVersioned*>PyCapsule_GetPointer(cap, key)
        info["version"] = (mv.version.major, mv.version.minor)
        info["flags"] = mv.flags
        info["read_only"] = bool(mv.flags & FLAG_READ_ONLY)
        info["is_copied"] = bool(mv.flags & FLAG_IS_COPIED)
        info["subbyte_padded"] = bool(mv.flags & FLAG_SUBBYTE_PADDED)
        info["has_deleter"] = mv.deleter != NULL
        if mv.version.major != DLPACK_MAJOR_VERSION:
            return info
        t = &mv.dl_tensor
    elif strcmp(name, NAME_LEGACY) == 0:
        t = &(<DLManagedTensor*>PyCapsule_GetPointer(cap, key)).dl_tensor
        info["version"] = None
        info["flags"] = None
        info["has_deleter"] = (<DLManagedTensor*>PyCapsule_GetPointer(cap, key)).deleter != NULL
    else:
        return info
    info["device"] = (<int>t.device.device_type, t.device.device_id)
    info["dtype"] = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    info["ndim"] = t.ndim
    if 0 <= t.ndim <= MAX_NDIM:
        info["shape"] = None if t.shape == NULL else tuple([t.shape[i] for i in range(t.ndim)])
        info["strides"] = None if t.strides == NULL else tuple([t.strides[i] for i in range(t.ndim)])
    info["byte_offset"] = t.byte_offset
    info["data"] = <uintptr_t>t.data
    return info


def _fill_zero(Array a):
    """Set every byte of a freshly allocated C-contiguous Array to zero."""
    cdef size_t n = <size_t>((_size_of(a) * _storage_bits(a._dtype, a._flags) + 7) // 8)
    if a._device.device_type == kDLCPU:
        memset(a._data, 0, n)
    else:
        _cuda().memset(a, 0, n)
