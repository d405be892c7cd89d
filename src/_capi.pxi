# C-only helpers: aligned host memory and strided copies (no Python objects,
# callable without the GIL), and the C trampolines of dlpack_ref.testing.

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
    void dlref_strided_copy(char* dst, const int64_t* dst_strides, const char* src,
                            const int64_t* src_strides, const int64_t* shape, int ndim,
                            size_t itemsize) nogil


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
        if (!PyGILState_Check() && dlpack_ref_api_is_finalizing()) return;
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
