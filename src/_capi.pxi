# C helpers: aligned host memory, strided copies and dtype conversions (the
# kernels of src/dlref_kernels.h), and the C trampolines of dlpack_ref.testing.

# Rounding rules: docs/semantics.md, "Conversions".
cdef extern from "dlref_kernels.h":
    void* dlref_aligned_alloc(size_t n) nogil
    void dlref_aligned_free(void* p) nogil
    int dlref_coalesce(int ndim, const int64_t* shape, const int64_t* s1, const int64_t* s2,
                       int64_t* oshape, int64_t* o1, int64_t* o2) nogil
    int dlref_strided_copy(char* dst, const int64_t* dst_strides, const char* src,
                           const int64_t* src_strides, const int64_t* shape, int ndim,
                           size_t itemsize, int threads, bint fresh) nogil
    int dlref_type_id(int code, int bits, int lanes) nogil
    int64_t dlref_convert(char* dst, const int64_t* dst_strides, int dt, const char* src,
                          const int64_t* src_strides, int st, int src_bits, const int64_t* shape,
                          int ndim, int threads) nogil
    int64_t dlref_pool_grain
    int dlref_wide_dense
    int dlref_seq_shape(object obj, int64_t* shape) except -1
    int dlref_seq_check(object o, int depth, int ndim, const int64_t* shape, int* kind) except -1
    int dlref_other_leaf_kind(object o) except -1
    int dlref_seq_fill(object obj, int ndim, char* data, int tid, const char* name) except -1
    object dlref_element_object(int t, const char* p)
    object dlref_tolist(const char* data, const int64_t* strides, const int64_t* shape, int ndim, int t)
    ctypedef struct dlref_minifloat:
        const char* name
        int exp_bits, man_bits, bias, style
    const dlref_minifloat* dlref_minifloats
    const char* const* dlref_style_names
    enum:
        DLREF_KIND_NONE, DLREF_KIND_OF_BOOL, DLREF_KIND_OF_INT, DLREF_KIND_OF_FLOAT, DLREF_KIND_OF_COMPLEX,
        DLREF_KIND_OTHER


# --- the worker pool of copies and conversions (src/dlref_pool.h) -----------

cdef extern from "dlref_pool.h":
    enum: DLREF_POOL_MAX_THREADS
    int dlref_pool_get_size() nogil
    void dlref_pool_set_size(int n) nogil
    int dlref_pool_available_cores() nogil
    int dlref_pool_workers_started() nogil
    void dlref_atomic_add(int64_t* total, int64_t n) nogil

_NUM_THREADS_ENV = "DLPACK_REF_NUM_THREADS"


cdef int _threads_from_env() except 0:
    """The thread count DLPACK_REF_NUM_THREADS asks for, else the cores
    available to the process. A value that is not a whole number from 1 to
    DLREF_POOL_MAX_THREADS warns (RuntimeWarning) and is ignored: an error
    would fail every later copy for a setting made outside the program."""
    import os
    cdef int default = dlref_pool_available_cores()
    # ASCII digits and nothing else, ASCII whitespace around them: int()
    # alone would also take a sign, underscores and any Unicode digits.
    text = os.environ.get(_NUM_THREADS_ENV, "").strip(" \t\n\r\f\v")
    if not text:
        return default
    n = int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= n <= DLREF_POOL_MAX_THREADS:
        import warnings
        warnings.warn(f"{_NUM_THREADS_ENV}={text!r} is not a whole number from 1 to {DLREF_POOL_MAX_THREADS}; "
                      f"using the {default} core(s) available to this process", RuntimeWarning, stacklevel=3)
        return default
    return n


cdef inline int _pool_threads() except 0:
    """The threads a large copy or conversion may use: the setting, read from
    the environment the first time it is needed (never at import)."""
    cdef int n = dlref_pool_get_size()
    if n == 0:
        n = _threads_from_env()
        dlref_pool_set_size(n)
    return n


def set_num_threads(n) -> None:
    """Use at most ``n`` threads (``1 <= n <= 256``) for each host copy or
    dtype conversion large enough to share out (docs/api.md, "Threads")."""
    if type(n) is bool or not isinstance(n, int):
        raise TypeError(f"set_num_threads expects an int from 1 to {DLREF_POOL_MAX_THREADS}, got {type(n).__name__} {n!r}")
    if not 1 <= n <= DLREF_POOL_MAX_THREADS:
        raise ValueError(f"set_num_threads expects an int from 1 to {DLREF_POOL_MAX_THREADS}, got {n}")
    dlref_pool_set_size(<int>n)


def get_num_threads() -> int:
    """The most threads a host copy or dtype conversion uses: set_num_threads,
    else DLPACK_REF_NUM_THREADS, else the cores available to the process."""
    return _pool_threads()


def _set_pool_grain(nbytes):
    """Set the bytes each part of a parallel copy moves at least (the
    measured threshold by default); returns the previous value. For
    benchmarks/pool_threshold.py and the tests that split small arrays."""
    global dlref_pool_grain
    previous = dlref_pool_grain
    if nbytes < 1:
        raise ValueError(f"pool grain must be at least 1 byte, got {nbytes}")
    dlref_pool_grain = nbytes
    return previous


def _set_wide_dense(enabled):
    """Whether dense conversions between the native types may take their
    AVX2 / AVX-512 loops where the CPU has them (the default); returns the
    previous setting. For the tests of the baseline loops."""
    global dlref_wide_dense
    previous = bool(dlref_wide_dense)
    dlref_wide_dense = 1 if enabled else 0
    return previous


def _pool_workers_started():
    """How many pool workers exist in this process (tests)."""
    return dlref_pool_workers_started()


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
