/* --- the consumer of memory as bytes: a Py_buffer over the producer's memory ---
 * For a consumer that hands memory on without reading it by element type (a
 * message library, a byte copy, a device-aware transport): the producer's
 * own memory (copy=False), any device, any data type with a size, exposed
 * as a Py_buffer whose owner (view->obj) runs the deleter when the buffer is
 * released. Memory on a device is taken without being read: whether it can
 * be read is the caller's to decide by the device it is given. */

#define DLPACK_REF_BUFFER_OWNER_NAME "dlpack_ref.buffer_owner"

/* The owner's destructor: the deleter of the tensor it holds, once (its
 * context tells a versioned tensor from a legacy one). */
static inline void dlpack_ref_priv_buffer_owner_destroy(PyObject* owner) {
    DLPackRefTensor t;
    t.managed = PyCapsule_GetPointer(owner, DLPACK_REF_BUFFER_OWNER_NAME);
    t.versioned = PyCapsule_GetContext(owner) != NULL;
    if (t.managed == NULL) { PyErr_Clear(); return; }
    DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
}

/* Whether the tensor is one block of memory in row-major (C) or
 * column-major (Fortran) order, judged by the strides of the extents that
 * are not 1 (NULL strides: row-major). */
static inline int dlpack_ref_is_contiguous(const DLTensor* t) {
    int32_t i;
    int64_t c = 1, f = 1;
    int c_ok = 1;
    if (t->strides == NULL) return 1;
    for (i = t->ndim - 1; i >= 0; --i) {
        if (t->shape[i] == 0) return 1;
        if (t->shape[i] != 1 && t->strides[i] != c) c_ok = 0;
        c *= t->shape[i];
    }
    if (c_ok) return 1;
    for (i = 0; i < t->ndim; ++i) {
        if (t->shape[i] != 1 && t->strides[i] != f) return 0;
        f *= t->shape[i];
    }
    return 1;
}

/* The bytes of the taken tensor `t`, whose extents the checks have bounded
 * (their product fits in int64 unless one is 0), with no second check. */
static inline Py_ssize_t dlpack_ref_priv_taken_nbytes(const DLPackRefTensor* t) {
    const DLTensor* d = t->dl_tensor;
    uint64_t count = 1;
    int32_t i;
    for (i = 0; i < d->ndim; ++i) {
        if (d->shape[i] == 0) return 0;
        count *= (uint64_t)d->shape[i];
    }
    return (Py_ssize_t)dlpack_ref_nbytes((int64_t)count, dlpack_ref_storage_bits(d->dtype, t->flags));
}

/* What a Py_buffer of the taken tensor `t` needs besides the checks every
 * tensor meets: one block of memory, and READ_ONLY memory asked for only
 * read-only (`flags` of the buffer request, PyBUF_*). 0, or -1 with a
 * BufferError; the caller releases the tensor. */
static inline int dlpack_ref_priv_check_buffer(const DLPackRefTensor* t, int flags) {
    if (!dlpack_ref_is_contiguous(t->dl_tensor)) {
        PyErr_SetString(PyExc_BufferError,
                        "the DLPack tensor is not contiguous (neither row-major nor column-major): a buffer is one "
                        "block of memory; its deleter was called");
        return -1;
    }
    if ((t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) && (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError,
                        "the DLPack tensor is flagged READ_ONLY and a writable buffer was asked for; its deleter "
                        "was called");
        return -1;
    }
    return 0;
}

/* Fill `view` (PyBuffer_FillInfo, `flags` PyBUF_*) with the memory of the
 * taken tensor `t`, as bytes, owned by a capsule that runs the deleter when
 * the buffer is released (PyBuffer_Release, or a Py_DECREF of view->obj).
 * `t` is emptied, also on failure, when the deleter has run once. */
static inline int dlpack_ref_tensor_to_buffer(DLPackRefTensor* t, Py_buffer* view, int flags) {
    const DLTensor* d = t->dl_tensor;
    PyObject* owner;
    int r;
    char* data = (char*)d->data + d->byte_offset;
    Py_ssize_t len = dlpack_ref_priv_taken_nbytes(t);
    int readonly = (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    if (dlpack_ref_priv_check_buffer(t, flags) < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(t));
        return -1;
    }
    owner = PyCapsule_New(t->managed, DLPACK_REF_BUFFER_OWNER_NAME, dlpack_ref_priv_buffer_owner_destroy);
    if (owner == NULL || (t->versioned && PyCapsule_SetContext(owner, (void*)dlpack_ref_priv_used_versioned) < 0)) {
        if (owner != NULL) PyCapsule_SetDestructor(owner, NULL);
        Py_XDECREF(owner);
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(t));
        return -1;
    }
    t->managed = NULL;   /* the owner's now */
    t->dl_tensor = NULL;
    r = PyBuffer_FillInfo(view, owner, data, len, readonly, flags);
    dlpack_ref_decref_keeping_error(owner);   /* the view holds it; on failure this runs the deleter */
    return r;
}

/* The destructor a claimed capsule gets when it owns the buffer made of its
 * tensor: the deleter, once, then the producer's own destructor (kept in
 * the context), which finds the capsule used and leaves the tensor alone.
 * One for each kind of tensor, so that the kind needs no reading of the
 * name. */
static inline void dlpack_ref_priv_owning_capsule_release(PyObject* capsule, int versioned) {
    DLPackRefTensor t;
    PyCapsule_Destructor original;
    void* context = PyCapsule_GetContext(capsule);
    memcpy(&original, &context, sizeof original);
    t.versioned = versioned;
    t.managed = PyCapsule_GetPointer(capsule,
                                     versioned ? dlpack_ref_priv_used_versioned : dlpack_ref_priv_used_legacy);
    if (t.managed == NULL) {
        PyErr_Clear();
        return;
    }
    DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t); if (original != NULL) original(capsule));
}

static inline void dlpack_ref_priv_owning_capsule_destroy(PyObject* capsule) {
    dlpack_ref_priv_owning_capsule_release(capsule, 1);
}

static inline void dlpack_ref_priv_owning_legacy_capsule_destroy(PyObject* capsule) {
    dlpack_ref_priv_owning_capsule_release(capsule, 0);
}

/* Make the claimed `capsule` the owner of its tensor (1; `versioned`: of a
 * DLManagedTensorVersioned), so that a buffer needs no owner object of its
 * own: the producer's destructor goes to the capsule's context and
 * dlpack_ref_priv_owning_capsule_destroy (or its legacy twin) takes its
 * place. 0 (nothing changed) when the producer uses the context. */
static inline int dlpack_ref_priv_capsule_takes_ownership(PyObject* capsule, int versioned) {
    PyCapsule_Destructor original;
    void* context;
    if (sizeof original != sizeof context || PyCapsule_GetContext(capsule) != NULL) return 0;
    original = PyCapsule_GetDestructor(capsule);
    memcpy(&context, &original, sizeof context);
    if (PyCapsule_SetContext(capsule, context) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (PyCapsule_SetDestructor(capsule, versioned ? dlpack_ref_priv_owning_capsule_destroy
                                                   : dlpack_ref_priv_owning_legacy_capsule_destroy) < 0) {
        PyErr_Clear();
        PyCapsule_SetContext(capsule, NULL);
        return 0;
    }
    return 1;
}

/* Take the tensor of a DLPack capsule (dlpack_ref_take_as, `dtypes`:
 * DLPACK_REF_DTYPES_*) into `view` (dlpack_ref_tensor_to_buffer); *device
 * receives its device and *dtype (unless NULL) its data type, for a
 * consumer that derives an element format of its own. `announced` (NULL:
 * none) is the device the producer said it is on: a tensor elsewhere is
 * refused; so is one flagged IS_COPIED (CopyForbiddenError). The buffer's
 * owner is the capsule itself when its context is free, else a capsule
 * made here. 0, or -1 with the error set (the deleter called once when the
 * tensor was taken). */
static inline int dlpack_ref_capsule_to_buffer(PyObject* capsule, Py_buffer* view, int flags, int dtypes,
                                               const DLDevice* announced, DLDevice* device, DLDataType* dtype) {
    DLPackRefTensor t;
    if (dlpack_ref_take_as(capsule, dtypes, &t) < 0) return -1;
    *device = t.dl_tensor->device;
    if (dtype != NULL) *dtype = t.dl_tensor->dtype;
    if (announced != NULL && (announced->device_type != device->device_type
                              || announced->device_id != device->device_id)) {
        PyErr_Format(PyExc_BufferError,
                     "__dlpack_device__() said (%d, %d) but the capsule's tensor is on (%d, %d); its deleter was "
                     "called", (int)announced->device_type, (int)announced->device_id, (int)device->device_type,
                     (int)device->device_id);
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    if (t.flags & DLPACK_FLAG_BITMASK_IS_COPIED) {
        dlpack_ref_refuse_copied(capsule);
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    if (dlpack_ref_priv_check_buffer(&t, flags) < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    if (dlpack_ref_priv_capsule_takes_ownership(capsule, t.versioned)) {
        /* The capsule is the owner (view->obj): no object is made. */
        const DLTensor* d = t.dl_tensor;
        return PyBuffer_FillInfo(view, capsule, (char*)d->data + d->byte_offset, dlpack_ref_priv_taken_nbytes(&t),
                                 (t.flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0, flags);
    }
    return dlpack_ref_tensor_to_buffer(&t, view, flags);
}

/* x.__dlpack_device__(), then x.__dlpack__(max_version=(1, 3), copy=False),
 * with stream=`stream` added when the announced device is not the CPU
 * (NULL or None: no stream is passed; a consumer that orders the memory
 * itself passes -1), and for a producer older than DLPack 1.0 (TypeError)
 * the legacy call with that stream alone. The request of a consumer that
 * takes the producer's own memory, on whatever device, without a copy:
 * the capsule (new reference), *announced set; NULL with the error set
 * (TypeError when x has no __dlpack__ or __dlpack_device__). */
static inline PyObject* dlpack_ref_consumer_request_in_place(PyObject* x, PyObject* stream, DLDevice* announced) {
    const dlpack_ref_names* n;
    PyObject* capsule;
    if (dlpack_ref_announced_device(x, announced) < 0) return NULL;
    if (announced->device_type == kDLCPU) stream = NULL;
    capsule = dlpack_ref_priv_call_dlpack(x, 1, stream, NULL, Py_False);
    if (capsule != NULL) return capsule;
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    if ((n = dlpack_ref_protocol_names()) == NULL) return NULL;
    if (!dlpack_ref_priv_has(x, n->dlpack)) {
        PyErr_Clear();
        dlpack_ref_priv_not_dlpack(x);
        return NULL;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
    /* A producer older than DLPack 1.0 rejects max_version and copy. */
    PyErr_Clear();
    return dlpack_ref_priv_call_dlpack(x, 0, stream, NULL, NULL);
}

/* A Py_buffer over the memory of any DLPack producer or capsule, for a
 * consumer of bytes (see above): a capsule is taken as it is; a producer
 * gives its tensor through its type's exchange table (no synchronization),
 * else it is asked dlpack_ref_consumer_request_in_place(x, stream) and its
 * tensor must be where it said. `dtypes`: DLPACK_REF_DTYPES_*; *device receives
 * the memory's device, *dtype (unless NULL) its data type. 0 with `view` filled (its owner runs the deleter
 * once, when the buffer is released), or -1 with the error set: BufferError
 * for a tensor the checks refuse, a non-contiguous one, READ_ONLY memory
 * asked writable (PyBUF_WRITABLE in `flags`) or one flagged IS_COPIED
 * (CopyForbiddenError), the deleter called once. */
static inline int dlpack_ref_get_buffer(PyObject* x, Py_buffer* view, int flags, int dtypes, PyObject* stream,
                                        DLDevice* device, DLDataType* dtype) {
    DLDevice announced;
    PyObject *capsule, *owner;
    const DLPackExchangeAPI* api;
    DLPackRefTensor t;
    int r;
    if (PyCapsule_CheckExact(x)) return dlpack_ref_capsule_to_buffer(x, view, flags, dtypes, NULL, device, dtype);
    /* A type with an exchange table gives its tensor with no capsule and no
       synchronization, which is what the request below asks of any other
       (its own memory, the stream left to the caller); any failure of the
       table falls back to __dlpack__. */
#ifdef DLPACK_REF_TYPE_MEMO
    if (dlpack_ref_priv_api_memo_holds(&dlpack_ref_priv_api_memo, Py_TYPE(x))) {
        /* the type's answer, kept: no lookup, and no error to look for */
        api = dlpack_ref_priv_api_memo.api;
        owner = NULL;
    } else
#endif
    if ((api = dlpack_ref_exchange_api_memo_ref(&dlpack_ref_priv_api_memo, Py_TYPE(x), &owner)) == NULL
            && PyErr_Occurred())
        return -1;
    r = api == NULL ? 0 : dlpack_ref_priv_take_by_table(api, x, &t);
    Py_XDECREF(owner);
    if (r < 0) return -1;
    if (r > 0) {
        *device = t.dl_tensor->device;
        if (dtype != NULL) *dtype = t.dl_tensor->dtype;
        if (t.flags & DLPACK_FLAG_BITMASK_IS_COPIED) {
            dlpack_ref_refuse_copied(x);
            DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
            return -1;
        }
        return dlpack_ref_tensor_to_buffer(&t, view, flags);
    }
    capsule = dlpack_ref_consumer_request_in_place(x, stream, &announced);
    if (capsule == NULL) return -1;
    if (!PyCapsule_CheckExact(capsule)) {
        /* BufferError, as the buffer protocol reports memory it cannot
           expose (dlpack_ref_take_returned says TypeError for an array). */
        PyObject* tn = dlpack_ref_priv_type_name(capsule);
        if (tn != NULL) {
            PyErr_Format(PyExc_BufferError, "__dlpack__ returned %U, not a DLPack capsule", tn);
            Py_DECREF(tn);
        }
        dlpack_ref_decref_keeping_error(capsule);
        return -1;
    }
    r = dlpack_ref_capsule_to_buffer(capsule, view, flags, dtypes, &announced, device, dtype);
    dlpack_ref_decref_keeping_error(capsule);
    return r;
}
