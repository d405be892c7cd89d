/* --- the checks: one rule each; every consumer calls all of them ------------
 * Each returns 0, or -1 with a BufferError naming the offending value and
 * what is accepted. */

static inline int dlpack_check_ndim(int32_t ndim) {
    if (ndim < 0 || ndim > DLPACK_REF_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError, "DLTensor.ndim=%d is out of range; accepted: 0 to %d", (int)ndim,
                     DLPACK_REF_MAX_NDIM);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_dtype(DLDataType dtype) {
    if (dlpack_ref_dtype_format(dtype.code, dtype.bits, dtype.lanes) == NULL) {
        PyErr_Format(PyExc_BufferError,
                     "unsupported DLDataType(code=%d, bits=%d, lanes=%d): not a DLPack 1.3 data type; "
                     "accepted (code, bits, lanes): %s",
                     (int)dtype.code, (int)dtype.bits, (int)dtype.lanes, DLPACK_REF_DTYPES_ACCEPTED);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_device(DLDevice device) {
    if (!dlpack_ref_device_type_known((int32_t)device.device_type)) {
        PyErr_Format(PyExc_BufferError,
                     "DLTensor.device=(%d, %d) has a device type that DLPack 1.3 does not define; defined: %s",
                     (int)device.device_type, (int)device.device_id, DLPACK_REF_DEVICE_TYPES_ACCEPTED);
        return -1;
    }
    if (device.device_id < 0) {
        PyErr_Format(PyExc_BufferError, "DLTensor.device.device_id=%d is negative", (int)device.device_id);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_shape(const DLTensor* t) {
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_Format(PyExc_BufferError, "DLTensor.shape is NULL with ndim=%d", (int)t->ndim);
        return -1;
    }
    return 0;
}

/* NULL strides meant row-major until DLPack 1.2 made them mandatory. */
static inline int dlpack_check_strides(const DLTensor* t, int null_strides_ok) {
    if (t->ndim > 0 && t->strides == NULL && !null_strides_ok) {
        PyErr_SetString(PyExc_BufferError,
                        "DLTensor.strides is NULL with ndim > 0, which DLPack >= 1.2 forbids (NULL meant "
                        "row-major only in legacy and pre-1.2 capsules)");
        return -1;
    }
    return 0;
}

/* The element count, after checking that it and its size in bytes fit
 * int64; -1 with a BufferError otherwise. */
static inline int64_t dlpack_check_extents(const DLTensor* t, uint64_t flags) {
    int64_t n = dlpack_ref_element_count(t->shape, t->ndim);
    int64_t bits;
    int32_t i;
    PyObject* shape;
    if (n == -1) {
        for (i = 0; i < t->ndim; ++i) {
            if (t->shape[i] < 0) {
                PyErr_Format(PyExc_BufferError, "DLTensor.shape[%d]=%lld is negative", (int)i,
                             (long long)t->shape[i]);
                return -1;
            }
        }
    }
    if (n == -2) {
        n = 1;
        for (i = 0; i < t->ndim; ++i) {
            if (n > INT64_MAX / t->shape[i]) break;
            n *= t->shape[i];
        }
        if (i == t->ndim) i = t->ndim - 1;
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) return -1;
        PyErr_Format(PyExc_BufferError,
                     "DLTensor shape %R overflows int64 at axis %d (extent %lld): more elements than fit "
                     "in int64", shape, (int)i, (long long)t->shape[i]);
        Py_DECREF(shape);
        return -1;
    }
    bits = dlpack_ref_storage_bits(t->dtype, flags);
    if (bits > 0 && n > (INT64_MAX - 7) / bits) {
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) return -1;
        PyErr_Format(PyExc_BufferError, "DLTensor.shape %R of %d-bit elements needs more than 2**63 bytes",
                     shape, (int)t->dtype.bits);
        Py_DECREF(shape);
        return -1;
    }
    return n;
}

/* The farthest element is addressable: its byte distance from the first
 * fits int64. */
static inline int dlpack_check_span(const DLTensor* t, int64_t count, uint64_t flags) {
    int64_t span, bits;
    PyObject *strides, *shape;
    if (count == 0 || t->strides == NULL) return 0;   /* row-major: covered by the extents */
    span = dlpack_ref_span(t->shape, t->strides, t->ndim);
    bits = dlpack_ref_storage_bits(t->dtype, flags);
    if (span < 0 || (bits > 0 && span + 1 > INT64_MAX / bits)) {
        strides = dlpack_ref_priv_tuple(t->strides, t->ndim);
        if (strides == NULL) return -1;
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) { Py_DECREF(strides); return -1; }
        PyErr_Format(PyExc_BufferError, "DLTensor strides %R with shape %R reach beyond 2**63 bytes", strides,
                     shape);
        Py_DECREF(strides);
        Py_DECREF(shape);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_data(const DLTensor* t, int64_t count) {
    PyObject* shape;
    if (t->data == NULL && count != 0) {
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) return -1;
        PyErr_Format(PyExc_BufferError, "DLTensor.data is NULL for a non-empty tensor (shape %R)", shape);
        Py_DECREF(shape);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_byte_offset(const DLTensor* t) {
    if (t->byte_offset > (uint64_t)INT64_MAX) {
        PyErr_Format(PyExc_BufferError, "DLTensor.byte_offset=%llu overflows int64",
                     (unsigned long long)t->byte_offset);
        return -1;
    }
    return 0;
}

/* What a consumer accepts as a tensor's data type (the `dtypes` argument of
 * the *_as calls):
 *   DLPACK_REF_DTYPES_DLPACK: the DLPack 1.3 data types (dlpack_check_dtype),
 *     for a consumer that reads elements;
 *   DLPACK_REF_DTYPES_AS_BYTES: any (code, bits, lanes) whose element has a
 *     size (bits and lanes not 0), for a consumer that takes the memory as
 *     bytes and never reads an element by its type (a message buffer, a
 *     byte copy): float128 or a vendor's code is as many bytes as any other. */
#define DLPACK_REF_DTYPES_DLPACK 0
#define DLPACK_REF_DTYPES_AS_BYTES 1

static inline int dlpack_check_dtype_as(DLDataType dtype, int dtypes) {
    if (dtypes != DLPACK_REF_DTYPES_AS_BYTES) return dlpack_check_dtype(dtype);
    if (dtype.bits == 0 || dtype.lanes == 0) {
        PyErr_Format(PyExc_BufferError,
                     "DLDataType(code=%d, bits=%d, lanes=%d) has no size: bits and lanes must be at least 1",
                     (int)dtype.code, (int)dtype.bits, (int)dtype.lanes);
        return -1;
    }
    return 0;
}

/* Every rule a DLTensor must meet before any of its fields is trusted, with
 * the data types `dtypes` accepts (DLPACK_REF_DTYPES_*). */
static inline int dlpack_check_tensor_as(const DLTensor* t, uint64_t flags, int null_strides_ok, int dtypes) {
    int64_t count;
    if (dlpack_check_ndim(t->ndim) < 0 || dlpack_check_dtype_as(t->dtype, dtypes) < 0
            || dlpack_check_device(t->device) < 0 || dlpack_check_shape(t) < 0
            || dlpack_check_strides(t, null_strides_ok) < 0)
        return -1;
    count = dlpack_check_extents(t, flags);
    if (count < 0 || dlpack_check_span(t, count, flags) < 0 || dlpack_check_data(t, count) < 0
            || dlpack_check_byte_offset(t) < 0)
        return -1;
    return 0;
}

/* Every rule a DLTensor must meet, DLPack 1.3 data types only. */
static inline int dlpack_check_tensor(const DLTensor* t, uint64_t flags, int null_strides_ok) {
    return dlpack_check_tensor_as(t, flags, null_strides_ok, DLPACK_REF_DTYPES_DLPACK);
}

static inline int dlpack_check_version(const DLManagedTensorVersioned* m) {
    if (m->version.major != DLPACK_MAJOR_VERSION) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack capsule has version %u.%u; major version %d (ABI %d.%d) is read here. "
                     "Its deleter was called.",
                     (unsigned)m->version.major, (unsigned)m->version.minor, DLPACK_MAJOR_VERSION,
                     DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
        return -1;
    }
    return 0;
}

/* Every rule a managed tensor (DLManagedTensorVersioned* when `versioned`,
 * else DLManagedTensor*) must meet: the version, then dlpack_check_tensor_as
 * with the data types `dtypes` accepts (dlpack_check_managed: DLPack's
 * own). The caller owns it and runs its deleter on failure. */
static inline int dlpack_check_managed_as(void* managed, int versioned, int dtypes) {
    DLManagedTensorVersioned* mv;
    if (!versioned) return dlpack_check_tensor_as(&((DLManagedTensor*)managed)->dl_tensor, 0, 1, dtypes);
    mv = (DLManagedTensorVersioned*)managed;
    if (dlpack_check_version(mv) < 0) return -1;
    return dlpack_check_tensor_as(&mv->dl_tensor, mv->flags, mv->version.minor < 2, dtypes);
}

static inline int dlpack_check_managed(void* managed, int versioned) {
    return dlpack_check_managed_as(managed, versioned, DLPACK_REF_DTYPES_DLPACK);
}
