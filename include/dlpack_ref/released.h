/* --- export of memory with the library's own release function -------------
 * A library whose buffers are not Python objects (a C allocation with its own
 * reference count, a pool, memory mapped from a file) exports them with `ctx`
 * (whatever identifies the buffer to it) and `release`, its function that
 * gives the buffer back. The caller makes one hold on the buffer for the
 * export (its own retain) and hands that hold over: `release(ctx)` is called
 * exactly once, by the deleter when the consumer is done with the capsule,
 * or before the export returns NULL when no capsule could be made. The
 * deleter itself needs no GIL, thread state or interpreter (its block comes
 * from malloc), so `release` decides what it needs: it may run on any
 * thread, with or without the GIL, during or after finalization. */

typedef void (*dlpack_ref_priv_release_fn)(void* ctx);

/* Where a block of this family keeps its release function. */
static inline dlpack_ref_priv_release_fn* dlpack_ref_priv_release_slot(const DLTensor* t) {
    return (dlpack_ref_priv_release_fn*)(void*)(t->shape + 2 * (size_t)t->ndim);
}

static inline void dlpack_ref_api_delete_released_versioned(DLManagedTensorVersioned* self) {
    dlpack_ref_priv_release_fn release = *dlpack_ref_priv_release_slot(&self->dl_tensor);
    void* ctx = self->manager_ctx;
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
    release(ctx);
}

static inline void dlpack_ref_api_delete_released_legacy(DLManagedTensor* self) {
    dlpack_ref_priv_release_fn release = *dlpack_ref_priv_release_slot(&self->dl_tensor);
    void* ctx = self->manager_ctx;
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
    release(ctx);
}

/* A `dltensor_versioned` capsule describing `tensor` (shape and strides
 * copied, NULL strides made row-major) whose deleter calls release(ctx);
 * NULL with the error set, release(ctx) then called already. */
static inline PyObject* dlpack_ref_export_versioned_released(const DLTensor* tensor, void* ctx,
                                                            void (*release)(void* ctx), uint64_t flags) {
    DLManagedTensorVersioned* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) goto fail;
    m = (DLManagedTensorVersioned*)dlpack_ref_priv_counted_alloc(sizeof(DLManagedTensorVersioned), tensor->ndim);
    if (m == NULL) { PyErr_NoMemory(); goto fail; }
    dlpack_ref_priv_versioned(m, tensor, flags, ctx, dlpack_ref_api_delete_released_versioned);
    *dlpack_ref_priv_release_slot(&m->dl_tensor) = release;
    return dlpack_ref_api_wrap_versioned(m);
fail:
    DLPACK_REF_PRIV_KEEP_ERROR(release(ctx));
    return NULL;
}

/* A legacy `dltensor` capsule describing `tensor` whose deleter calls
 * release(ctx); NULL with the error set, release(ctx) then called already. */
static inline PyObject* dlpack_ref_export_legacy_released(const DLTensor* tensor, void* ctx,
                                                         void (*release)(void* ctx)) {
    DLManagedTensor* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) goto fail;
    m = (DLManagedTensor*)dlpack_ref_priv_counted_alloc(sizeof(DLManagedTensor), tensor->ndim);
    if (m == NULL) { PyErr_NoMemory(); goto fail; }
    dlpack_ref_api_fill(&m->dl_tensor, tensor, (int64_t*)(m + 1));
    *dlpack_ref_priv_release_slot(&m->dl_tensor) = release;
    m->manager_ctx = ctx;
    m->deleter = dlpack_ref_api_delete_released_legacy;
    return dlpack_ref_api_wrap_legacy(m);
fail:
    DLPACK_REF_PRIV_KEEP_ERROR(release(ctx));
    return NULL;
}
