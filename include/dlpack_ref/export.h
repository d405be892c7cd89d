/* --- export: the one allocation, its deleters and capsule destructors ------
 * Exports are made with the GIL held, so the block comes from pymalloc:
 * the managed struct, then shape and strides (2 * ndim int64), then (CPython
 * 3.15+) the record of the interpreter that made the export. */

/* Whether the interpreter is finalizing. The limited API below 3.13 has
 * neither Py_IsFinalizing nor _Py_IsFinalizing: there the answer is
 * !Py_IsInitialized(), which CPython turns false in Py_FinalizeEx at the
 * same step that marks the runtime as finalizing. */
static inline int dlpack_ref_api_is_finalizing(void) {
#if defined(Py_LIMITED_API) && (Py_LIMITED_API + 0 < 0x030D0000 || PY_VERSION_HEX < 0x030D0000)
    return !Py_IsInitialized();
#elif PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Drop the owner and free the block of an export, from any thread, with
 * PyGILState (which attaches to the main interpreter). A deleter can run on
 * a thread without the GIL, or after the interpreter has finalized; in the
 * last case touching Python would crash, so both are leaked: the process is
 * ending and the OS reclaims the memory. CPython leaves a window: a thread
 * that passes the finalizing check just before finalization begins attaches
 * during it (docs/guarantees.md). The exports of this header release through
 * their interpreter's view instead on CPython 3.15+, where that window is
 * closed. */
static inline void dlpack_ref_api_release_block(PyObject* owner, void* block) {
    PyGILState_STATE st;
    if (!Py_IsInitialized()) return;
#ifdef Py_LIMITED_API
    /* No PyGILState_Check in the limited API: PyGILState_Ensure below nests
       when this thread holds the GIL already (a deleter run by a consumer's
       decref), at the cost of that call and its release. */
    if (dlpack_ref_api_is_finalizing()) return;
#else
    if (PyGILState_Check()) { Py_XDECREF(owner); PyMem_Free(block); return; }
    if (dlpack_ref_api_is_finalizing()) return;
#endif
    st = PyGILState_Ensure();
    Py_XDECREF(owner);
    PyMem_Free(block);
    PyGILState_Release(st);
}

#if PY_VERSION_HEX >= 0x030F0000 && !defined(Py_LIMITED_API)
/* CPython 3.15 (PEP 788): a deleter attaches through a view of the
 * interpreter that made the export, holding a guard that keeps it from
 * finalizing while the owner is dropped; when no guard can be had (it is
 * finalizing or gone) nothing is touched and the block is leaked. */
#define DLPACK_REF_RELEASE_BY_VIEW 1

/* The interpreter exports were made in: one record per interpreter that
 * exported through this translation unit, made at its first export and
 * kept for the life of the process (a view does not keep its interpreter
 * alive). Identified by interpreter ID, which is never reused. */
typedef struct dlpack_ref_priv_origin {
    int64_t interp_id;
    PyInterpreterView* view;
    struct dlpack_ref_priv_origin* next;
} dlpack_ref_priv_origin;

static dlpack_ref_priv_origin* dlpack_ref_priv_origins = NULL;   /* pushed by compare-and-swap */

/* The record of the current interpreter (NULL with MemoryError). */
static inline dlpack_ref_priv_origin* dlpack_ref_priv_origin_here(void) {
    int64_t id = PyInterpreterState_GetID(PyInterpreterState_Get());
    dlpack_ref_priv_origin *o, *head;
    head = (dlpack_ref_priv_origin*)_Py_atomic_load_ptr_acquire(&dlpack_ref_priv_origins);
    for (o = head; o != NULL; o = o->next)
        if (o->interp_id == id) return o;
    o = (dlpack_ref_priv_origin*)PyMem_RawMalloc(sizeof(dlpack_ref_priv_origin));
    if (o == NULL) { PyErr_NoMemory(); return NULL; }
    o->interp_id = id;
    o->view = PyInterpreterView_FromCurrent();
    if (o->view == NULL) {
        PyMem_RawFree(o);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    do { o->next = head; } while (!_Py_atomic_compare_exchange_ptr(&dlpack_ref_priv_origins, &head, o));
    return o;
}

/* Where the record's address is kept: after shape and strides. */
static inline dlpack_ref_priv_origin** dlpack_ref_priv_origin_slot(const DLTensor* t) {
    return (dlpack_ref_priv_origin**)(t->shape + 2 * (size_t)t->ndim);
}

/* dlpack_ref_api_release_block, through the interpreter that made the
 * export: at once when this thread is attached to it, else attached by its
 * view, else (no guard) leaked. */
static inline void dlpack_ref_priv_release_export(PyObject* owner, void* block, const dlpack_ref_priv_origin* o) {
    PyThreadState* attached;
    PyThreadStateToken* token;
    if (!Py_IsInitialized()) return;
    attached = PyThreadState_GetUnchecked();
    if (attached != NULL && PyInterpreterState_GetID(PyThreadState_GetInterpreter(attached)) == o->interp_id) {
        Py_XDECREF(owner);
        PyMem_Free(block);
        return;
    }
    token = PyThreadState_EnsureFromView(o->view);
    if (token == NULL) return;   /* finalizing or gone: no guard, no touch */
    Py_XDECREF(owner);
    PyMem_Free(block);
    PyThreadState_Release(token);
}
#define DLPACK_REF_PRIV_BLOCK_TAIL sizeof(void*)
#define DLPACK_REF_PRIV_RELEASE(self) \
    dlpack_ref_priv_release_export((PyObject*)(self)->manager_ctx, (self), *dlpack_ref_priv_origin_slot(&(self)->dl_tensor))
#else
#define DLPACK_REF_PRIV_BLOCK_TAIL 0
#define DLPACK_REF_PRIV_RELEASE(self) dlpack_ref_api_release_block((PyObject*)(self)->manager_ctx, (self))
#endif

/* The block of an export: the managed struct `head` bytes, shape and
 * strides, and the interpreter's record where deleters release through it
 * (NULL with MemoryError). */
static inline void* dlpack_ref_priv_export_block(size_t head, int32_t ndim) {
    void* block = PyMem_Malloc(head + 2 * (size_t)ndim * sizeof(int64_t) + DLPACK_REF_PRIV_BLOCK_TAIL);
    if (block == NULL) { PyErr_NoMemory(); return NULL; }
#ifdef DLPACK_REF_RELEASE_BY_VIEW
    {
        dlpack_ref_priv_origin* o = dlpack_ref_priv_origin_here();
        if (o == NULL) { PyMem_Free(block); return NULL; }
        *(dlpack_ref_priv_origin**)((char*)block + head + 2 * (size_t)ndim * sizeof(int64_t)) = o;
    }
#endif
    return block;
}

static inline void dlpack_ref_api_delete_versioned(DLManagedTensorVersioned* self) {
    DLPACK_REF_PRIV_RELEASE(self);
}

static inline void dlpack_ref_api_delete_legacy(DLManagedTensor* self) {
    DLPACK_REF_PRIV_RELEASE(self);
}

/* An unconsumed capsule still owns its tensor; a consumer renames it.
 * Whoever destroys a capsule holds the GIL, so a block of ours is released
 * right here; a foreign deleter is called as it is. Deleters are compared by
 * address: each translation unit (each vendoring library) has its own copy
 * of the inline deleters, and releases the others' blocks through their
 * deleter, which is just as right. */
#define DLPACK_REF_PRIV_DESTROY(Managed, own_deleter, capsule_name)   \
    const char* name = PyCapsule_GetName(capsule);                    \
    Managed* m;                                                       \
    if (name != capsule_name && (name == NULL || strcmp(name, capsule_name) != 0)) return; \
    m = (Managed*)PyCapsule_GetPointer(capsule, name);                \
    if (m->deleter == own_deleter) {                                  \
        Py_XDECREF((PyObject*)m->manager_ctx);                        \
        PyMem_Free(m);                                                \
    } else if (m->deleter) {                                          \
        m->deleter(m);                                                \
    }

static inline void dlpack_ref_api_destroy_versioned(PyObject* capsule) {
    DLPACK_REF_PRIV_DESTROY(DLManagedTensorVersioned, dlpack_ref_api_delete_versioned, dlpack_ref_priv_name_versioned)
}

static inline void dlpack_ref_api_destroy_legacy(PyObject* capsule) {
    DLPACK_REF_PRIV_DESTROY(DLManagedTensor, dlpack_ref_api_delete_legacy, dlpack_ref_priv_name_legacy)
}

/* t's metadata into `into`, shape and strides into `storage` (2 * ndim int64
 * right after the managed struct); NULL strides become row-major. */
static inline void dlpack_ref_api_fill(DLTensor* into, const DLTensor* t, int64_t* storage) {
    int32_t i;
    int64_t s = 1;
    *into = *t;
    into->shape = storage;
    into->strides = storage + t->ndim;
    if (t->ndim == 0) return;
    if (t->ndim <= 4 && t->strides != NULL) {
        /* A few words: copied in place (a memcpy call costs more). */
        for (i = 0; i < t->ndim; ++i) {
            storage[i] = t->shape[i];
            storage[t->ndim + i] = t->strides[i];
        }
        return;
    }
    memcpy(storage, t->shape, (size_t)t->ndim * sizeof(int64_t));
    if (t->strides != NULL) {
        memcpy(storage + t->ndim, t->strides, (size_t)t->ndim * sizeof(int64_t));
        return;
    }
    for (i = t->ndim - 1; i >= 0; --i) {
        storage[t->ndim + i] = s;
        s *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
}

/* Fill a versioned export's block: version 1.3, `flags`, t's metadata with
 * shape and strides in the block, the manager and its deleter. */
static inline DLManagedTensorVersioned* dlpack_ref_priv_versioned(DLManagedTensorVersioned* m, const DLTensor* t,
                                                                  uint64_t flags, void* manager,
                                                                  void (*deleter)(DLManagedTensorVersioned*)) {
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->flags = flags;
    dlpack_ref_api_fill(&m->dl_tensor, t, (int64_t*)(m + 1));
    m->manager_ctx = manager;
    m->deleter = deleter;
    return m;
}

/* The block of a versioned export owning one reference to `owner`. */
static inline DLManagedTensorVersioned* dlpack_ref_api_versioned_block(const DLTensor* t, PyObject* owner,
                                                                       uint64_t flags) {
    DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)dlpack_ref_priv_export_block(
        sizeof(DLManagedTensorVersioned), t->ndim);
    if (m == NULL) return NULL;
    Py_INCREF(owner);
    return dlpack_ref_priv_versioned(m, t, flags, owner, dlpack_ref_api_delete_versioned);
}

/* A capsule owning an existing managed tensor (deleted if that fails). */
static inline PyObject* dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m) {
    PyObject* capsule = PyCapsule_New(m, dlpack_ref_priv_name_versioned, dlpack_ref_api_destroy_versioned);
    if (capsule == NULL && m->deleter) DLPACK_REF_PRIV_KEEP_ERROR(m->deleter(m));
    return capsule;
}

static inline PyObject* dlpack_ref_api_wrap_legacy(DLManagedTensor* m) {
    PyObject* capsule = PyCapsule_New(m, dlpack_ref_priv_name_legacy, dlpack_ref_api_destroy_legacy);
    if (capsule == NULL && m->deleter) DLPACK_REF_PRIV_KEEP_ERROR(m->deleter(m));
    return capsule;
}

static inline PyObject* dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags) {
    DLManagedTensorVersioned* m = dlpack_ref_api_versioned_block(t, owner, flags);
    return m == NULL ? NULL : dlpack_ref_api_wrap_versioned(m);
}

static inline PyObject* dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner) {
    DLManagedTensor* m = (DLManagedTensor*)dlpack_ref_priv_export_block(sizeof(DLManagedTensor), t->ndim);
    if (m == NULL) return NULL;
    dlpack_ref_api_fill(&m->dl_tensor, t, (int64_t*)(m + 1));
    Py_INCREF(owner);
    m->manager_ctx = owner;
    m->deleter = dlpack_ref_api_delete_legacy;
    return dlpack_ref_api_wrap_legacy(m);
}

/* What an exporter must describe: a ValueError (a caller's bug, not a
 * DLPack refusal) for an ndim out of range or a missing shape. */
static inline int dlpack_ref_priv_check_export(const DLTensor* t) {
    if (t->ndim < 0 || t->ndim > DLPACK_REF_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "DLTensor.ndim=%d is out of range 0..%d", (int)t->ndim,
                     DLPACK_REF_MAX_NDIM);
        return -1;
    }
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_Format(PyExc_ValueError, "DLTensor.shape is NULL with ndim=%d", (int)t->ndim);
        return -1;
    }
    return 0;
}

/* A `dltensor_versioned` capsule (version 1.3, `flags`) describing
 * `tensor`; its shape/strides are copied (NULL strides become row-major),
 * `owner` is kept alive until the consumer's deleter call. */
static inline PyObject* dlpack_ref_export_versioned(const DLTensor* tensor, PyObject* owner, uint64_t flags) {
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    return dlpack_ref_api_new_versioned(tensor, owner, flags);
}

/* A legacy `dltensor` capsule (for consumers older than DLPack 1.0). */
static inline PyObject* dlpack_ref_export_legacy(const DLTensor* tensor, PyObject* owner) {
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    return dlpack_ref_api_new_legacy(tensor, owner);
}
