/* --- the exchange-table builder: __dlpack_c_exchange_api__ of an adopter's type ---
 * A DLPack 1.3 `DLPackExchangeAPI` for the adopter's own type, built from the
 * same description its `__dlpack__` uses, so the table and `__dlpack__` cannot
 * disagree. Table functions get no context argument, so each adopter type has
 * one static spec and one static table, which DLPACK_REF_EXCHANGE_TABLE
 * defines:
 *
 *     static dlpack_ref_exchange_spec tensor_spec = {
 *         &TensorType,      // objects of this type (and subclasses)
 *         describe,         // int describe(PyObject* obj, dlpack_ref_producer* out)
 *         wrap,             // PyObject* wrap(DLPackRefTensor* taken)
 *         NULL,             // allocator: NULL = host memory of the builder's
 *         NULL};            // current_work_stream: NULL = "no stream" (NULL)
 *     DLPACK_REF_EXCHANGE_TABLE(tensor_api, tensor_spec);
 *     ... in the module's init, after PyType_Ready:
 *     dlpack_ref_publish_exchange_api(&TensorType, &tensor_api);
 *
 * The table (header 1.3, prev_api NULL) reports errors as dlpack-ref's own
 * table does (docs/exchange_api.md): the four Python-object functions set a
 * Python exception and return -1 (they are called with the GIL held, or an
 * attached thread state); the allocator touches no Python and reports
 * through SetError(ctx, kind, message), kind the Python exception name. The
 * spec and table are written before they are published and only read
 * after, so any number of threads may use the table at once (free threading
 * included). */

/* What an adopter type tells the builder. */
typedef struct dlpack_ref_exchange_spec {
    /* The adopter's type: the table exports and views its instances (and its
       subclasses'), a TypeError for anything else. A heap type's pointer is
       stored here in the module's init, before publishing. */
    PyTypeObject* type;
    /* Fill *out for `obj` exactly as the type's __dlpack__ does before
       calling dlpack_ref_producer_dlpack(_fast): one description for both.
       Its shape and strides pointers must stay valid while `obj` lives (the
       view borrows them). 0, or -1 with an exception set. */
    int (*describe)(PyObject* obj, dlpack_ref_producer* out);
    /* A new reference to an object of the type owning the taken, checked
       tensor *taken, zero-copy (its from_dlpack uses the same function). It
       consumes *taken in every case: on failure it has released it
       (dlpack_ref_release) and returns NULL with an exception set, e.g. a
       BufferError for a device it cannot hold. */
    PyObject* (*wrap)(DLPackRefTensor* taken);
    /* Optional: the table's managed_tensor_allocator (dlpack.h's contract:
       no Python, errors through SetError). NULL: dlpack_ref_exchange_allocate,
       C-contiguous host memory for kDLCPU prototypes. */
    DLPackManagedTensorAllocator allocator;
    /* Optional: the table's current_work_stream. NULL: the answer is NULL for
       every device (a producer with no streams). */
    DLPackCurrentWorkStream current_work_stream;
} dlpack_ref_exchange_spec;

/* The TypeError of an object the table was not made for (returns -1). */
static inline int dlpack_ref_priv_exchange_refuse(const dlpack_ref_exchange_spec* spec, PyObject* obj,
                                                  const char* what) {
    PyObject* tn = dlpack_ref_priv_type_name(obj);
#ifdef Py_LIMITED_API
    /* No tp_name in the limited API: the table's type is named by its __name__. */
    PyObject* own = tn == NULL ? NULL : PyObject_GetAttrString((PyObject*)spec->type, "__name__");
    if (own != NULL)
        PyErr_Format(PyExc_TypeError, "the DLPack exchange API of %U %s %U objects, not %U", own, what, own, tn);
    Py_XDECREF(own);
    Py_XDECREF(tn);
#else
    if (tn != NULL) {
        PyErr_Format(PyExc_TypeError, "the DLPack exchange API of %s %s %s objects, not %U", spec->type->tp_name,
                     what, spec->type->tp_name, tn);
        Py_DECREF(tn);
    }
#endif
    return -1;
}

/* managed_tensor_from_py_object_no_sync: `obj` exported exactly as its
 * __dlpack__(max_version=(1, 3)) exports it (one allocation, READ_ONLY for a
 * read-only array, the owner kept alive until the deleter), without
 * ordering any stream ("NoSync": current_work_stream reports it). */
static inline int dlpack_ref_exchange_from_py(const dlpack_ref_exchange_spec* spec, PyObject* obj,
                                              DLManagedTensorVersioned** out) {
    dlpack_ref_producer p;
    uint64_t flags;
    *out = NULL;
    if (!PyObject_TypeCheck(obj, spec->type)) return dlpack_ref_priv_exchange_refuse(spec, obj, "exports");
    if (spec->describe(obj, &p) < 0) return -1;
    if (dlpack_ref_priv_check_export(&p.tensor) < 0) return -1;
    flags = dlpack_ref_priv_export_flags(&p);
    *out = dlpack_ref_api_versioned_block(&p.tensor, p.owner, flags);
    return *out == NULL ? -1 : 0;
}

/* managed_tensor_to_py_object_no_sync: takes `tensor` (stolen, also on
 * failure), checks it like any import (BufferError naming the field, its
 * deleter run once) and hands it to spec->wrap. */
static inline int dlpack_ref_exchange_to_py(const dlpack_ref_exchange_spec* spec, DLManagedTensorVersioned* tensor,
                                            void** out_py_object) {
    DLPackRefTensor taken;
    PyObject* obj;
    *out_py_object = NULL;
    if (tensor == NULL) {
        PyErr_SetString(PyExc_ValueError, "managed_tensor_to_py_object_no_sync was given a NULL tensor");
        return -1;
    }
    if (dlpack_ref_adopt(tensor, 1, &taken) < 0) return -1;
    obj = spec->wrap(&taken);
    if (obj == NULL) return -1;
    *out_py_object = (void*)obj;
    return 0;
}

/* dltensor_from_py_object_no_sync: the description's DLTensor, borrowing
 * the object's own shape and strides (no allocation). */
static inline int dlpack_ref_exchange_view(const dlpack_ref_exchange_spec* spec, PyObject* obj, DLTensor* out) {
    dlpack_ref_producer p;
    if (!PyObject_TypeCheck(obj, spec->type)) return dlpack_ref_priv_exchange_refuse(spec, obj, "views");
    if (spec->describe(obj, &p) < 0) return -1;
    *out = p.tensor;
    return 0;
}

/* The deleter of dlpack_ref_exchange_allocate's blocks: plain free(), so it
 * is safe on any thread, without the GIL, after finalization. */
static inline void dlpack_ref_priv_free_block(DLManagedTensorVersioned* self) { free(self); }

/* Report an allocator failure through SetError (which may be NULL). */
static inline int dlpack_ref_priv_alloc_error(void* ctx, void (*set_error)(void*, const char*, const char*),
                                              const char* kind, const char* message) {
    if (set_error != NULL) set_error(ctx, kind, message);
    return -1;
}

/* The default managed_tensor_allocator: one malloc block holding the managed
 * tensor, its shape and row-major strides and the data (256-byte aligned),
 * for a kDLCPU prototype of a DLPack 1.3 dtype; sub-byte dtypes are stored
 * one element per byte (IS_SUBBYTE_TYPE_PADDED), as dlpack-ref's allocator
 * stores them. No Python is touched; failures go to SetError with the kind
 * dlpack-ref's allocator gives (ValueError for the prototype's shape,
 * BufferError for its dtype or device, MemoryError). */
static inline int dlpack_ref_exchange_allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* ctx,
                                               void (*set_error)(void*, const char*, const char*)) {
    enum { ALIGN = 256 };
    DLManagedTensorVersioned* m;
    int64_t count, bits, nbytes, s = 1;
    size_t head;
    int32_t i;
    uint64_t flags;
    char message[160];
    *out = NULL;
    if (prototype == NULL || prototype->ndim < 0 || prototype->ndim > DLPACK_REF_MAX_NDIM
            || (prototype->ndim > 0 && prototype->shape == NULL))
        return dlpack_ref_priv_alloc_error(ctx, set_error, "ValueError",
                                           "the allocator's prototype must be a DLTensor with 0 to 64 dimensions "
                                           "and a shape");
    if (dlpack_ref_dtype_format(prototype->dtype.code, prototype->dtype.bits, prototype->dtype.lanes) == NULL) {
        snprintf(message, sizeof message, "unsupported DLDataType(code=%d, bits=%d, lanes=%d): not a DLPack 1.3 data type",
                 (int)prototype->dtype.code, (int)prototype->dtype.bits, (int)prototype->dtype.lanes);
        return dlpack_ref_priv_alloc_error(ctx, set_error, "BufferError", message);
    }
    if (prototype->device.device_type != kDLCPU) {
        snprintf(message, sizeof message, "cannot allocate memory on device (%d, %d): this allocator makes CPU memory only",
                 (int)prototype->device.device_type, (int)prototype->device.device_id);
        return dlpack_ref_priv_alloc_error(ctx, set_error, "BufferError", message);
    }
    count = dlpack_ref_element_count(prototype->shape, prototype->ndim);
    if (count == -1) {
        for (i = 0; prototype->shape[i] >= 0; ++i) {}
        snprintf(message, sizeof message, "negative dimension %lld in the allocator's prototype",
                 (long long)prototype->shape[i]);
        return dlpack_ref_priv_alloc_error(ctx, set_error, "ValueError", message);
    }
    flags = (int64_t)prototype->dtype.bits * prototype->dtype.lanes < 8 ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0;
    bits = dlpack_ref_storage_bits(prototype->dtype, flags);
    head = (sizeof(DLManagedTensorVersioned) + 2 * (size_t)prototype->ndim * sizeof(int64_t) + ALIGN - 1)
           / ALIGN * ALIGN;
    if (count == -2 || count > (INT64_MAX - 7) / bits
            || (nbytes = dlpack_ref_nbytes(count, bits)) > (int64_t)(SIZE_MAX / 2) - (int64_t)head - ALIGN)
        return dlpack_ref_priv_alloc_error(ctx, set_error, "ValueError",
                                           "the allocator's prototype has more bytes than fit in memory");
    m = (DLManagedTensorVersioned*)malloc(head + (size_t)nbytes + ALIGN);
    if (m == NULL) return dlpack_ref_priv_alloc_error(ctx, set_error, "MemoryError", "out of memory");
    memset(m, 0, sizeof *m);
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->flags = flags;
    m->deleter = dlpack_ref_priv_free_block;
    m->dl_tensor.device = prototype->device;
    m->dl_tensor.ndim = prototype->ndim;
    m->dl_tensor.dtype = prototype->dtype;
    m->dl_tensor.shape = (int64_t*)(m + 1);
    m->dl_tensor.strides = m->dl_tensor.shape + prototype->ndim;
    /* malloc aligns to 16 at least; the data starts at the next 256-byte
       boundary past the head. */
    m->dl_tensor.data = (void*)((((uintptr_t)m + head) + ALIGN - 1) / ALIGN * ALIGN);
    for (i = prototype->ndim - 1; i >= 0; --i) {
        m->dl_tensor.shape[i] = prototype->shape[i];
        m->dl_tensor.strides[i] = s;
        s *= prototype->shape[i] > 0 ? prototype->shape[i] : 1;
    }
    *out = m;
    return 0;
}

/* The default current_work_stream: NULL for every device. */
static inline int dlpack_ref_exchange_no_stream(DLDeviceType device_type, int32_t device_id, void** out) {
    (void)device_type;
    (void)device_id;
    *out = NULL;
    return 0;
}

static inline int dlpack_ref_exchange_allocator_of(const dlpack_ref_exchange_spec* spec, DLTensor* prototype,
                                                   DLManagedTensorVersioned** out, void* ctx,
                                                   void (*set_error)(void*, const char*, const char*)) {
    return (spec->allocator != NULL ? spec->allocator : dlpack_ref_exchange_allocate)(prototype, out, ctx, set_error);
}

static inline int dlpack_ref_exchange_stream_of(const dlpack_ref_exchange_spec* spec, DLDeviceType device_type,
                                                int32_t device_id, void** out) {
    return (spec->current_work_stream != NULL ? spec->current_work_stream : dlpack_ref_exchange_no_stream)(
        device_type, device_id, out);
}

/* Fill `table` as a DLPack 1.3 table (header 1.3, prev_api NULL) of the
 * five functions given: for a table whose functions are written out by hand
 * (a Cython adopter, which has no DLPACK_REF_EXCHANGE_TABLE, or a producer
 * with functions of its own). Call it before the table is published. */
static inline void dlpack_ref_exchange_table_init(DLPackExchangeAPI* table, DLPackManagedTensorAllocator allocator,
                                                  DLPackManagedTensorFromPyObjectNoSync from_py,
                                                  DLPackManagedTensorToPyObjectNoSync to_py,
                                                  DLPackDLTensorFromPyObjectNoSync view,
                                                  DLPackCurrentWorkStream current_work_stream) {
    table->header.version.major = DLPACK_MAJOR_VERSION;
    table->header.version.minor = DLPACK_MINOR_VERSION;
    table->header.prev_api = NULL;
    table->managed_tensor_allocator = allocator;
    table->managed_tensor_from_py_object_no_sync = from_py;
    table->managed_tensor_to_py_object_no_sync = to_py;
    table->dltensor_from_py_object_no_sync = view;
    table->current_work_stream = current_work_stream;
}

/* Defines `static DLPackExchangeAPI name`, the table of `spec` (a static
 * dlpack_ref_exchange_spec of the same translation unit), and its five
 * functions, which forward to the dlpack_ref_exchange_* calls above. C99
 * and C++17 (positional initializer, no designated one). */
#define DLPACK_REF_EXCHANGE_TABLE(name, spec)                                                                \
    static int name##_priv_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* ctx,         \
                                     void (*set_error)(void*, const char*, const char*)) {                   \
        return dlpack_ref_exchange_allocator_of(&(spec), prototype, out, ctx, set_error);                    \
    }                                                                                                        \
    static int name##_priv_from_py(void* obj, DLManagedTensorVersioned** out) {                              \
        return dlpack_ref_exchange_from_py(&(spec), (PyObject*)obj, out);                                    \
    }                                                                                                        \
    static int name##_priv_to_py(DLManagedTensorVersioned* tensor, void** out) {                             \
        return dlpack_ref_exchange_to_py(&(spec), tensor, out);                                              \
    }                                                                                                        \
    static int name##_priv_view(void* obj, DLTensor* out) {                                                  \
        return dlpack_ref_exchange_view(&(spec), (PyObject*)obj, out);                                       \
    }                                                                                                        \
    static int name##_priv_stream(DLDeviceType device_type, int32_t device_id, void** out) {                 \
        return dlpack_ref_exchange_stream_of(&(spec), device_type, device_id, out);                          \
    }                                                                                                        \
    static DLPackExchangeAPI name = {{{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},                    \
                                     name##_priv_allocator, name##_priv_from_py, name##_priv_to_py,          \
                                     name##_priv_view, name##_priv_stream}

/* Publish `table` as `type.__dlpack_c_exchange_api__`: a capsule named
 * DLPACK_REF_CAPSULE_EXCHANGE_API, set in the type's own dict (static and
 * immutable types included), then PyType_Modified. Call it once, in the
 * module's init, after PyType_Ready. 0, or -1 with an exception set. */
static inline int dlpack_ref_publish_exchange_api(PyTypeObject* type, DLPackExchangeAPI* table) {
    PyObject* capsule = PyCapsule_New((void*)table, DLPACK_REF_CAPSULE_EXCHANGE_API, NULL);
    int r;
    if (capsule == NULL) return -1;
#ifdef Py_LIMITED_API
    /* No tp_dict in the limited API: set as an attribute, which a heap type
     * made without Py_TPFLAGS_IMMUTABLETYPE allows (PyType_FromSpec). */
    r = PyObject_SetAttrString((PyObject*)type, "__dlpack_c_exchange_api__", capsule);
#else
    r = PyDict_SetItemString(type->tp_dict, "__dlpack_c_exchange_api__", capsule);
#endif
    Py_DECREF(capsule);
    if (r < 0) return -1;
    PyType_Modified(type);
    return 0;
}
