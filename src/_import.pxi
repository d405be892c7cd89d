# Import: capsules in (checked by dlpack_ref_api.pxd's dlpack_check_managed,
# the very checks vendoring libraries get, then this core's device policy),
# from_dlpack with its device and copy requests, inspect, and buffer import.
# Ownership is taken first (the capsule renamed, the managed tensor stored in
# a fresh Array), so every later failure ends in Array.__dealloc__ calling
# the deleter exactly once.

cdef tuple _MAX_VERSION = (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
cdef tuple _KW_MAX_VERSION = ("max_version",)
cdef object _DLPACK_NAME = "__dlpack__"

# The memoized method call is the header's (dlpack_ref_call_method in
# dlpack_ref.h); inspect's own call of __dlpack__ keeps this memo.
cdef dlpack_ref_method_memo _dlpack_memo

# Non-zero while any thread has a consumer stream set (dlpack_ref.cuda.stream);
# with none set, the consumer's stream is the legacy default, which is exactly
# what stream=None asks a producer for, so the device query can be skipped.
# An atomic count, not a lock: written rarely, read on every import, exact
# without the GIL, and nothing a fork could leave held. A forked child keeps
# the count of threads that do not exist there: too high only sends its
# imports down the path that asks for the current stream, which is right.
cdef extern from *:
    """
    static int dlref_stream_contexts = 0;
    static inline int dlref_stream_contexts_active(void) {
        return __atomic_load_n(&dlref_stream_contexts, __ATOMIC_RELAXED);
    }
    static inline void dlref_stream_contexts_add(int delta) {
        __atomic_add_fetch(&dlref_stream_contexts, delta, __ATOMIC_RELAXED);
    }
    """
    int _stream_contexts "dlref_stream_contexts_active"() nogil
    void _stream_contexts_add "dlref_stream_contexts_add"(int delta) nogil


def _stream_context_entered(int delta):
    """dlpack_ref.cuda.stream tells the core +1 and -1 as its contexts are
    entered and left (the import's fast path while none is open)."""
    _stream_contexts_add(delta)


cdef Array _array_from_capsule(object capsule):
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"__dlpack__ returned {type(capsule).__name__}, not a DLPack capsule")
    cdef bint versioned = False
    # Made before the capsule is claimed: nothing is owned yet if this
    # fails, so no try block (paid on every import) guards it.
    cdef Array a = Array.__new__(Array)
    a._managed = dlpack_ref_claim(capsule, &versioned)
    a._managed_versioned = versioned
    return _describe_managed(a)


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


cdef Array _array_from_managed(void* managed, bint versioned):
    """An Array owning and describing a managed tensor (DLManagedTensorVersioned*
    when `versioned`, else DLManagedTensor*), after every check."""
    return _describe_managed(_owner_of(managed, versioned))


cdef inline Array _own_taken(Array a, DLPackRefTensor* taken):
    """`a`, made before the header took (and checked) the tensor, so that no
    try block (paid on every import) guards its making, owning and
    describing it."""
    a._managed = taken.managed
    a._managed_versioned = taken.versioned
    return _describe_checked(a)


cdef Array _describe_managed(Array a):
    """a, owning its managed tensor, described by it after every check."""
    dlpack_check_managed(a._managed, a._managed_versioned)
    return _describe_checked(a)


cdef Array _describe_checked(Array a):
    """a, owning its checked managed tensor, described by it (if this core
    holds memory of its device)."""
    cdef void* managed = a._managed
    cdef bint versioned = a._managed_versioned
    cdef DLTensor* t
    cdef uint64_t flags = 0
    if versioned:
        t = &(<DLManagedTensorVersioned*>managed).dl_tensor
        flags = (<DLManagedTensorVersioned*>managed).flags
    else:
        t = &(<DLManagedTensor*>managed).dl_tensor
    if not dlpack_ref_device_supported(t.device.device_type):
        raise BufferError(
            f"DLTensor.device=({<int>t.device.device_type}, {t.device.device_id}) ({_device_object(t.device)}) "
            f"is not supported: dlpack-ref holds memory of {DLPACK_REF_DEVICES_SUPPORTED.decode()}")
    cdef int32_t nd = t.ndim
    cdef int i
    _set_ndim(a, nd)
    if nd <= SMALL_NDIM:
        # A few words: copied in place (a memcpy call costs more).
        for i in range(nd):
            a._shape[i] = t.shape[i]
        if t.strides == NULL:
            _set_c_strides(a)
        else:
            for i in range(nd):
                a._strides[i] = t.strides[i]
    else:
        memcpy(a._shape, t.shape, nd * sizeof(int64_t))
        if t.strides == NULL:
            _set_c_strides(a)
        else:
            memcpy(a._strides, t.strides, nd * sizeof(int64_t))
    a._flags = flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)
    a._data = <char*>t.data + t.byte_offset
    a._dtype = t.dtype
    a._device = t.device
    return a


# --- from_dlpack -----------------------------------------------------------

cdef Array _as_array(object obj):
    """A zero-copy Array of a DLPack or buffer-protocol object."""
    if isinstance(obj, Array):
        return obj
    if hasattr(obj, "__dlpack__"):
        return _import_plain(obj)
    return _from_buffer(obj)


cdef object _call_dlpack_versioned(object x):
    """x.__dlpack__(max_version=(1, 3)) through vectorcall (no kwargs dict)."""
    cdef PyObject* args[2]
    args[0] = <PyObject*>x
    args[1] = <PyObject*>_MAX_VERSION
    return dlpack_ref_call_method(&_dlpack_memo, _DLPACK_NAME, args, 1, <PyObject*>_KW_MAX_VERSION)


cdef Array _import_plain(object x):
    """Zero-copy import with no device, copy or stream request. The protocol
    (the exchange table, else __dlpack__ and its retries and device check)
    is the header's; this core's own Array and bare capsules skip it."""
    if PyCapsule_CheckExact(x):
        return _array_from_capsule(x)
    if type(x) is Array:
        return _alias(<Array>x)
    cdef void* api = _exchange_api_of(type(x))
    cdef DLPackRefTensor taken
    cdef Array a = Array.__new__(Array)
    cdef int by_table = dlpack_ref_consumer_plain(x, <const DLPackExchangeAPI*>api, &taken)
    _own_taken(a, &taken)
    if by_table and dlpack_ref_device_cuda_family(a._device.device_type):
        _order_after_table_export(<DLPackExchangeAPI*>api, x, a)
    return a


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
    copies only when needed. ``copy=True`` of CPU memory wanted on the CPU is
    copied here, on the worker pool, from the producer's tensor in place (of
    an exact ``numpy.ndarray``, read from the array itself with no export);
    otherwise the producer moves or copies data itself when it can, and an
    older producer's data is moved here.
    """
    if device is None and copy is None and _stream_contexts() == 0:
        return _import_plain(x)
    return _from_dlpack(x, device, copy)


cdef Array _from_dlpack(object x, object device, object copy):
    """from_dlpack(x, device=device, copy=copy), for the core's own callers.
    The negotiation is the header's (dlpack_ref_consumer_source, _call and
    _copy_needed, the pieces of dlpack_ref_consumer_take); what stays here
    is this core's: its device names, its own Array, the CUDA stream it
    passes and records, and the copy (copy=True of CPU memory is made here,
    on the worker pool, from the producer's tensor in place)."""
    if device is None and copy is None and _stream_contexts() == 0:
        return _import_plain(x)
    dlpack_ref_check_copy_arg(copy)
    cdef DLDevice target
    cdef DLDevice source
    cdef bint have_target = device is not None
    cdef Array a
    cdef DLPackRefTensor taken
    cdef int producer_did_it = 0
    if have_target:
        target = _parse_device(device)
        if copy is None and type(x) is Array and _stream_contexts() == 0 and target.device_type == kDLCPU \
                and (<Array>x)._device.device_type == kDLCPU:
            # One of ours, on the host, asked for on the host: nothing to move.
            return _alias(<Array>x)
    if copy is True and type(x) is Array and (<Array>x)._device.device_type == kDLCPU \
            and (<Array>x)._work is None and (not have_target or target.device_type == kDLCPU):
        # One of ours in host memory with no copy pending into it, copied
        # on the host: its own copy (Array.copy), with no export to itself.
        return _copy_to(<Array>x, (<Array>x)._device, &_STREAM_NONE)
    if copy is True and type(x) is _ndarray_type() and (
            not have_target or (target.device_type == kDLCPU and target.device_id == 0)):
        # An exact NumPy array (host memory, its __dlpack__ not overridable)
        # copied on the host: read from its head, with no export to ask for.
        a = _ndarray_dlpack_copy(x)
        if a is not None:
            return a
    if PyCapsule_CheckExact(x):
        a = _array_from_capsule(x)
        return _finish_import(a, x, target if have_target else a._device, copy, False, &_STREAM_NONE)
    cdef void* api = _exchange_api_of(type(x))
    a = Array.__new__(Array)
    cdef int taken_plain = dlpack_ref_consumer_source_or_plain(x, <const DLPackExchangeAPI*>api, &source, &taken)
    if taken_plain:
        _own_taken(a, &taken)
    if not have_target:
        target = source
    cdef dlpack_ref_stream stream = _STREAM_NONE
    stream_arg = None
    if dlpack_ref_device_cuda_family(source.device_type) and (_stream_contexts() or dlpack_ref_device_cuda_family(target.device_type)):
        current = _cuda().consumer_stream_for(_device_object(source), _device_object(target))
        if current is not None:
            # The fields of dlpack_ref.cuda.stream's parse, as it left them.
            stream.given = 1
            stream.sync, stream.handle = current
            stream_arg = _stream_argument(&stream)
    if taken_plain:
        # Its __dlpack_device__ named no device: the plain request's tensor
        # (its table's, else __dlpack__'s), moved or copied here.
        if taken_plain == 2 and dlpack_ref_device_cuda_family(a._device.device_type):
            _order_after_table_export(<DLPackExchangeAPI*>api, x, a)
        return _finish_import(a, x, target, copy, False, &stream)
    if copy is True and source.device_type == kDLCPU and target.device_type == kDLCPU:
        # Memory the CPU reads, wanted on the CPU: the producer's tensor in
        # place, copied here on the worker pool into a fresh allocation. The
        # producer's own copy is asked for only when it refuses the in-place
        # export (BufferError).
        if dlpack_ref_consumer_call_in_place(x, None, source, &taken):
            _own_taken(a, &taken)
            return _finish_import(a, x, target, copy, False, &_STREAM_NONE)
    dlpack_ref_consumer_call(x, stream_arg, &target if have_target else NULL, copy, source, &taken, &producer_did_it)
    _own_taken(a, &taken)
    if stream.given and stream.sync and dlpack_ref_device_cuda_family(a._device.device_type) and \
            (stream.handle > 2 or a._device.device_id == source.device_id):
        # The producer ordered the data on our stream: its last write.
        _cuda().imported(_work_of(a), a._device.device_type, a._device.device_id, stream.handle)
    return _finish_import(a, x, target, copy, producer_did_it, &stream)


cdef inline object _stream_argument(const dlpack_ref_stream* s):
    """The `stream` a consumer call passes for a stream that was given: the
    protocol's value its fields were parsed from (-1 for no sync, else the
    handle; a __cuda_stream__ object is passed as its handle)."""
    return s.handle if s.sync else -1


cdef Array _finish_import(Array a, object x, DLDevice target, object copy, bint producer_did_it,
                          const dlpack_ref_stream* stream):
    """The copy the header's rule asks for (a refusal drops `a`, which runs
    the deleter)."""
    cdef uint64_t flags = (<DLManagedTensorVersioned*>a._managed).flags if a._managed_versioned else 0
    if dlpack_ref_consumer_copy_needed(x, a._device, flags, target, copy, producer_did_it):
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


cdef extern from "Python.h":
    # Declared here without Cython's "always raises on -1": an exporter can
    # return -1 without setting an exception, which is reported below.
    int _get_buffer "PyObject_GetBuffer"(object obj, Py_buffer* view, int flags) except? -1
    int PyObject_CheckBuffer(object obj)


cdef inline bint _has_buffer(object obj) noexcept:
    """Whether obj's type exports the buffer protocol (nothing is asked of it)."""
    return PyObject_CheckBuffer(obj) == 1


cdef Array _from_buffer(object obj):
    """A zero-copy Array over obj's buffer (CPU); the result keeps the buffer.

    The exporter's Py_buffer is checked like a capsule's DLTensor before
    any of it is used (docs/guarantees.md: buffer import); a refused buffer
    is released exactly once."""
    cdef _BufferOwner owner = _BufferOwner.__new__(_BufferOwner)
    _acquire_buffer(obj, &owner.view)
    owner.acquired = True
    cdef Array a = _described_buffer(&owner.view, obj)
    a._base = owner
    return a


cdef Array _buffer_copy(object obj):
    """A C-contiguous host copy of obj's buffer, which is held only while
    it is read (no owner object is made): asarray(buffer, copy=True)."""
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Py_buffer view
    _acquire_buffer(obj, &view)
    try:
        return _copy_to(_described_buffer(&view, obj), cpu, &_STREAM_NONE)
    finally:
        PyBuffer_Release(&view)


cdef int _acquire_buffer(object obj, Py_buffer* view) except -1:
    if _get_buffer(obj, view, PyBUF_RECORDS_RO) != 0:
        raise BufferError(f"the buffer exporter of {type(obj).__name__} failed with no exception set")
    return 0


cdef Array _described_buffer(Py_buffer* view, object obj):
    """An Array describing an acquired buffer (no owner: the caller keeps
    the buffer for as long as the Array is used), after every check."""
    cdef int32_t nd = view.ndim
    cdef int i
    if nd < 0 or nd > DLPACK_REF_MAX_NDIM:
        raise BufferError(f"buffer has ndim={nd}; dlpack-ref accepts 0 to {DLPACK_REF_MAX_NDIM}")
    if nd > 0 and view.shape == NULL:
        raise BufferError(f"buffer has ndim={nd} and a NULL shape")
    if view.suboffsets != NULL:
        for i in range(nd):
            if view.suboffsets[i] >= 0:
                raise BufferError(
                    f"buffer has suboffsets {tuple([view.suboffsets[j] for j in range(nd)])} (an "
                    "array of pointers, PIL-style), which DLPack cannot describe; copy it first")
    cdef Py_ssize_t itemsize = view.itemsize
    cdef DLDataType dt = _dtype_of_format(view.format, itemsize)
    cdef Array a = _new_array(nd)
    for i in range(nd):
        a._shape[i] = view.shape[i]
        if view.strides == NULL:
            pass
        elif view.strides[i] % itemsize:
            raise BufferError(
                f"buffer strides {tuple([view.strides[j] for j in range(nd)])} are not multiples of "
                f"the item size {itemsize}; DLPack strides count elements")
        else:
            a._strides[i] = view.strides[i] // itemsize
    if view.strides == NULL:
        _set_c_strides(a)
    a._data = <char*>view.buf
    a._dtype = dt
    a._device.device_type = kDLCPU
    a._device.device_id = 0
    a._flags = DLPACK_FLAG_BITMASK_READ_ONLY if view.readonly else 0
    # The rules every DLTensor meets (extents, strides, byte span, NULL data
    # only when empty), on the Array's description of the buffer.
    cdef DLTensor described
    _borrow_dltensor(a, &described)
    try:
        dlpack_check_tensor(&described, 0, False)
    except BufferError as exc:
        raise BufferError(f"the buffer of {type(obj).__name__} is refused: {exc}") from None
    return a


def inspect(obj):
    """Describe a DLPack capsule (or ``obj.__dlpack__()``'s) without consuming
    it: name, version, flags, device, dtype, shape, strides, byte_offset and
    the data address, as the tensor holds them, with ``device_name`` (such as
    ``"tpu_pinned:0"``) and ``dtype_name`` (such as ``"bcomplex32"``): what
    DeviceType and the dtype table call them, None for values neither
    knows. A capsule passed in stays usable; one made here from an object
    is released afterwards."""
    cap = obj
    if not PyCapsule_CheckExact(obj):
        if not hasattr(obj, "__dlpack__"):
            raise _not_dlpack(obj)
        try:
            cap = _call_dlpack_versioned(obj)
        except TypeError:
            cap = obj.__dlpack__()
        if not PyCapsule_CheckExact(cap):
            raise TypeError(f"__dlpack__ returned {type(cap).__name__}, not a DLPack capsule")
    cdef const char* name = PyCapsule_GetName(cap)
    info = {"name": None if name == NULL else (<bytes>name).decode("utf-8", "replace")}
    cdef DLTensor* t = NULL
    cdef DLManagedTensorVersioned* mv
    cdef const char* key = name
    if name == NULL or strcmp(name, DLPACK_REF_CAPSULE_USED_VERSIONED) == 0 or strcmp(name, DLPACK_REF_CAPSULE_USED_LEGACY) == 0:
        info["consumed"] = name != NULL
        return info
    info["consumed"] = False
    if strcmp(name, DLPACK_REF_CAPSULE_VERSIONED) == 0:
        mv = <DLManagedTensorVersioned*>PyCapsule_GetPointer(cap, key)
        info["version"] = (mv.version.major, mv.version.minor)
        info["flags"] = mv.flags
        info["read_only"] = bool(mv.flags & DLPACK_FLAG_BITMASK_READ_ONLY)
        info["is_copied"] = bool(mv.flags & DLPACK_FLAG_BITMASK_IS_COPIED)
        info["subbyte_padded"] = bool(mv.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)
        info["has_deleter"] = mv.deleter != NULL
        if mv.version.major != DLPACK_MAJOR_VERSION:
            return info
        t = &mv.dl_tensor
    elif strcmp(name, DLPACK_REF_CAPSULE_LEGACY) == 0:
        t = &(<DLManagedTensor*>PyCapsule_GetPointer(cap, key)).dl_tensor
        info["version"] = None
        info["flags"] = None
        info["has_deleter"] = (<DLManagedTensor*>PyCapsule_GetPointer(cap, key)).deleter != NULL
    else:
        return info
    info["device"] = (<int>t.device.device_type, t.device.device_id)
    info["device_name"] = str(_device_object(t.device)) if t.device.device_id >= 0 and \
        dlpack_ref_device_type_known(<int32_t>t.device.device_type) else None
    info["dtype"] = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    cdef const char* dtype_name = dlpack_ref_dtype_name(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    info["dtype_name"] = None if dtype_name == NULL else (<bytes>dtype_name).decode()
    info["ndim"] = t.ndim
    if 0 <= t.ndim <= DLPACK_REF_MAX_NDIM:
        info["shape"] = None if t.shape == NULL else tuple([t.shape[i] for i in range(t.ndim)])
        info["strides"] = None if t.strides == NULL else tuple([t.strides[i] for i in range(t.ndim)])
    info["byte_offset"] = t.byte_offset
    info["data"] = <uintptr_t>t.data
    return info
