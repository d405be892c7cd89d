/* --- fast calls: interned names, memoized method and table lookups ---------
 * The consumer's hot path (and dlpack-ref's core, which calls these same
 * functions) looks nothing up by C string and builds no keyword dict. */

/* The Python names and constants of the protocol, interned once per
 * translation unit (borrowed references; NULL with an error set). Made
 * under the GIL, or, free-threaded, under a lock. */
typedef struct dlpack_ref_names {
    PyObject* dlpack;            /* "__dlpack__" */
    PyObject* dlpack_device;     /* "__dlpack_device__" */
    PyObject* exchange_api;      /* "__dlpack_c_exchange_api__" */
    PyObject* stream;
    PyObject* max_version;
    PyObject* dl_device;
    PyObject* copy;
    PyObject* device;
    PyObject* version;           /* (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION) */
    PyObject* kw_max_version;    /* ("max_version",) */
} dlpack_ref_names;

/* The names and, after them, the keyword names of every __dlpack__ request,
 * made once: index bit 0 max_version, 1 stream, 2 dl_device, 3 copy, in
 * that order ([0] NULL). dlpack_ref_protocol_names points at `names`. */
typedef struct dlpack_ref_priv_names_block {
    dlpack_ref_names names;
    PyObject* kw_request[16];
} dlpack_ref_priv_names_block;

#define DLPACK_REF_PRIV_KW_VERSION 1
#define DLPACK_REF_PRIV_KW_STREAM 2
#define DLPACK_REF_PRIV_KW_DL_DEVICE 4
#define DLPACK_REF_PRIV_KW_COPY 8


static inline void dlpack_ref_priv_clear_names(dlpack_ref_priv_names_block* b) {
    dlpack_ref_names* n = &b->names;
    Py_CLEAR(n->dlpack); Py_CLEAR(n->dlpack_device); Py_CLEAR(n->exchange_api); Py_CLEAR(n->stream);
    Py_CLEAR(n->max_version); Py_CLEAR(n->dl_device); Py_CLEAR(n->copy); Py_CLEAR(n->device); Py_CLEAR(n->version);
    Py_CLEAR(n->kw_max_version);
    {
        int i;
        for (i = 0; i < 16; ++i) Py_CLEAR(b->kw_request[i]);
    }
}

/* The tuple of the keyword names in `mask` (DLPACK_REF_PRIV_KW_*), in the
 * order of the bits (NULL with an error set). */
static inline PyObject* dlpack_ref_priv_kw_tuple(const dlpack_ref_names* n, int mask) {
    PyObject* keys[4];
    PyObject* t;
    Py_ssize_t k = 0, i;
    if (mask & DLPACK_REF_PRIV_KW_VERSION) keys[k++] = n->max_version;
    if (mask & DLPACK_REF_PRIV_KW_STREAM) keys[k++] = n->stream;
    if (mask & DLPACK_REF_PRIV_KW_DL_DEVICE) keys[k++] = n->dl_device;
    if (mask & DLPACK_REF_PRIV_KW_COPY) keys[k++] = n->copy;
    if ((t = PyTuple_New(k)) == NULL) return NULL;
    for (i = 0; i < k; ++i) { Py_INCREF(keys[i]); DLPACK_REF_TUPLE_SET(t, i, keys[i]); }
    return t;
}

static inline int dlpack_ref_priv_make_names(dlpack_ref_priv_names_block* b) {
    dlpack_ref_names* n = &b->names;
    n->dlpack = PyUnicode_InternFromString("__dlpack__");
    n->dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    n->exchange_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
    n->stream = PyUnicode_InternFromString("stream");
    n->max_version = PyUnicode_InternFromString("max_version");
    n->dl_device = PyUnicode_InternFromString("dl_device");
    n->copy = PyUnicode_InternFromString("copy");
    n->device = PyUnicode_InternFromString("device");
    n->version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
    n->kw_max_version = n->max_version == NULL ? NULL : PyTuple_Pack(1, n->max_version);
    if (n->dlpack && n->dlpack_device && n->exchange_api && n->stream && n->max_version && n->dl_device && n->copy
            && n->device && n->version && n->kw_max_version) {
        int mask;
        for (mask = 1; mask < 16; ++mask)
            if ((b->kw_request[mask] = dlpack_ref_priv_kw_tuple(n, mask)) == NULL) break;
        if (mask == 16) return 0;
    }
    dlpack_ref_priv_clear_names(b);
    return -1;
}

static inline const dlpack_ref_names* dlpack_ref_protocol_names(void) {
#ifdef Py_GIL_DISABLED
    /* No lock: one made while another thread held it would stay held in a
       child forked then. Each thread that finds no names makes its own and
       offers them in one compare-and-swap; the first offer is published,
       the others are dropped (the strings are interned: equal either way). */
    static dlpack_ref_priv_names_block* published = NULL;
    dlpack_ref_priv_names_block *mine, *seen = NULL;
    const dlpack_ref_priv_names_block* block =
        (const dlpack_ref_priv_names_block*)_Py_atomic_load_ptr_acquire(&published);
    if (block != NULL) return &block->names;
    mine = (dlpack_ref_priv_names_block*)PyMem_RawCalloc(1, sizeof(dlpack_ref_priv_names_block));
    if (mine == NULL) { PyErr_NoMemory(); return NULL; }
    if (dlpack_ref_priv_make_names(mine) < 0) { PyMem_RawFree(mine); return NULL; }
    if (_Py_atomic_compare_exchange_ptr(&published, &seen, mine)) return &mine->names;
    dlpack_ref_priv_clear_names(mine);
    PyMem_RawFree(mine);
    return &seen->names;
#else
    static dlpack_ref_priv_names_block block;
    static int ready = 0;
    if (!ready) {
        if (dlpack_ref_priv_make_names(&block) < 0) return NULL;
        ready = 1;
    }
    return &block.names;
#endif
}

/* Memos of per-type lookups. CPython renews a type's version tag on every
 * change to it or a base, so an equal nonzero tag means the same lookup
 * result. _PyType_Lookup and tp_version_tag are CPython internals, so the
 * memos are compiled only for the versions dlpack-ref's CI runs them on
 * (3.11 to 3.15; tests/test_capsules.py checks that a changed type, an
 * instance attribute and __getattr__ are all honoured) and only in GIL
 * builds, where the memo is written under the GIL; elsewhere every call
 * looks up afresh. */
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API) && PY_VERSION_HEX >= 0x030B0000 \
    && PY_VERSION_HEX < 0x03100000
#define DLPACK_REF_TYPE_MEMO 1
#endif

/* The last type a method was called on and what its type gave. Zero-init. */
typedef struct dlpack_ref_method_memo {
    PyTypeObject* type;
    unsigned int tag;
    PyObject* method;
} dlpack_ref_method_memo;

/* The limited API has vectorcall from 3.12 only (Py_LIMITED_API and the
 * headers both 0x030C0000 or later). Below that a method call is
 * getattr(args[0], name), then PyObject_Call with a tuple of the positional
 * arguments and a dict of the keyword ones, both built per call. */
#if defined(Py_LIMITED_API) && (Py_LIMITED_API + 0 < 0x030C0000 || PY_VERSION_HEX < 0x030C0000)
#define DLPACK_REF_PRIV_NO_VECTORCALL 1
static inline PyObject* dlpack_ref_priv_call_method_tuple(PyObject* name, PyObject* const* args, size_t nargs,
                                                          PyObject* kwnames) {
    Py_ssize_t i, npos = (Py_ssize_t)nargs - 1, nk = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    PyObject *m, *t = NULL, *kw = NULL, *r = NULL;
    if ((m = PyObject_GetAttr(args[0], name)) == NULL) return NULL;
    if ((t = PyTuple_New(npos)) == NULL) goto done;
    for (i = 0; i < npos; ++i) { Py_INCREF(args[1 + i]); PyTuple_SetItem(t, i, args[1 + i]); }
    if (nk > 0) {
        if ((kw = PyDict_New()) == NULL) goto done;
        for (i = 0; i < nk; ++i)
            if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[nargs + (size_t)i]) < 0) goto done;
    }
    r = PyObject_Call(m, t, kw);
done:
    Py_XDECREF(kw);
    Py_XDECREF(t);
    Py_DECREF(m);
    return r;
}
#endif

#ifdef DLPACK_REF_TYPE_MEMO
/* The memo's update and the call of an attribute that is no method stay out
 * of line, so that the common call (a method, its type's memo found) stays
 * small enough to be inlined where it is made. */
#if defined(__GNUC__) || defined(__clang__)
#define DLPACK_REF_PRIV_OUT_OF_LINE static __attribute__((noinline, unused))
#elif defined(_MSC_VER)
#define DLPACK_REF_PRIV_OUT_OF_LINE static __declspec(noinline)
#else
#define DLPACK_REF_PRIV_OUT_OF_LINE static inline
#endif

/* The attribute `m` that x's type holds, when it is no method descriptor
 * (those take x as their first argument), called as x.name(*args[1:nargs],
 * kwnames...) would call it when x has no instance dict: a descriptor (a
 * slot of __slots__ holding a bound method, a property) through its
 * __get__, any other object as it is. Called on args + 1 with
 * PY_VECTORCALL_ARGUMENTS_OFFSET, as PyObject_VectorcallMethod calls it, so
 * that a bound method can put its self in args[0] for the call, with no
 * array of its own, and put x back (a Python bound method is called so
 * here). */
DLPACK_REF_PRIV_OUT_OF_LINE
PyObject* dlpack_ref_priv_call_type_attribute(PyObject* m, PyTypeObject* tp, PyObject* const* args, size_t nargs,
                                              PyObject* kwnames) {
    descrgetfunc get = Py_TYPE(m)->tp_descr_get;
    PyObject *callable, *r;
    if (get == NULL) {
        callable = m;
        Py_INCREF(callable);
    } else if ((callable = get(m, args[0], (PyObject*)tp)) == NULL) {
        return NULL;
    }
    if (PyMethod_Check(callable)) {   /* exactly a bound method */
        /* What the bound method's own call does, one call less: its
           function on (its self, args[1:]), self in args[0] meanwhile. */
        PyObject** slot = (PyObject**)args;
        PyObject* x = slot[0];
        slot[0] = PyMethod_GET_SELF(callable);
        r = PyObject_Vectorcall(PyMethod_GET_FUNCTION(callable), args, nargs, kwnames);
        slot[0] = x;
    } else {
        r = PyObject_Vectorcall(callable, args + 1, (nargs - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
    }
    Py_DECREF(callable);
    return r;
}

/* `memo` set to tp's attribute `name` (borrowed; NULL, with nothing set,
 * where x.name may be other than what the type holds: a type with its own
 * attribute lookup or instances with a __dict__, or no such attribute). */
DLPACK_REF_PRIV_OUT_OF_LINE
PyObject* dlpack_ref_priv_method_memo_update(dlpack_ref_method_memo* memo, PyTypeObject* tp, PyObject* name) {
    PyObject *m, *old_method, *old_type;
    if (tp->tp_getattro != PyObject_GenericGetAttr || tp->tp_dictoffset != 0
            || PyType_HasFeature(tp, Py_TPFLAGS_MANAGED_DICT))
        return NULL;
    m = _PyType_Lookup(tp, name);   /* borrowed; gives tp a version tag */
    if (m == NULL || tp->tp_version_tag == 0) return NULL;
    old_method = memo->method;
    old_type = (PyObject*)memo->type;
    Py_INCREF(m);
    Py_INCREF(tp);
    memo->type = tp;
    memo->tag = tp->tp_version_tag;
    memo->method = m;
    Py_XDECREF(old_method);
    Py_XDECREF(old_type);
    return m;
}
#endif

/* args[0].name(*args[1:nargs], kwnames...) as PyObject_VectorcallMethod
 * calls it (nargs counts args[0]; kwnames NULL or a tuple, their values
 * after the positional ones), with the attribute found on the type kept
 * in `memo` for as long as the type is unchanged. Only types whose
 * attribute lookup is the generic one and whose instances have no __dict__
 * are memoized: then x.name is what the type's attribute gives for x,
 * whatever kind of attribute it is.
 * args[0] may be replaced during the call and is put back after it (as
 * PY_VECTORCALL_ARGUMENTS_OFFSET allows): `args` is writable memory. */
static inline PyObject* dlpack_ref_call_method(dlpack_ref_method_memo* memo, PyObject* name, PyObject* const* args,
                                               size_t nargs, PyObject* kwnames) {
#ifdef DLPACK_REF_TYPE_MEMO
    PyTypeObject* tp = Py_TYPE(args[0]);
    PyObject *m, *r;
    if (tp == memo->type && memo->tag != 0 && tp->tp_version_tag == memo->tag) m = memo->method;
    else if ((m = dlpack_ref_priv_method_memo_update(memo, tp, name)) == NULL)
        return PyObject_VectorcallMethod(name, (PyObject* const*)args, nargs, kwnames);
    Py_INCREF(m);   /* the call may change the type and drop the memo's reference */
    if (PyType_HasFeature(Py_TYPE(m), Py_TPFLAGS_METHOD_DESCRIPTOR)) r = PyObject_Vectorcall(m, args, nargs, kwnames);
    else r = dlpack_ref_priv_call_type_attribute(m, tp, args, nargs, kwnames);
    Py_DECREF(m);
    return r;
#elif defined(DLPACK_REF_PRIV_NO_VECTORCALL)
    (void)memo;
    return dlpack_ref_priv_call_method_tuple(name, args, nargs, kwnames);
#else
    (void)memo;
    return PyObject_VectorcallMethod(name, (PyObject* const*)args, nargs, kwnames);
#endif
}

/* Whether a __dlpack_device__ answer is a (device_type, device_id) tuple of
 * ints equal to `device`; 0 for anything else, which the full check then
 * reads (no error is left set). */
static inline int dlpack_ref_device_answer_is(PyObject* answer, DLDevice device) {
    PyObject *t, *i;
    int overflow = 0;
    long long tv, iv;
    if (!PyTuple_CheckExact(answer) || DLPACK_REF_TUPLE_SIZE(answer) != 2) return 0;
    t = DLPACK_REF_TUPLE_ITEM(answer, 0);
    i = DLPACK_REF_TUPLE_ITEM(answer, 1);
    if (!PyLong_Check(t) || PyBool_Check(t) || !PyLong_CheckExact(i)) return 0;
    tv = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (overflow || (tv == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    iv = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (overflow || (iv == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    return tv == (long long)device.device_type && iv == (long long)device.device_id;
}
