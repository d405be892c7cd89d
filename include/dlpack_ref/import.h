/* --- import: capsule or producer -> owned tensor --------------------------- */

/* Run the deleter of a taken tensor (once: the holder is cleared). Needs no
 * GIL of its own; the deleter takes what it needs. */
static inline void dlpack_ref_release(DLPackRefTensor* t) {
    if (t->managed == NULL) return;
    if (t->versioned) {
        DLManagedTensorVersioned* mv = (DLManagedTensorVersioned*)t->managed;
        if (mv->deleter != NULL) mv->deleter(mv);
    } else {
        DLManagedTensor* ml = (DLManagedTensor*)t->managed;
        if (ml->deleter != NULL) ml->deleter(ml);
    }
    t->managed = NULL;
    t->dl_tensor = NULL;
}

/* Own `managed` and check it with dlpack_check_managed_as (`dtypes`:
 * DLPACK_REF_DTYPES_*). On failure its deleter has run once and the error is
 * set; `out` is filled only on success. */
static inline int dlpack_ref_adopt_as(void* managed, int versioned, int dtypes, DLPackRefTensor* out) {
    DLPackRefTensor t;
    t.managed = managed;
    t.versioned = versioned;
    if (versioned) {
        t.dl_tensor = &((DLManagedTensorVersioned*)managed)->dl_tensor;
        t.flags = ((DLManagedTensorVersioned*)managed)->flags;
    } else {
        t.dl_tensor = &((DLManagedTensor*)managed)->dl_tensor;
        t.flags = 0;
    }
    if (dlpack_check_managed_as(managed, versioned, dtypes) < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    *out = t;
    return 0;
}

/* dlpack_ref_adopt_as with DLPack's own data types. */
static inline int dlpack_ref_adopt(void* managed, int versioned, DLPackRefTensor* out) {
    return dlpack_ref_adopt_as(managed, versioned, DLPACK_REF_DTYPES_DLPACK, out);
}

/* The managed tensor of an unconsumed `dltensor_versioned` or `dltensor`
 * capsule, which is renamed `used_*`: from here on the caller owns the
 * tensor (and runs its deleter). `*versioned` tells which struct it is.
 * NULL with TypeError (not a capsule) or BufferError (consumed, or not a
 * DLPack capsule). */
static inline void* dlpack_ref_claim(PyObject* capsule, int* versioned) {
    const char* name = NULL;
    void* managed = NULL;
    PyObject* shown;
    if (!PyCapsule_CheckExact(capsule)) {
        PyObject* tn = dlpack_ref_priv_type_name(capsule);
        if (tn != NULL) {
            PyErr_Format(PyExc_TypeError, "expected a DLPack capsule, not %U", tn);
            Py_DECREF(tn);
        }
        return NULL;
    }
    /* Read and rename under the capsule's critical section: without the GIL
       two threads could both read the unused name and both take the tensor
       (two owners, the deleter called twice). It serializes the consumers
       that lock the capsule (this header, so dlpack-ref and every library
       that vendors it); a library that renames without locking races with
       them (docs/guarantees.md, Free threading). */
    DLPACK_REF_BEGIN_CRITICAL_SECTION(capsule);
    name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, DLPACK_REF_CAPSULE_VERSIONED) == 0) {
        /* Its own name pointer: CPython compares pointers first, so the name
           is not compared a second time. */
        managed = PyCapsule_GetPointer(capsule, name);
        PyCapsule_SetName(capsule, dlpack_ref_priv_used_versioned);
        *versioned = 1;
    } else if (name != NULL && strcmp(name, DLPACK_REF_CAPSULE_LEGACY) == 0) {
        managed = PyCapsule_GetPointer(capsule, DLPACK_REF_CAPSULE_LEGACY);
        PyCapsule_SetName(capsule, dlpack_ref_priv_used_legacy);
        *versioned = 0;
    }
    DLPACK_REF_END_CRITICAL_SECTION();
    if (managed != NULL) return managed;
    if (name != NULL && (strcmp(name, DLPACK_REF_CAPSULE_USED_VERSIONED) == 0
                         || strcmp(name, DLPACK_REF_CAPSULE_USED_LEGACY) == 0)) {
        PyErr_Format(PyExc_BufferError,
                     "this DLPack capsule was already consumed (it is named '%s'); a capsule can be "
                     "imported once", name);
        return NULL;
    }
    if (name == NULL) {
        shown = PyUnicode_FromString("NULL");
    } else {
        PyObject* decoded = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
        shown = decoded == NULL ? NULL : PyObject_Repr(decoded);
        Py_XDECREF(decoded);
    }
    if (shown == NULL) return NULL;
    PyErr_Format(PyExc_BufferError, "a capsule named %U is not a DLPack capsule; expected '%s' or '%s'", shown,
                 DLPACK_REF_CAPSULE_VERSIONED, DLPACK_REF_CAPSULE_LEGACY);
    Py_DECREF(shown);
    return NULL;
}

/* Take ownership of the tensor of a `dltensor_versioned` or `dltensor`
 * capsule (dlpack_ref_claim) and check it (dlpack_ref_adopt_as, `dtypes`:
 * DLPACK_REF_DTYPES_*; dlpack_ref_take: DLPack's own). Whether this library
 * can hold memory of the tensor's device is the caller's to decide. */
static inline int dlpack_ref_take_as(PyObject* capsule, int dtypes, DLPackRefTensor* out) {
    int versioned = 0;
    void* managed = dlpack_ref_claim(capsule, &versioned);
    if (managed == NULL) return -1;
    return dlpack_ref_adopt_as(managed, versioned, dtypes, out);
}

static inline int dlpack_ref_take(PyObject* capsule, DLPackRefTensor* out) {
    return dlpack_ref_take_as(capsule, DLPACK_REF_DTYPES_DLPACK, out);
}

/* Drop a reference with the pending exception (if any) put aside: the last
 * reference to a capsule runs its destructor, which may run Python code (a
 * producer written in Python, a finalizer its deleter calls), and Python
 * code must not start with an exception set. */
static inline void dlpack_ref_decref_keeping_error(PyObject* o) {
    if (PyErr_Occurred() == NULL) { Py_DECREF(o); return; }
    DLPACK_REF_PRIV_KEEP_ERROR(Py_DECREF(o));
}
