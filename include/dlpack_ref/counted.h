/* --- export of memory owned by a C reference count ------------------------
 * Memory whose release needs no Python (a library's own host allocation) can
 * be owned by a dlpack_ref_counted: a reference count and the function that
 * frees the memory when it reaches 0. The array holds one count and each
 * export of the memory another, so an export keeps the memory alive, not the
 * array object: its deleter only gives its count back (and frees the memory
 * at 0) and gives its block back (kept for reuse, or freed). It needs no
 * GIL, no thread state and no interpreter: it is safe on any thread at any time, during and
 * after finalization included. Memory a Python object owns is exported with
 * that object as the owner (above). */

/* An owner with a C reference count. `refs` counts the holders (the array,
 * each export); whoever takes it to 0 calls `release`, once, on whatever
 * thread that is, with no Python: it frees the memory and the count. */
typedef struct dlpack_ref_counted {
    int64_t refs;
    void (*release)(struct dlpack_ref_counted* self);
} dlpack_ref_counted;

/* One more holder (atomic: any thread may hold and let go of counts at once). */
static inline void dlpack_ref_counted_retain(dlpack_ref_counted* c) {
#if defined(_MSC_VER) && !defined(__clang__)
    _InterlockedIncrement64((volatile __int64*)&c->refs);
#else
    __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
#endif
}

/* One holder fewer; the last one calls c->release. */
static inline void dlpack_ref_counted_release(dlpack_ref_counted* c) {
#if defined(_MSC_VER) && !defined(__clang__)
    if (_InterlockedDecrement64((volatile __int64*)&c->refs) == 0) c->release(c);
#else
    if (__atomic_fetch_sub(&c->refs, 1, __ATOMIC_ACQ_REL) == 1) c->release(c);
#endif
}

/* The blocks of exports owned by a count come from malloc, not Python's
 * allocator (their deleter has no interpreter to give them back to), and
 * those of up to DLPACK_REF_PRIV_CACHED_NDIM dimensions (one size) are kept
 * for reuse in a few slots of this translation unit, each taken and given
 * back with one atomic exchange, no lock and no Python, on any thread: a
 * malloc and free pair costs about 120 instructions, a slot about 10. */
#define DLPACK_REF_PRIV_CACHED_NDIM 4
#define DLPACK_REF_PRIV_CACHE_SLOTS 8
#define DLPACK_REF_PRIV_CACHED_BYTES \
    (sizeof(DLManagedTensorVersioned) + 2 * DLPACK_REF_PRIV_CACHED_NDIM * sizeof(int64_t) + DLPACK_REF_PRIV_FN_TAIL)
/* Every block of this family has room for a function pointer after shape
 * and strides: where an export of memory with its own release function
 * (below) keeps that function. */
#define DLPACK_REF_PRIV_FN_TAIL sizeof(void (*)(void*))
static void* dlpack_ref_priv_block_cache[DLPACK_REF_PRIV_CACHE_SLOTS];

#if defined(_MSC_VER) && !defined(__clang__)
#define DLPACK_REF_PRIV_SLOT_LOAD(slot) (*(void* volatile*)(slot))
#define DLPACK_REF_PRIV_SLOT_TAKE(slot) _InterlockedExchangePointer((void* volatile*)(slot), NULL)
#define DLPACK_REF_PRIV_SLOT_GIVE(slot, b) (_InterlockedCompareExchangePointer((void* volatile*)(slot), (b), NULL) == NULL)
#else
#define DLPACK_REF_PRIV_SLOT_LOAD(slot) __atomic_load_n((slot), __ATOMIC_RELAXED)
#define DLPACK_REF_PRIV_SLOT_TAKE(slot) __atomic_exchange_n((slot), (void*)NULL, __ATOMIC_ACQUIRE)
static inline int dlpack_ref_priv_slot_give(void** slot, void* block) {
    void* empty = NULL;
    return __atomic_compare_exchange_n(slot, &empty, block, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}
#define DLPACK_REF_PRIV_SLOT_GIVE(slot, b) dlpack_ref_priv_slot_give((slot), (b))
#endif

/* A block for a managed struct of `head` bytes (at most a versioned one's)
 * with the shape and strides of `ndim` dimensions and a function pointer;
 * NULL when out of memory. */
static inline void* dlpack_ref_priv_counted_alloc(size_t head, int32_t ndim) {
    int i;
    if (ndim > DLPACK_REF_PRIV_CACHED_NDIM)
        return malloc(head + 2 * (size_t)ndim * sizeof(int64_t) + DLPACK_REF_PRIV_FN_TAIL);
    for (i = 0; i < DLPACK_REF_PRIV_CACHE_SLOTS; ++i) {
        void* block;
        if (DLPACK_REF_PRIV_SLOT_LOAD(&dlpack_ref_priv_block_cache[i]) == NULL) continue;
        block = DLPACK_REF_PRIV_SLOT_TAKE(&dlpack_ref_priv_block_cache[i]);
        if (block != NULL) return block;
    }
    return malloc(DLPACK_REF_PRIV_CACHED_BYTES);
}

/* Give a block of dlpack_ref_priv_counted_alloc back (kept, or freed). */
static inline void dlpack_ref_priv_counted_free(void* block, int32_t ndim) {
    int i;
    if (ndim <= DLPACK_REF_PRIV_CACHED_NDIM)
        for (i = 0; i < DLPACK_REF_PRIV_CACHE_SLOTS; ++i)
            if (DLPACK_REF_PRIV_SLOT_LOAD(&dlpack_ref_priv_block_cache[i]) == NULL
                    && DLPACK_REF_PRIV_SLOT_GIVE(&dlpack_ref_priv_block_cache[i], block))
                return;
    free(block);
}

/* The deleters of exports owned by a count: give the count back, give the
 * block back (no Python allocator is involved). */
static inline void dlpack_ref_api_delete_counted_versioned(DLManagedTensorVersioned* self) {
    dlpack_ref_counted_release((dlpack_ref_counted*)self->manager_ctx);
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
}

static inline void dlpack_ref_api_delete_counted_legacy(DLManagedTensor* self) {
    dlpack_ref_counted_release((dlpack_ref_counted*)self->manager_ctx);
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
}

/* The block of a versioned export of `t` holding one count of `memory`
 * (NULL with MemoryError). */
static inline DLManagedTensorVersioned* dlpack_ref_api_counted_block(const DLTensor* t, dlpack_ref_counted* memory,
                                                                     uint64_t flags) {
    DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)dlpack_ref_priv_counted_alloc(
        sizeof(DLManagedTensorVersioned), t->ndim);
    if (m == NULL) { PyErr_NoMemory(); return NULL; }
    dlpack_ref_counted_retain(memory);
    return dlpack_ref_priv_versioned(m, t, flags, memory, dlpack_ref_api_delete_counted_versioned);
}

/* A `dltensor_versioned` capsule describing `tensor` (shape and strides
 * copied, NULL strides made row-major), holding one count of `memory`. */
static inline PyObject* dlpack_ref_export_versioned_counted(const DLTensor* tensor, dlpack_ref_counted* memory,
                                                           uint64_t flags) {
    DLManagedTensorVersioned* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    m = dlpack_ref_api_counted_block(tensor, memory, flags);
    return m == NULL ? NULL : dlpack_ref_api_wrap_versioned(m);
}

/* A legacy `dltensor` capsule describing `tensor`, holding one count of
 * `memory`. */
static inline PyObject* dlpack_ref_export_legacy_counted(const DLTensor* tensor, dlpack_ref_counted* memory) {
    DLManagedTensor* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    m = (DLManagedTensor*)dlpack_ref_priv_counted_alloc(sizeof(DLManagedTensor), tensor->ndim);
    if (m == NULL) { PyErr_NoMemory(); return NULL; }
    dlpack_ref_api_fill(&m->dl_tensor, tensor, (int64_t*)(m + 1));
    dlpack_ref_counted_retain(memory);
    m->manager_ctx = memory;
    m->deleter = dlpack_ref_api_delete_counted_legacy;
    return dlpack_ref_api_wrap_legacy(m);
}
