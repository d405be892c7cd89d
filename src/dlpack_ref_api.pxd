# cython: language_level=3
#
# The Cython API of dlpack-ref: export a DLTensor as a DLPack capsule and
# import any DLPack producer or capsule as an owned tensor, in a few inline
# functions that another extension compiles into itself.
#
# Header-only on purpose (see docs/exchange_api.md): nothing here links
# against dlpack-ref's compiled module, so a library can either build
# against an installed dlpack-ref (include_path=[dlpack_ref.get_include()])
# or vendor three files -- dlpack.h, dlpack.pxd and this one -- and need no
# dlpack-ref at run time. Only dlpack_ref_to_array and dlpack_ref_view talk
# to a dlpack_ref.Array, and they do it through the standard DLPack C
# exchange API table of the Array type, not through private symbols.
#
#     from dlpack cimport DLTensor
#     from dlpack_ref_api cimport *
#
# Exported capsules follow the rules of dlpack-ref itself: one malloc per
# export (struct, shape and strides together), strides never NULL, the owner
# kept alive until the deleter runs; the deleter may run on any thread,
# takes the GIL itself and leaks the owner reference (never crashes) after
# the interpreter has finalized.

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport strcmp
from cpython.object cimport PyObject
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_SetName,
)
from cpython.ref cimport Py_DECREF
from dlpack cimport *

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>

    static void dlpack_ref_api_release_owner(PyObject* owner) {
        if (owner == NULL || !Py_IsInitialized()) return;
        if (PyGILState_Check()) { Py_DECREF(owner); return; }
    #if PY_VERSION_HEX >= 0x030D0000
        if (Py_IsFinalizing()) return;
    #else
        if (_Py_IsFinalizing()) return;
    #endif
        PyGILState_STATE st = PyGILState_Ensure();
        Py_DECREF(owner);
        PyGILState_Release(st);
    }

    static void dlpack_ref_api_delete_versioned(DLManagedTensorVersioned* self) {
        dlpack_ref_api_release_owner((PyObject*)self->manager_ctx);
        free(self);
    }

    static void dlpack_ref_api_delete_legacy(DLManagedTensor* self) {
        dlpack_ref_api_release_owner((PyObject*)self->manager_ctx);
        free(self);
    }

    /* An unconsumed capsule still owns its tensor; a consumer renames it. */
    static void dlpack_ref_api_destroy_versioned(PyObject* capsule) {
        if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
            DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)PyCapsule_GetPointer(capsule, "dltensor_versioned");
            if (m->deleter) m->deleter(m);
        }
    }

    static void dlpack_ref_api_destroy_legacy(PyObject* capsule) {
        if (PyCapsule_IsValid(capsule, "dltensor")) {
            DLManagedTensor* m = (DLManagedTensor*)PyCapsule_GetPointer(capsule, "dltensor");
            if (m->deleter) m->deleter(m);
        }
    }

    /* Copy t's metadata into `into` with shape and strides in `storage`
       (2 * ndim int64); NULL strides become row-major ones. */
    static void dlpack_ref_api_copy_tensor(DLTensor* into, const DLTensor* t, int64_t* storage) {
        int i;
        int64_t s = 1;
        *into = *t;
        into->shape = storage;
        into->strides = storage + t->ndim;
        for (i = 0; i < t->ndim; ++i) storage[i] = t->shape[i];
        for (i = t->ndim - 1; i >= 0; --i) {
            storage[t->ndim + i] = t->strides ? t->strides[i] : s;
            s *= t->shape[i] > 0 ? t->shape[i] : 1;
        }
    }

    static PyObject* dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags) {
        DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)malloc(
            sizeof(DLManagedTensorVersioned) + 2 * (size_t)t->ndim * sizeof(int64_t));
        PyObject* capsule;
        if (m == NULL) return PyErr_NoMemory();
        m->version.major = DLPACK_MAJOR_VERSION;
        m->version.minor = DLPACK_MINOR_VERSION;
        m->flags = flags;
        dlpack_ref_api_copy_tensor(&m->dl_tensor, t, (int64_t*)(m + 1));
        Py_INCREF(owner);
        m->manager_ctx = owner;
        m->deleter = dlpack_ref_api_delete_versioned;
        capsule = PyCapsule_New(m, "dltensor_versioned", dlpack_ref_api_destroy_versioned);
        if (capsule == NULL) dlpack_ref_api_delete_versioned(m);
        return capsule;
    }

    static PyObject* dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner) {
        DLManagedTensor* m = (DLManagedTensor*)malloc(
            sizeof(DLManagedTensor) + 2 * (size_t)t->ndim * sizeof(int64_t));
        PyObject* capsule;
        if (m == NULL) return PyErr_NoMemory();
        dlpack_ref_api_copy_tensor(&m->dl_tensor, t, (int64_t*)(m + 1));
        Py_INCREF(owner);
        m->manager_ctx = owner;
        m->deleter = dlpack_ref_api_delete_legacy;
        capsule = PyCapsule_New(m, "dltensor", dlpack_ref_api_destroy_legacy);
        if (capsule == NULL) dlpack_ref_api_delete_legacy(m);
        return capsule;
    }

    /* A capsule owning an existing managed tensor (deleted if that fails). */
    static PyObject* dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m) {
        PyObject* capsule = PyCapsule_New(m, "dltensor_versioned", dlpack_ref_api_destroy_versioned);
        if (capsule == NULL && m->deleter) m->deleter(m);
        return capsule;
    }

    static PyObject* dlpack_ref_api_wrap_legacy(DLManagedTensor* m) {
        PyObject* capsule = PyCapsule_New(m, "dltensor", dlpack_ref_api_destroy_legacy);
        if (capsule == NULL && m->deleter) m->deleter(m);
        return capsule;
    }
    """
    object dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags)
    object dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner)
    object dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m)
    object dlpack_ref_api_wrap_legacy(DLManagedTensor* m)


# A DLPack tensor taken from a capsule or a producer. The holder owns it:
# dlpack_ref_release runs its deleter exactly once.
cdef struct DLPackRefTensor:
    DLTensor* dl_tensor
    uint64_t flags              # DLPACK_FLAG_BITMASK_*; 0 for legacy
    void* managed               # DLManagedTensorVersioned* or DLManagedTensor*
    bint versioned


cdef enum:
    DLPACK_REF_MAX_NDIM = 64


# --- export: DLTensor + owner -> capsule -------------------------------------

cdef inline object dlpack_ref_export_versioned(const DLTensor* tensor, object owner, uint64_t flags):
    """A ``dltensor_versioned`` capsule (version 1.3, ``flags``) describing
    ``tensor``; its shape/strides are copied (NULL strides become row-major),
    ``owner`` is kept alive until the consumer's deleter call."""
    _dlpack_ref_check_export(tensor)
    return dlpack_ref_api_new_versioned(tensor, <PyObject*>owner, flags)


cdef inline object dlpack_ref_export_legacy(const DLTensor* tensor, object owner):
    """A legacy ``dltensor`` capsule (for consumers older than DLPack 1.0)."""
    _dlpack_ref_check_export(tensor)
    return dlpack_ref_api_new_legacy(tensor, <PyObject*>owner)


cdef inline int _dlpack_ref_check_export(const DLTensor* t) except -1:
    if t.ndim < 0 or t.ndim > DLPACK_REF_MAX_NDIM:
        raise ValueError(f"DLTensor.ndim={t.ndim} is out of range 0..{DLPACK_REF_MAX_NDIM}")
    if t.ndim > 0 and t.shape == NULL:
        raise ValueError(f"DLTensor.shape is NULL with ndim={t.ndim}")
    return 0


# --- import: capsule or producer -> owned tensor -----------------------------

cdef inline int dlpack_ref_take(object capsule, DLPackRefTensor* out) except -1:
    """Take ownership of the tensor of a ``dltensor_versioned`` or
    ``dltensor`` capsule (renamed ``used_*``) after checking it: major
    version 1, ndim 0..64, shape, non-negative extents, strides (NULL only
    before 1.2 or legacy), data (NULL only when empty). On failure after the
    capsule is taken the deleter has run once and the error is raised;
    ``out`` is filled only on success. The dtype is the caller's to check."""
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"expected a DLPack capsule, not {type(capsule).__name__}")
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    cdef DLPackRefTensor t
    if name != NULL and strcmp(name, b"dltensor_versioned") == 0:
        mv = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        PyCapsule_SetName(capsule, b"used_dltensor_versioned")
        t.dl_tensor = &mv.dl_tensor
        t.flags = mv.flags
        t.managed = mv
        t.versioned = True
        if mv.version.major != DLPACK_MAJOR_VERSION:
            major, minor = mv.version.major, mv.version.minor   # read before the deleter frees mv
            dlpack_ref_release(&t)
            raise BufferError(
                f"DLPack capsule has version {major}.{minor}; major version "
                f"{DLPACK_MAJOR_VERSION} is supported (its deleter was called)")
        _dlpack_ref_validate(&t, mv.version.minor < 2)
    elif name != NULL and strcmp(name, b"dltensor") == 0:
        ml = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        PyCapsule_SetName(capsule, b"used_dltensor")
        t.dl_tensor = &ml.dl_tensor
        t.flags = 0
        t.managed = ml
        t.versioned = False
        _dlpack_ref_validate(&t, True)
    elif name != NULL and (strcmp(name, b"used_dltensor_versioned") == 0 or strcmp(name, b"used_dltensor") == 0):
        raise BufferError("this DLPack capsule was already consumed; a capsule can be imported once")
    else:
        shown = "NULL" if name == NULL else repr((<bytes>name).decode("utf-8", "replace"))
        raise BufferError(f"a capsule named {shown} is not a DLPack capsule; "
                          "expected 'dltensor_versioned' or 'dltensor'")
    out[0] = t
    return 0


cdef inline int _dlpack_ref_validate(DLPackRefTensor* t, bint null_strides_ok) except -1:
    """Check t's DLTensor; on failure release t (once) and raise BufferError."""
    cdef DLTensor* d = t.dl_tensor
    cdef int i
    cdef bint empty = False
    problem = None
    if d.ndim < 0 or d.ndim > DLPACK_REF_MAX_NDIM:
        problem = f"DLTensor.ndim={d.ndim} is out of range 0..{DLPACK_REF_MAX_NDIM}"
    elif d.ndim > 0 and d.shape == NULL:
        problem = f"DLTensor.shape is NULL with ndim={d.ndim}"
    elif d.ndim > 0 and d.strides == NULL and not null_strides_ok:
        problem = "DLTensor.strides is NULL with ndim > 0, which DLPack >= 1.2 forbids"
    else:
        for i in range(d.ndim):
            if d.shape[i] < 0:
                problem = f"DLTensor.shape[{i}]={d.shape[i]} is negative"
                break
            empty = empty or d.shape[i] == 0
        if problem is None and d.data == NULL and not empty:
            problem = "DLTensor.data is NULL for a non-empty tensor"
    if problem is not None:
        dlpack_ref_release(t)
        raise BufferError(problem + " (the tensor's deleter was called)")
    return 0


cdef inline void dlpack_ref_release(DLPackRefTensor* t) noexcept nogil:
    """Run the deleter of a taken tensor (once: the holder is cleared)."""
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    if t.managed == NULL:
        return
    if t.versioned:
        mv = <DLManagedTensorVersioned*>t.managed
        if mv.deleter != NULL:
            mv.deleter(mv)
    else:
        ml = <DLManagedTensor*>t.managed
        if ml.deleter != NULL:
            ml.deleter(ml)
    t.managed = NULL
    t.dl_tensor = NULL


cdef inline const DLPackExchangeAPI* dlpack_ref_exchange_api(object tp) except? NULL:
    """The DLPack 1.x exchange table a type publishes as
    ``__dlpack_c_exchange_api__`` (walking ``prev_api`` from another major
    version), or NULL when it has none usable. Not cached: callers on a hot
    path keep the result per type."""
    cap = getattr(tp, "__dlpack_c_exchange_api__", None)
    if cap is None or not PyCapsule_IsValid(cap, b"dlpack_exchange_api"):
        return NULL
    cdef DLPackExchangeAPIHeader* header = <DLPackExchangeAPIHeader*>PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
    while header != NULL and header.version.major != DLPACK_MAJOR_VERSION:
        header = header.prev_api
    return <const DLPackExchangeAPI*>header


cdef inline int dlpack_ref_import(object obj, DLPackRefTensor* out) except -1:
    """Take the tensor of any DLPack producer or capsule, zero-copy, with no
    synchronization asked for (CPU data, or data whose stream ordering the
    caller handles). The exchange table of obj's type is used when it has
    one, else ``obj.__dlpack__(max_version=(1, 3))`` (``obj.__dlpack__()``
    for producers older than 1.0)."""
    cdef const DLPackExchangeAPI* api
    cdef DLManagedTensorVersioned* m = NULL
    if PyCapsule_CheckExact(obj):
        return dlpack_ref_take(obj, out)
    api = dlpack_ref_exchange_api(type(obj))
    if api != NULL and api.managed_tensor_from_py_object_no_sync != NULL:
        api.managed_tensor_from_py_object_no_sync(<void*>obj, &m)
        if m == NULL:
            raise BufferError(f"{type(obj).__name__}'s DLPack exchange API returned no tensor and no error")
        # Through a capsule, so that it is validated like any other (and
        # deleted once on failure).
        return dlpack_ref_take(dlpack_ref_api_wrap_versioned(m), out)
    try:
        capsule = obj.__dlpack__(max_version=(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION))
    except TypeError:
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"expected a DLPack producer or capsule, not {type(obj).__name__}") from None
        capsule = obj.__dlpack__()
    except AttributeError:
        raise TypeError(f"expected a DLPack producer or capsule, not {type(obj).__name__}") from None
    return dlpack_ref_take(capsule, out)


# --- dlpack_ref.Array, through its exchange table ----------------------------

cdef inline const DLPackExchangeAPI* _dlpack_ref_array_api() except NULL:
    from dlpack_ref import Array
    cdef const DLPackExchangeAPI* api = dlpack_ref_exchange_api(Array)
    if api == NULL:
        raise ImportError("dlpack_ref.Array publishes no usable DLPack exchange API")
    return api


cdef inline object dlpack_ref_to_array(DLPackRefTensor* t):
    """A ``dlpack_ref.Array`` owning the taken tensor ``t`` (zero-copy; ``t``
    is emptied: the Array runs the deleter). Needs dlpack-ref installed."""
    cdef const DLPackExchangeAPI* api = _dlpack_ref_array_api()
    cdef void* out = NULL
    cdef DLManagedTensorVersioned* m
    if t.managed == NULL:
        raise ValueError("this DLPackRefTensor holds no tensor (released or moved)")
    if not t.versioned:
        # The table takes versioned tensors only; a legacy one goes through
        # a capsule, which dlpack-ref reads as well.
        from dlpack_ref import from_dlpack
        capsule = dlpack_ref_api_wrap_legacy(<DLManagedTensor*>t.managed)
        t.managed = NULL
        t.dl_tensor = NULL
        return from_dlpack(capsule)
    m = <DLManagedTensorVersioned*>t.managed
    t.managed = NULL
    t.dl_tensor = NULL
    api.managed_tensor_to_py_object_no_sync(m, &out)   # owns m from here on
    array = <object>out   # a new reference of ours, plus the one handed over
    Py_DECREF(array)
    return array


cdef inline int dlpack_ref_view(object array, DLTensor* out) except -1:
    """Borrow the DLTensor of a ``dlpack_ref.Array`` (no allocation, valid
    while the Array lives) through its table."""
    return _dlpack_ref_array_api().dltensor_from_py_object_no_sync(<void*>array, out)

