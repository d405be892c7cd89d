# The DLPack 1.3 C exchange API: our static table (producer side, published
# as Array.__dlpack_c_exchange_api__) and the per-type lookup of other
# libraries' tables (consumer side).

cdef extern from "Python.h":
    ctypedef struct _TypeObjectWithDict "PyTypeObject":
        PyObject* tp_dict
    # Declared with its C parameter type: GCC 14 makes passing a PyObject*
    # for a PyTypeObject* an error (-Werror=incompatible-pointer-types).
    void PyType_Modified(_TypeObjectWithDict* tp)


cdef int _api_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                        void (*set_error)(void*, const char*, const char*) noexcept nogil) noexcept nogil:
    with gil:
        try:
            if prototype == NULL or prototype.ndim < 0 or prototype.ndim > DLPACK_REF_MAX_NDIM or (
                    prototype.ndim > 0 and prototype.shape == NULL):
                raise ValueError("the allocator's prototype must be a DLTensor with 0 to "
                                 f"{DLPACK_REF_MAX_NDIM} dimensions and a shape")
            shape = tuple([prototype.shape[i] for i in range(prototype.ndim)])
            a = _empty(shape, prototype.dtype, prototype.device)
            out[0] = _versioned_block(a, (<Array>a)._flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)
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
    if dlpack_ref_device_cuda_family(a._device.device_type) and not _work_of(a).idle:
        # No host sync, but the stream current_work_stream reports carries the data.
        _cuda().export_no_sync(_work_of(a), a._device.device_type, a._device.device_id)
    out[0] = _versioned_block(a, a._flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED))
    return 0


cdef int _api_to_py_object(DLManagedTensorVersioned* tensor, void** out_py_object) except -1:
    # Takes ownership of `tensor`: on failure its deleter has been called.
    cdef Array a = _array_from_managed(tensor, True)
    if dlpack_ref_device_cuda_family(a._device.device_type):
        # The library enqueued its work on the stream current_work_stream reported.
        _cuda().record_current(_work_of(a), a._device.device_type, a._device.device_id)
    Py_INCREF(a)
    out_py_object[0] = <void*>a
    return 0


cdef int _api_dltensor_view(void* py_object, DLTensor* out) except -1:
    obj = <object>py_object
    if not isinstance(obj, Array):
        raise TypeError(f"dlpack-ref's exchange API views Array objects, not {type(obj).__name__}")
    _borrow_dltensor(<Array>obj, out)
    return 0


cdef int _api_current_work_stream(DLDeviceType device_type, int32_t device_id,
                                  void** out_current_stream) except -1:
    out_current_stream[0] = NULL
    if dlpack_ref_device_cuda_family(device_type) and _stream_contexts():
        handle = _cuda().current_stream_handle(device_id)
        if handle is not None:
            out_current_stream[0] = <void*><uintptr_t>handle
    return 0


cdef DLPackExchangeAPI _exchange_api
dlpack_ref_exchange_table_init(&_exchange_api, _api_allocator, _api_from_py_object, _api_to_py_object,
                               _api_dltensor_view, _api_current_work_stream)

(<dict><object>(<_TypeObjectWithDict*>Array).tp_dict)["__dlpack_c_exchange_api__"] = \
    PyCapsule_New(&_exchange_api, DLPACK_REF_CAPSULE_EXCHANGE_API, NULL)
PyType_Modified(<_TypeObjectWithDict*>Array)


# --- consumer side ---------------------------------------------------------

# type -> (the capsule its table was read from, kept alive, and the table's
# address, or (None, 0)). Entries are
# written once per type; dict reads and writes are atomic, also without the GIL.
cdef dict _exchange_api_by_type = {}

cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #define DLREF_GIL_BUILD 0
    #else
    #define DLREF_GIL_BUILD 1
    #endif
    """
    bint DLREF_GIL_BUILD

# The last type asked about and its table (GIL builds, where the pair is
# written under the GIL): a run of imports from one library skips the dict.
# Borrowed: the dict's key keeps the type alive, so the address stays its own.
cdef PyObject* _last_api_type = NULL
cdef void* _last_api = NULL


cdef void* _exchange_api_of(object tp) except? NULL:
    global _last_api_type, _last_api
    if DLREF_GIL_BUILD and <PyObject*>tp == _last_api_type:
        return _last_api
    entry = _exchange_api_by_type.get(tp)
    if entry is None:
        # The first entry written wins (setdefault is atomic without the GIL
        # too): the capsule another thread's table pointer came from is
        # never dropped from under it.
        entry = _exchange_api_by_type.setdefault(tp, _lookup_exchange_api(tp))
    cdef void* api = <void*><uintptr_t>(<tuple>entry)[1]
    if DLREF_GIL_BUILD:
        _last_api_type = <PyObject*>tp
        _last_api = api
    return api


cdef tuple _lookup_exchange_api(object tp):
    """(the capsule the table was read from, its address or 0): the one
    capsule whose table is used, kept for as long as the entry."""
    cdef PyObject* owner = NULL
    cdef const DLPackExchangeAPI* api = dlpack_ref_exchange_api_ref(tp, &owner)
    if owner == NULL:
        return (None, <uintptr_t>api)
    cap = <object>owner
    Py_DECREF(cap)   # the reference dlpack_ref_exchange_api_ref gave; `cap` holds its own
    return (cap, <uintptr_t>api)


def exchange_api_version(tp):
    """The (major, minor) of the exchange API table dlpack-ref would use for
    objects of type ``tp``, or None when it would call ``__dlpack__``."""
    cdef DLPackExchangeAPI* api = <DLPackExchangeAPI*>_exchange_api_of(tp)
    if api == NULL:
        return None
    return (api.header.version.major, api.header.version.minor)


cdef int _order_after_table_export(DLPackExchangeAPI* api, object x, Array a) except -1:
    """The tables are "NoSync": a CUDA tensor taken through one is ordered
    here, after the producer's current stream. A failing current_work_stream
    is a BufferError (docs/exchange_api.md): the tensor is there but its
    ordering is unknown, so it is refused (dropping `a` runs its deleter),
    not read unordered."""
    cdef void* producer_stream = NULL
    cdef int status
    if api.current_work_stream != NULL:
        status = dlpack_ref_api_table_stream(api, a._device.device_type, a._device.device_id, &producer_stream)
        if dlpack_ref_table_failed(status):
            raise dlpack_ref_table_error(type(x), "current_work_stream", status)
    _cuda().wait_for_producer(_work_of(a), a._device.device_type, a._device.device_id,
                              <uintptr_t>producer_stream)
    return 0
