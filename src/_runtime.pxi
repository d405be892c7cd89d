# C-level helpers with one job each: aligned host memory, releasing a Python
# owner from a deleter that may run on any thread or after finalization, the
# deleters and capsule destructors of our exports, and strided copies.

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #include <stdint.h>
    #if defined(_WIN32)
    #include <malloc.h>
    static void* dlref_aligned_alloc(size_t n) { return _aligned_malloc(n ? n : 1, 256); }
    static void dlref_aligned_free(void* p) { _aligned_free(p); }
    #else
    static void* dlref_aligned_alloc(size_t n) {
        void* p = NULL;
        if (posix_memalign(&p, 256, n ? n : 1) != 0) return NULL;
        return p;
    }
    static void dlref_aligned_free(void* p) { free(p); }
    #endif

    static int dlref_is_finalizing(void) {
    #if PY_VERSION_HEX >= 0x030D0000
        return Py_IsFinalizing();
    #else
        return _Py_IsFinalizing();
    #endif
    }

    /* Drop one reference to `obj` from code that may hold no thread state.
       A deleter can run on a thread without the GIL, or after the interpreter
       has finalized; in the last case touching the object would crash, so it
       is leaked: the process is ending and the OS reclaims the memory. */
    static void dlref_release_owner(PyObject* obj) {
        if (obj == NULL || !Py_IsInitialized()) return;
        if (PyGILState_Check()) { Py_DECREF(obj); return; }
        if (dlref_is_finalizing()) return;
        PyGILState_STATE st = PyGILState_Ensure();
        Py_DECREF(obj);
        PyGILState_Release(st);
    }

    /* Copy an n-d strided array of `itemsize`-byte elements into another;
       strides in bytes. Dimensions are walked with counters (no recursion);
       the innermost dimension becomes one memcpy when both sides are dense
       along it. */
    static void dlref_strided_copy(char* dst, const int64_t* dst_strides,
                                   const char* src, const int64_t* src_strides,
                                   const int64_t* shape, int ndim, size_t itemsize) {
        int64_t index[64];
        int64_t total = 1;
        int d;
        for (d = 0; d < ndim; ++d) { total *= shape[d]; index[d] = 0; }
        if (total == 0) return;
        if (ndim == 0) { memcpy(dst, src, itemsize); return; }
        int inner = ndim - 1;
        int64_t n_inner = shape[inner];
        int dense = (dst_strides[inner] == (int64_t)itemsize && src_strides[inner] == (int64_t)itemsize);
        int64_t rows = total / (n_inner ? n_inner : 1);
        for (int64_t r = 0; r < rows; ++r) {
            int64_t doff = 0, soff = 0;
            for (d = 0; d < inner; ++d) { doff += index[d] * dst_strides[d]; soff += index[d] * src_strides[d]; }
            if (dense) {
                memcpy(dst + doff, src + soff, (size_t)n_inner * itemsize);
            } else {
                char* dp = dst + doff; const char* sp = src + soff;
                for (int64_t i = 0; i < n_inner; ++i) {
                    memcpy(dp, sp, itemsize);
                    dp += dst_strides[inner]; sp += src_strides[inner];
                }
            }
            for (d = inner - 1; d >= 0; --d) {
                if (++index[d] < shape[d]) break;
                index[d] = 0;
            }
        }
    }
    """
    void* dlref_aligned_alloc(size_t n) nogil
    void dlref_aligned_free(void* p) nogil
    void dlref_release_owner(PyObject* obj) nogil
    void dlref_strided_copy(char* dst, const int64_t* dst_strides, const char* src,
                            const int64_t* src_strides, const int64_t* shape, int ndim,
                            size_t itemsize) nogil


cdef enum:
    # The most dimensions accepted (NumPy 2 allows as many).
    MAX_NDIM = 64
    # ndim up to this many keeps shape and strides inside the Array (no malloc).
    SMALL_NDIM = 4

cdef const char* NAME_VERSIONED = b"dltensor_versioned"
cdef const char* NAME_LEGACY = b"dltensor"
cdef const char* NAME_USED_VERSIONED = b"used_dltensor_versioned"
cdef const char* NAME_USED_LEGACY = b"used_dltensor"

cdef uint64_t FLAG_READ_ONLY = DLPACK_FLAG_BITMASK_READ_ONLY
cdef uint64_t FLAG_IS_COPIED = DLPACK_FLAG_BITMASK_IS_COPIED
cdef uint64_t FLAG_SUBBYTE_PADDED = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED


# --- deleters and capsule destructors of our exports -----------------------
# manager_ctx holds one reference to the exported Array; the block itself is
# the single allocation made by _export.

# The blocks come from pymalloc (PyMem_Malloc: small, made with the GIL held,
# and several times cheaper than malloc), so they are freed with the GIL too:
# the deleter takes it when it runs on a thread without it, and after
# finalization leaks the block along with the owner reference.
cdef extern from *:
    """
    static void dlref_release_block(PyObject* owner, void* block) {
        if (!Py_IsInitialized()) return;
        if (PyGILState_Check()) { Py_XDECREF(owner); PyMem_Free(block); return; }
        if (dlref_is_finalizing()) return;
        PyGILState_STATE st = PyGILState_Ensure();
        Py_XDECREF(owner);
        PyMem_Free(block);
        PyGILState_Release(st);
    }
    static void dlref_delete_versioned(DLManagedTensorVersioned* self) {
        dlref_release_block((PyObject*)self->manager_ctx, self);
    }
    static void dlref_delete_legacy(DLManagedTensor* self) {
        dlref_release_block((PyObject*)self->manager_ctx, self);
    }

    /* A capsule that was never consumed still owns its tensor; the name
       tells (a consumer renames it used_* when it takes ownership). These
       destructors are attached to our exports only, so an unconsumed one
       still holds our block: it is released directly, the GIL being held
       by whoever destroys a capsule. */
    static void dlref_destroy_capsule(PyObject* capsule, const char* name, int versioned) {
        const char* actual = PyCapsule_GetName(capsule);
        if (actual == NULL || strcmp(actual, name) != 0) return;
        void* block = PyCapsule_GetPointer(capsule, actual);
        void* owner = versioned ? ((DLManagedTensorVersioned*)block)->manager_ctx
                                : ((DLManagedTensor*)block)->manager_ctx;
        Py_XDECREF((PyObject*)owner);
        PyMem_Free(block);
    }
    static void dlref_destroy_versioned_capsule(PyObject* capsule) {
        dlref_destroy_capsule(capsule, "dltensor_versioned", 1);
    }
    static void dlref_destroy_legacy_capsule(PyObject* capsule) {
        dlref_destroy_capsule(capsule, "dltensor", 0);
    }

    /* The capsule of an export; if it cannot be made, the block is deleted
       (no Cython try block on the hot path: it would save and restore the
       exception state on every call). */
    static PyObject* dlref_versioned_capsule(DLManagedTensorVersioned* m) {
        PyObject* capsule = PyCapsule_New(m, "dltensor_versioned", dlref_destroy_versioned_capsule);
        if (capsule == NULL) m->deleter(m);
        return capsule;
    }
    static PyObject* dlref_legacy_capsule(DLManagedTensor* m) {
        PyObject* capsule = PyCapsule_New(m, "dltensor", dlref_destroy_legacy_capsule);
        if (capsule == NULL) m->deleter(m);
        return capsule;
    }
    """
    void* PyMem_Malloc(size_t n)
    void _delete_versioned "dlref_delete_versioned"(DLManagedTensorVersioned* self) noexcept nogil
    void _delete_legacy "dlref_delete_legacy"(DLManagedTensor* self) noexcept nogil
    object _versioned_capsule "dlref_versioned_capsule"(DLManagedTensorVersioned* m)
    object _legacy_capsule "dlref_legacy_capsule"(DLManagedTensor* m)


# --- errors ----------------------------------------------------------------

class CopyForbiddenError(BufferError, ValueError):
    """Raised when ``copy=False`` and only a copy could satisfy the request.

    It is both a BufferError and a ValueError because the array API standard
    names both for this case (``__dlpack__`` says BufferError, ``from_dlpack``
    and ``asarray`` say ValueError); catching either works.
    """


# --- CUDA, loaded only when a CUDA device is involved ------------------------

cdef object _cuda_module = None

cdef object _cuda():
    """The dlpack_ref.cuda module; its import names what is missing
    (cuda-python, the driver, or a device) when CUDA cannot be used."""
    global _cuda_module
    if _cuda_module is None:
        from dlpack_ref import cuda as mod
        mod.require()
        _cuda_module = mod
    return _cuda_module


# Device types whose memory dlpack-ref can hold. Others are refused at import
# with BufferError (no code here could ever read them).
cdef inline bint _supported_device_type(int32_t t) noexcept nogil:
    return t == kDLCPU or t == kDLCUDA or t == kDLCUDAHost or t == kDLCUDAManaged


cdef inline bint _host_accessible(int32_t t) noexcept nogil:
    return t == kDLCPU or t == kDLCUDAHost or t == kDLCUDAManaged


cdef inline bint _cuda_family(int32_t t) noexcept nogil:
    return t == kDLCUDA or t == kDLCUDAHost or t == kDLCUDAManaged


# --- hooks for dlpack_ref.testing --------------------------------------------
# The hand-built capsules of dlpack_ref.testing need a deleter and a capsule
# destructor that run Python code. A ctypes callback cannot be used for them:
# consumers (this one included) destroy capsules while an exception is being
# raised, and Python code run with that exception pending fails and swallows
# it. These C trampolines save and restore the pending exception around the
# hook, take the GIL themselves, and do nothing once Python is finalizing.

cdef extern from *:
    """
    static PyObject* dlref_testing_hook = NULL;

    static void dlref_testing_dispatch(int kind, void* address) {
        if (!Py_IsInitialized()) return;
        if (!PyGILState_Check() && dlref_is_finalizing()) return;
        PyGILState_STATE st = PyGILState_Ensure();
    #if PY_VERSION_HEX >= 0x030C0000
        PyObject* pending = PyErr_GetRaisedException();
    #else
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
    #endif
        if (dlref_testing_hook != NULL) {
            PyObject* r = PyObject_CallFunction(dlref_testing_hook, "iN", kind,
                                                PyLong_FromVoidPtr(address));
            if (r == NULL) PyErr_WriteUnraisable(dlref_testing_hook);
            Py_XDECREF(r);
        }
    #if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(pending);
    #else
        PyErr_Restore(type, value, traceback);
    #endif
        PyGILState_Release(st);
    }
    static void dlref_testing_deleter(void* self) { dlref_testing_dispatch(0, self); }
    static void dlref_testing_capsule_destructor(PyObject* capsule) { dlref_testing_dispatch(1, capsule); }
    static void dlref_testing_set_hook(PyObject* hook) {
        PyObject* old = dlref_testing_hook;
        Py_XINCREF(hook);
        dlref_testing_hook = hook;
        Py_XDECREF(old);
    }
    """
    void dlref_testing_deleter(void* self)
    void dlref_testing_capsule_destructor(object capsule)
    void dlref_testing_set_hook(object hook)


def _testing_trampolines(hook):
    """Install ``hook(kind, address)`` and return the C addresses of
    ``(deleter, capsule_destructor)`` that call it: kind 0 with the managed
    tensor's address from the deleter, kind 1 with the capsule's address from
    the destructor. For dlpack_ref.testing only; one hook per process."""
    dlref_testing_set_hook(hook)
    return (<uintptr_t>&dlref_testing_deleter, <uintptr_t>&dlref_testing_capsule_destructor)
