/* --- another library's exchange table: found on its type, memoized, called ----
 * A consumer uses a producer's __dlpack_c_exchange_api__ only as an exact
 * stand-in for its __dlpack__ (docs/exchange_api.md). */

/* Walks tp.__mro__ to the first class whose __dict__ defines
 * `__dlpack_c_exchange_api__`: *held receives that __dict__ value (a new
 * reference; NULL when no class defines it, or when a class before it
 * defines `__dlpack__`). Returns 1 when a class before (below) it defines
 * `__dlpack__` (an override, which wins over the table), 0 when none does,
 * -1 with an error. */
static inline int dlpack_ref_priv_api_class_attr(PyObject* tp, PyObject** held) {
    PyObject *mro, *it, *cls;
    PyObject* api_key = PyUnicode_FromString("__dlpack_c_exchange_api__");
    PyObject* dunder_key = PyUnicode_FromString("__dlpack__");
    int result = 0;
    *held = NULL;
    if (api_key == NULL || dunder_key == NULL) { result = -1; goto done; }
    mro = PyObject_GetAttrString(tp, "__mro__");
    if (mro == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear(); else result = -1;
        goto done;
    }
    it = PyObject_GetIter(mro);
    Py_DECREF(mro);
    if (it == NULL) { result = -1; goto done; }
    while ((cls = PyIter_Next(it)) != NULL) {
        int has_api, has_dunder = 0;
        PyObject* ns = PyObject_GetAttrString(cls, "__dict__");
        Py_DECREF(cls);
        if (ns == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) { result = -1; break; }
            PyErr_Clear();
            continue;
        }
        if (ns == Py_None) { Py_DECREF(ns); continue; }
        has_api = PySequence_Contains(ns, api_key);
        if (has_api == 0) has_dunder = PySequence_Contains(ns, dunder_key);
        if (has_api > 0 && (*held = PyObject_GetItem(ns, api_key)) == NULL) has_api = -1;
        Py_DECREF(ns);
        if (has_api < 0 || has_dunder < 0) { result = -1; break; }
        if (has_api) break;
        if (has_dunder) { result = 1; break; }
    }
    Py_DECREF(it);
    if (result == 0 && PyErr_Occurred()) result = -1;
    if (result != 0) Py_CLEAR(*held);
done:
    Py_XDECREF(api_key);
    Py_XDECREF(dunder_key);
    return result;
}

/* o.name into *out (a new reference) and 1; 0 with *out NULL and nothing
 * set when o has no such attribute; -1 with the error of any other
 * failure. From 3.13 (PyObject_GetOptionalAttr) a missing attribute raises
 * nothing, where before an AttributeError is made and cleared: the lookup
 * of every type without an exchange table, on every import where the
 * per-type memo is off (the limited API, free-threaded builds). */
static inline int dlpack_ref_priv_optional_attr(PyObject* o, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030D0000)
    return PyObject_GetOptionalAttr(o, name, out);
#else
    if ((*out = PyObject_GetAttr(o, name)) != NULL) return 1;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
#endif
}

/* The DLPack 1.x exchange table a type publishes as
 * `__dlpack_c_exchange_api__` (following `prev_api` from another major
 * version, at most DLPACK_REF_MAX_API_CHAIN links: a longer chain is taken as
 * a cycle), or NULL when it has none usable. *owner receives a new
 * reference to the capsule the table was read from (NULL when there is no
 * table): the table lives at least as long as that capsule, and the
 * attribute may be a descriptor that hands out a new capsule, owning a new
 * table, on every access, so the caller keeps *owner for as long as it uses
 * the table, and releases it then. *type_holds (may be NULL) says whether
 * that capsule is the type's own attribute value, kept by the type until
 * the type changes. Any Exception reading the attribute also means "none"
 * (cleared): the caller falls back to `__dlpack__`; NULL with an error set
 * only for a BaseException such as KeyboardInterrupt. The table stands in
 * for `__dlpack__`, so it is not used when a class below the one that
 * publishes it in `tp.__mro__` defines `__dlpack__`: a subclass that
 * overrides `__dlpack__` gets its override called. Not cached: callers on a
 * hot path keep the result per type. */
static inline const DLPackExchangeAPI* dlpack_ref_priv_exchange_api(PyObject* tp, PyObject** owner,
                                                                     int* type_holds) {
    const DLPackExchangeAPIHeader* header;
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    int links = 0, overridden, found;
    PyObject *cap, *held = NULL;
    *owner = NULL;
    if (type_holds != NULL) *type_holds = 0;
    if (n == NULL) goto failed;
    if ((found = dlpack_ref_priv_optional_attr(tp, n->exchange_api, &cap)) <= 0) {
        if (found == 0) return NULL;   /* no table, nothing raised */
        goto failed;
    }
    overridden = dlpack_ref_priv_api_class_attr(tp, &held);
    if (overridden != 0) {
        Py_DECREF(cap);
        if (overridden < 0) goto failed;
        return NULL;
    }
    if (type_holds != NULL) *type_holds = held == cap;
    Py_XDECREF(held);   /* only compared: `cap` is the reference kept */
    if (!PyCapsule_IsValid(cap, DLPACK_REF_CAPSULE_EXCHANGE_API)) { Py_DECREF(cap); return NULL; }
    header = (const DLPackExchangeAPIHeader*)PyCapsule_GetPointer(cap, DLPACK_REF_CAPSULE_EXCHANGE_API);
    while (header != NULL && header->version.major != DLPACK_MAJOR_VERSION) {
        if (++links > DLPACK_REF_MAX_API_CHAIN) { header = NULL; break; }
        header = header->prev_api;
    }
    if (header == NULL || ((const DLPackExchangeAPI*)header)->managed_tensor_from_py_object_no_sync == NULL) {
        Py_DECREF(cap);
        return NULL;
    }
    *owner = cap;
    return (const DLPackExchangeAPI*)header;
failed:
    if (PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
    return NULL;
}

/* The exchange table of type `tp` and, in *owner, a new reference to the
 * capsule that keeps it alive (dlpack_ref_priv_exchange_api says when there
 * is one): release *owner once the table is no longer used. */
static inline const DLPackExchangeAPI* dlpack_ref_exchange_api_ref(PyObject* tp, PyObject** owner) {
    return dlpack_ref_priv_exchange_api(tp, owner, NULL);
}

/* Deprecated: dlpack_ref_exchange_api_ref, which keeps the table's capsule
 * alive for as long as the caller uses it. This one returns a borrowed
 * table only when the type itself holds its capsule (a class attribute;
 * valid while the type is unchanged) and NULL ("none": call `__dlpack__`)
 * for a table a descriptor hands out in a new capsule, which nobody would
 * keep alive. */
static inline const DLPackExchangeAPI* dlpack_ref_exchange_api(PyObject* tp) {
    PyObject* owner;
    int type_holds;
    const DLPackExchangeAPI* api = dlpack_ref_priv_exchange_api(tp, &owner, &type_holds);
    Py_XDECREF(owner);
    return type_holds ? api : NULL;
}

/* The last type whose exchange table was asked for, and the answer. */
typedef struct dlpack_ref_api_memo {
    PyTypeObject* type;
    unsigned int tag;
    unsigned int meta_tag;   /* of type(type): attributes of a type are read through its metaclass too */
    const DLPackExchangeAPI* api;
} dlpack_ref_api_memo;

#ifdef DLPACK_REF_TYPE_MEMO
/* Whether `memo` holds the answer for `tp`: the same type, and it and its
 * metaclass unchanged since. */
static inline int dlpack_ref_priv_api_memo_holds(const dlpack_ref_api_memo* memo, PyTypeObject* tp) {
    return tp == memo->type && memo->tag != 0 && tp->tp_version_tag == memo->tag
           && Py_TYPE(tp)->tp_version_tag == memo->meta_tag;
}
#endif

/* dlpack_ref_exchange_api_ref(tp, owner), kept in `memo` while tp and its
 * metaclass are unchanged. Memoized only where the metaclass reads
 * attributes as `type` does, and a table only when the type itself holds
 * its capsule: a memoized table comes with *owner NULL (the type keeps it
 * alive until it changes, which renews its tag); any other comes with a new
 * reference in *owner, as from dlpack_ref_exchange_api_ref. */
static inline const DLPackExchangeAPI* dlpack_ref_exchange_api_memo_ref(dlpack_ref_api_memo* memo, PyTypeObject* tp,
                                                                       PyObject** owner) {
#ifdef DLPACK_REF_TYPE_MEMO
    const dlpack_ref_names* names;
    PyTypeObject* meta = Py_TYPE(tp);
    const DLPackExchangeAPI* api;
    unsigned int tag, meta_tag;
    int type_holds;
    *owner = NULL;
    if (dlpack_ref_priv_api_memo_holds(memo, tp)) return memo->api;
    if (meta->tp_getattro != PyType_Type.tp_getattro || (names = dlpack_ref_protocol_names()) == NULL)
        return dlpack_ref_exchange_api_ref((PyObject*)tp, owner);
    (void)_PyType_Lookup(tp, names->exchange_api);     /* borrowed; assigns the version tags */
    (void)_PyType_Lookup(meta, names->exchange_api);
    tag = tp->tp_version_tag;
    meta_tag = meta->tp_version_tag;
    api = dlpack_ref_priv_exchange_api((PyObject*)tp, owner, &type_holds);
    if (api == NULL && PyErr_Occurred()) return NULL;
    if ((api == NULL || type_holds) && tag != 0 && meta_tag != 0 && tp->tp_version_tag == tag
            && meta->tp_version_tag == meta_tag) {
        PyTypeObject* old = memo->type;
        Py_INCREF(tp);
        memo->type = tp;
        memo->tag = tag;
        memo->meta_tag = meta_tag;
        memo->api = api;
        Py_XDECREF(old);
        Py_CLEAR(*owner);   /* the type holds it */
    }
    return api;
#else
    (void)memo;
    return dlpack_ref_exchange_api_ref((PyObject*)tp, owner);
#endif
}

/* Deprecated: dlpack_ref_exchange_api_memo_ref. This one returns only a
 * table whose capsule the type itself holds (as dlpack_ref_exchange_api
 * does), borrowed. */
static inline const DLPackExchangeAPI* dlpack_ref_exchange_api_memo(dlpack_ref_api_memo* memo, PyTypeObject* tp) {
    PyObject* owner;
    const DLPackExchangeAPI* api = dlpack_ref_exchange_api_memo_ref(memo, tp, &owner);
    if (owner == NULL) return api;
    Py_DECREF(owner);
    return NULL;
}

/* Calls into another library's exchange table.
 * Each function of a table is called through these, which hand back its
 * status as a plain int: a table may return nonzero with no exception set, or
 * set an exception and return 0. Either is a failure; what it leads to is
 * decided per function (docs/exchange_api.md, "Calls into a foreign table"). */

static inline int dlpack_ref_api_table_from_py(const DLPackExchangeAPI* api, PyObject* obj,
                                               DLManagedTensorVersioned** out) {
    return api->managed_tensor_from_py_object_no_sync((void*)obj, out);
}
static inline int dlpack_ref_api_table_to_py(const DLPackExchangeAPI* api, DLManagedTensorVersioned* tensor,
                                             void** out) {
    return api->managed_tensor_to_py_object_no_sync(tensor, out);
}
static inline int dlpack_ref_api_table_view(const DLPackExchangeAPI* api, PyObject* obj, DLTensor* out) {
    return api->dltensor_from_py_object_no_sync((void*)obj, out);
}
static inline int dlpack_ref_api_table_stream(const DLPackExchangeAPI* api, int32_t device_type, int32_t device_id,
                                              void** out) {
    return api->current_work_stream((DLDeviceType)device_type, device_id, out);
}
/* -1 with the error a call left set: raises it in Cython. */
static inline int dlpack_ref_api_pending_error(void) { return -1; }

/* Whether a table call failed: a nonzero status or an exception set. */
static inline int dlpack_ref_table_failed(int status) { return status != 0 || PyErr_Occurred() != NULL; }

/* The exception for a failed call of `function` in the exchange table of type
 * `tp` (a new reference, to raise; the pending error is taken). A failure as
 * the header describes it, a nonzero status with an exception set, gives
 * that exception as it is: the producer's own error. A nonzero status with
 * none set, or an exception set with status 0, gives a BufferError naming
 * the type and the function, the exception as its __cause__. */
static inline PyObject* dlpack_ref_table_error(PyObject* tp, const char* function, int status) {
    PyObject *cause = NULL, *name, *error;
    if (PyErr_Occurred()) {
#if PY_VERSION_HEX >= 0x030C0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030C0000)
        cause = PyErr_GetRaisedException();
#else
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb != NULL && v != NULL) PyException_SetTraceback(v, tb);
        Py_XDECREF(t);
        Py_XDECREF(tb);
        cause = v;
#endif
        if (cause == NULL) return NULL;
        if (status != 0 || !PyObject_TypeCheck(cause, (PyTypeObject*)PyExc_Exception)) return cause;
    }
    name = PyObject_GetAttrString(tp, "__name__");
    if (name == NULL) { PyErr_Clear(); name = PyObject_Str(tp); }
    if (name == NULL) { Py_XDECREF(cause); return NULL; }
    if (cause == NULL)
        error = PyObject_CallFunction(PyExc_BufferError, "N",
                                      PyUnicode_FromFormat("the DLPack exchange API of %U failed in %s: returned %d "
                                                           "without setting an exception", name, function, status));
    else {
#ifdef Py_LIMITED_API
        /* No tp_name in the limited API: the cause's type is named by its __name__. */
        PyObject* cause_type = dlpack_ref_priv_type_name(cause);
        error = cause_type == NULL ? NULL : PyObject_CallFunction(
                    PyExc_BufferError, "N",
                    PyUnicode_FromFormat("the DLPack exchange API of %U failed in %s: returned 0 but set %U: %S",
                                         name, function, cause_type, cause));
        Py_XDECREF(cause_type);
#else
        error = PyObject_CallFunction(PyExc_BufferError, "N",
                                      PyUnicode_FromFormat("the DLPack exchange API of %U failed in %s: returned 0 "
                                                           "but set %s: %S", name, function,
                                                           Py_TYPE(cause)->tp_name, cause));
#endif
    }
    Py_DECREF(name);
    if (error != NULL && cause != NULL) PyException_SetCause(error, cause);   /* steals cause */
    else Py_XDECREF(cause);
    return error;
}
