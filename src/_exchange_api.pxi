# The DLPack 1.3 C exchange API: our static table (producer side, published
# as Array.__dlpack_c_exchange_api__) and the per-type lookup of other
# libraries' tables (consumer side).

cdef extern from "Python.h":
    ctypedef struct _TypeObjectWithDict "PyTypeObject":
        PyObject* tp_dict
    void PyType_Modified(object tp)

cdef const char* NAME_EXCHANGE_API = b"dlpack_exchange_api"


cdef DLManagedTensorVersioned* _versioned_block(Array a, uint64_t flags) except NULL:
    """The single allocation of a versioned export, owning one reference to a."""
    cdef size_t nd = <size_t>a._ndim
    cdef DLManagedTensorVersioned* m = <DLManagedTensorVersioned*>PyMem_Malloc(
        sizeof(DLManagedTensorVersioned) + 2 * nd * sizeof(int64_t))
    if m == NULL:
        raise MemoryError()
    m.version.major = DLPACK_MAJOR_VERSION
    m.version.minor = DLPACK_MINOR_VERSION
    m.flags = flags
    _fill_dltensor(&m.dl_tensor, a, <int64_t*>(<char*>m + sizeof(DLManagedTensorVersioned)))
    m.manager_ctx = <void*>a
    m.deleter = _delete_versioned
    Py_INCREF(a)
    return m


cdef int _api_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                        void (*set_error)(void*, const char*, const char*) noexcept nogil) noexcept nogil:
    with gil:
        try:
            if prototype == NULL or prototype.ndim < 0 or prototype.ndim > MAX_NDIM or (
                    prototype.ndim > 0 and prototype.shape == NULL):
                raise ValueError("the allocator's prototype must be a DLTensor with 0 to "
                                 f"{MAX_NDIM} dimensions and a shape")
            shape = tuple([prototype.shape[i] for i in range(prototype.ndim)])
            a = _empty(shape, prototype.dtype, prototype.device)
            out[0] = _versioned_block(a, (<Array>a)._flags & FLAG_SUBBYTE_PADDED)
            return 0
        except BaseException as exc:
            kind = type(exc).__name__.encode("utf-8", "replace")
            message = str(exc).encode("utf-8", "replace")
            if set_error != NULL:
                set_error(error_ctx, kind, message)
            return -1


cdef int _api_from_py_object(void* py_object, DLManagedTensorVersioned** out) except -1:
    obj = <object>py_object
    if not isinstance(obj, Array):
        raise TypeError(f"dlpack-ref's exchange API exports Array objects, not {type(obj).__name__}")
    cdef Array a = <Array>obj
    out[0] = _versioned_block(a, a._flags & (FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED))
    return 0


cdef int _api_to_py_object(DLManagedTensorVersioned* tensor, void** out_py_object) except -1:
    # Takes ownership of `tensor`: on failure its deleter has been called.
    cdef Array a = _array_from_versioned(tensor)
    Py_INCREF(a)
    out_py_object[0] = <void*>a
    return 0


cdef int _api_dltensor_view(void* py_object, DLTensor* out) except -1:
    obj = <object>py_object
    if not isinstance(obj, Array):
        raise TypeError(f"dlpack-ref's exchange API views Array objects, not {type(obj).__name__}")
    cdef Array a = <Array>obj
    # Borrowed: valid while the Array lives; shape/strides are the Array's own.
    out.data = a._data
    out.device = a._device
    out.ndim = a._ndim
    out.dtype = a._dtype
    out.shape = a._shape
    out.strides = a._strides
    out.byte_offset = 0
    return 0


cdef int _api_current_work_stream(DLDeviceType device_type, int32_t device_id,
                                  void** out_current_stream) except -1:
    out_current_stream[0] = NULL
    if _cuda_family(device_type) and _stream_contexts:
        handle = _cuda().current_stream_handle(device_id)
        if handle is not None:
            out_current_stream[0] = <void*><uintptr_t>handle
    return 0


cdef DLPackExchangeAPI _exchange_api
_exchange_api.header.version.major = DLPACK_MAJOR_VERSION
_exchange_api.header.version.minor = DLPACK_MINOR_VERSION
_exchange_api.header.prev_api = NULL
_exchange_api.managed_tensor_allocator = _api_allocator
_exchange_api.managed_tensor_from_py_object_no_sync = _api_from_py_object
_exchange_api.managed_tensor_to_py_object_no_sync = _api_to_py_object
_exchange_api.dltensor_from_py_object_no_sync = _api_dltensor_view
_exchange_api.current_work_stream = _api_current_work_stream

(<dict><object>(<_TypeObjectWithDict*>Array).tp_dict)["__dlpack_c_exchange_api__"] = \
    PyCapsule_New(&_exchange_api, NAME_EXCHANGE_API, NULL)
PyType_Modified(Array)


# --- consumer side ---------------------------------------------------------

# type -> (capsule kept alive, address of a usable table or 0). Entries are
# written once per type; dict reads and writes are atomic, also without the GIL.
cdef dict _exchange_api_by_type = {}


cdef void* _exchange_api_of(object tp) except? NULL:
    entry = _exchange_api_by_type.get(tp)
    if entry is None:
        entry = _lookup_exchange_api(tp)
        _exchange_api_by_type[tp] = entry
    return <void*><uintptr_t>(<tuple>entry)[1]


cdef tuple _lookup_exchange_api(object tp):
    cap = getattr(tp, "__dlpack_c_exchange_api__", None)
    if cap is None or not PyCapsule_IsValid(cap, NAME_EXCHANGE_API):
        return (None, 0)
    cdef DLPackExchangeAPIHeader* header = <DLPackExchangeAPIHeader*>PyCapsule_GetPointer(cap, NAME_EXCHANGE_API)
    # A table of another major version may link back to one we can read.
    while header != NULL and header.version.major != DLPACK_MAJOR_VERSION:
        header = header.prev_api
    if header == NULL:
        return (cap, 0)
    cdef DLPackExchangeAPI* api = <DLPackExchangeAPI*>header
    if api.managed_tensor_from_py_object_no_sync == NULL:
        return (cap, 0)
    return (cap, <uintptr_t>api)


def exchange_api_version(tp):
    """The (major, minor) of the exchange API table dlpack-ref would use for
    objects of type ``tp``, or None when it would call ``__dlpack__``."""
    cdef DLPackExchangeAPI* api = <DLPackExchangeAPI*>_exchange_api_of(tp)
    if api == NULL:
        return None
    return (api.header.version.major, api.header.version.minor)


cdef Array _import_via_exchange_api(DLPackExchangeAPI* api, object x):
    cdef DLManagedTensorVersioned* m = NULL
    cdef void* producer_stream = NULL
    api.managed_tensor_from_py_object_no_sync(<void*>x, &m)
    if m == NULL:
        raise BufferError(f"{type(x).__name__}'s DLPack exchange API returned no tensor and no error")
    cdef Array a = _array_from_versioned(m)
    if _cuda_family(a._device.device_type):
        # "NoSync": ordering is ours to do: wait for the producer's stream.
        if api.current_work_stream != NULL:
            api.current_work_stream(a._device.device_type, a._device.device_id, &producer_stream)
        _cuda().wait_for_producer(a, <uintptr_t>producer_stream)
    return a
