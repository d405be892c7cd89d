/* --- the consumer protocol: from_dlpack(x, /, *, device=None, copy=None) ------ */

/* The memos of the consumer's calls (one per translation unit). */
static dlpack_ref_method_memo dlpack_ref_priv_dlpack_memo;
static dlpack_ref_method_memo dlpack_ref_priv_device_memo;
static dlpack_ref_api_memo dlpack_ref_priv_api_memo;

/* x.__dlpack__(...) by vectorcall, with max_version=(1, 3) when
 * `with_version` and stream, dl_device and copy when not NULL or None (new
 * reference, NULL with the error set). */
static inline PyObject* dlpack_ref_priv_call_dlpack(PyObject* x, int with_version, PyObject* stream,
                                                    PyObject* dl_device, PyObject* copy) {
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    PyObject* args[5];
    Py_ssize_t k = 0;
    int mask = 0;
    if (n == NULL) return NULL;
    args[0] = x;
    if (with_version) { args[1 + k++] = n->version; mask |= DLPACK_REF_PRIV_KW_VERSION; }
    if (stream != NULL && stream != Py_None) { args[1 + k++] = stream; mask |= DLPACK_REF_PRIV_KW_STREAM; }
    if (dl_device != NULL && dl_device != Py_None) { args[1 + k++] = dl_device; mask |= DLPACK_REF_PRIV_KW_DL_DEVICE; }
    if (copy != NULL && copy != Py_None) { args[1 + k++] = copy; mask |= DLPACK_REF_PRIV_KW_COPY; }
    /* The keyword names come made (dlpack_ref_priv_names_block): no tuple
       is built per call. */
    return dlpack_ref_call_method(&dlpack_ref_priv_dlpack_memo, n->dlpack, args, 1,
                                  mask ? ((const dlpack_ref_priv_names_block*)n)->kw_request[mask] : NULL);
}

/* Whether x has the attribute `name`, with the pending error (a failed call
 * of it) put aside: 1, 0, or -1 with that error restored. */
static inline int dlpack_ref_priv_has(PyObject* x, PyObject* name) {
    int has;
    DLPACK_REF_PRIV_KEEP_ERROR(has = PyObject_HasAttr(x, name));
    return has;
}

/* Whether x has `__dlpack__` (PyObject_HasAttr, which makes and drops a
 * bound method): known without a lookup when x's type is the one the
 * consumer last called it on and the memo holds a method there (a
 * descriptor such as an empty slot may still raise: those are looked up). */
static inline int dlpack_ref_priv_has_dlpack(PyObject* x, PyObject* name) {
#ifdef DLPACK_REF_TYPE_MEMO
    const dlpack_ref_method_memo* memo = &dlpack_ref_priv_dlpack_memo;
    PyTypeObject* tp = Py_TYPE(x);
    if (tp == memo->type && memo->tag != 0 && tp->tp_version_tag == memo->tag
            && PyType_HasFeature(Py_TYPE(memo->method), Py_TPFLAGS_METHOD_DESCRIPTOR))
        return 1;
#endif
    return PyObject_HasAttr(x, name);
}

/* The TypeError of an object that is neither a producer nor a capsule. */
static inline int dlpack_ref_priv_not_dlpack(PyObject* x) {
    PyObject* tn = dlpack_ref_priv_type_name(x);
    if (tn != NULL) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack expects an object with __dlpack__ and __dlpack_device__ or a DLPack capsule, "
                     "not %U", tn);
        Py_DECREF(tn);
    }
    return -1;
}

/* x.__dlpack_device__(), unchecked (new reference; NULL with the error
 * set, the TypeError of dlpack_ref_priv_not_dlpack when x has no such
 * method). */
static inline PyObject* dlpack_ref_priv_ask_device(PyObject* x) {
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    PyObject* answer;
    if (n == NULL) return NULL;
    answer = dlpack_ref_call_method(&dlpack_ref_priv_device_memo, n->dlpack_device, &x, 1, NULL);
    if (answer == NULL && PyErr_ExceptionMatches(PyExc_AttributeError) && !dlpack_ref_priv_has(x, n->dlpack_device)) {
        PyErr_Clear();
        dlpack_ref_priv_not_dlpack(x);
    }
    return answer;
}

/* Whether x has `__dlpack_device__` (1; 0 with nothing set; -1 with an
 * error), without calling it: the type's attribute, looked up through the
 * type's own attribute cache, or any attribute of x. */
static inline int dlpack_ref_priv_has_dlpack_device(PyObject* x) {
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    if (n == NULL) return -1;
#ifdef DLPACK_REF_TYPE_MEMO
    if (_PyType_Lookup(Py_TYPE(x), n->dlpack_device) != NULL) return 1;   /* borrowed */
#endif
#if PY_VERSION_HEX >= 0x030D0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030D0000)
    return PyObject_HasAttrWithError(x, n->dlpack_device);
#else
    {
        PyObject* found = PyObject_GetAttr(x, n->dlpack_device);
        if (found != NULL) { Py_DECREF(found); return 1; }
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
        return 0;
    }
#endif
}

/* An answer of x.__dlpack_device__(), checked: a (device_type, device_id)
 * tuple of two ints naming a DLPack 1.3 device (TypeError otherwise). */
static inline int dlpack_ref_priv_device_of_answer(PyObject* x, PyObject* answer, DLDevice* out) {
    PyObject* tn;
    if (PyTuple_Check(answer) && DLPACK_REF_TUPLE_SIZE(answer) == 2 && PyLong_Check(DLPACK_REF_TUPLE_ITEM(answer, 0))
            && !PyBool_Check(DLPACK_REF_TUPLE_ITEM(answer, 0)) && PyLong_Check(DLPACK_REF_TUPLE_ITEM(answer, 1))
            && !PyBool_Check(DLPACK_REF_TUPLE_ITEM(answer, 1)))
        return dlpack_ref_parse_dl_device(answer, out);
    tn = dlpack_ref_priv_type_name(x);
    if (tn != NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%U.__dlpack_device__() returned %R; expected a (device_type, device_id) tuple of two ints",
                     tn, answer);
        Py_DECREF(tn);
    }
    return -1;
}

/* x.__dlpack_device__(), checked. */
static inline int dlpack_ref_announced_device(PyObject* x, DLDevice* out) {
    PyObject* answer = dlpack_ref_priv_ask_device(x);
    int r;
    if (answer == NULL) return -1;
    r = dlpack_ref_priv_device_of_answer(x, answer, out);
    Py_DECREF(answer);
    return r;
}

/* The capsule must be where __dlpack_device__ said; a refusal runs the
 * tensor's deleter (the holder is emptied). */
static inline int dlpack_ref_priv_check_announced(PyObject* x, DLPackRefTensor* t, DLDevice announced) {
    DLDevice d = t->dl_tensor->device;
    PyObject* tn;
    if (d.device_type == announced.device_type && d.device_id == announced.device_id) return 0;
    tn = dlpack_ref_priv_type_name(x);
    if (tn != NULL) {
        PyErr_Format(PyExc_BufferError,
                     "%U.__dlpack_device__() says (%d, %d) but its capsule's tensor is on (%d, %d); the capsule's "
                     "deleter was called", tn, (int)announced.device_type, (int)announced.device_id,
                     (int)d.device_type, (int)d.device_id);
        Py_DECREF(tn);
    }
    DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(t));
    return -1;
}

/* x's tensor through its type's exchange table: 1 when taken, 0 when the
 * table fails in any way (an error, a status with no error, no tensor, a
 * tensor the checks refuse, whose deleter has then run, or a lazily
 * conjugated complex tensor whose table export loses the conjugation): the
 * caller then asks __dlpack__, so that errors come out as __dlpack__ gives
 * them. The table is "NoSync": stream ordering is the caller's. */
/* A table's failure is a reason to fall back to __dlpack__, and its error
 * is dropped; KeyboardInterrupt, SystemExit and other exceptions that are no
 * Exception are the user's, not the table's, and stay set (returns 0: fall
 * back, -1: stop with the error). */
static inline int dlpack_ref_priv_drop_table_error(void) {
    if (PyErr_Occurred() != NULL && !PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* 1: the tensor came through the table; 0: fall back to __dlpack__; -1: an
 * exception that is no Exception (dlpack_ref_priv_drop_table_error). */
static inline int dlpack_ref_priv_take_by_table(const DLPackExchangeAPI* api, PyObject* x, DLPackRefTensor* out) {
    DLManagedTensorVersioned* m = NULL;
    int status = dlpack_ref_api_table_from_py(api, x, &m);
    if (dlpack_ref_table_failed(status) || m == NULL) {
        int dropped = dlpack_ref_priv_drop_table_error();
        if (m != NULL && m->deleter != NULL)   /* not trusted, but ours to free */
            DLPACK_REF_PRIV_KEEP_ERROR(m->deleter(m));
        return dropped;
    }
    if (dlpack_ref_adopt(m, 1, out) < 0) return dlpack_ref_priv_drop_table_error();
    if (out->dl_tensor->dtype.code == kDLComplex) {
        PyObject* r = PyObject_CallMethod(x, "is_conj", NULL);
        int conj = r == NULL ? (PyErr_ExceptionMatches(PyExc_AttributeError) ? 0 : 1) : PyObject_IsTrue(r);
        Py_XDECREF(r);
        if (dlpack_ref_priv_drop_table_error() < 0) { DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(out)); return -1; }
        if (conj != 0) { dlpack_ref_release(out); return 0; }
    }
    return 1;
}

/* copy=False with a tensor flagged IS_COPIED: whoever made it copied, so the
 * result would not share the producer's memory, which is what copy=False
 * promises; a bare capsule is judged by the same flag. CopyForbiddenError
 * naming who made it (returns -1; the caller releases the tensor). */
static inline int dlpack_ref_refuse_copied(PyObject* x) {
    PyObject* cls = dlpack_ref_copy_forbidden_error();
    PyObject* tn;
    if (cls == NULL) return -1;
    if (PyCapsule_CheckExact(x)) {
        PyErr_SetString(cls, "copy=False, but the capsule's tensor is flagged DLPACK_FLAG_BITMASK_IS_COPIED (a copy, "
                             "not the producer's memory); its deleter was called");
        return -1;
    }
    tn = dlpack_ref_priv_type_name(x);
    if (tn != NULL) {
        PyErr_Format(cls, "copy=False, but the tensor %U.__dlpack__ returned is flagged DLPACK_FLAG_BITMASK_IS_COPIED "
                          "(a copy, not the producer's memory); its deleter was called", tn);
        Py_DECREF(tn);
    }
    return -1;
}

/* Take the tensor of the capsule __dlpack__ returned (a new reference,
 * consumed; NULL passes the call's error on). */
static inline int dlpack_ref_priv_take_returned(PyObject* capsule, DLPackRefTensor* out) {
    int r;
    if (capsule == NULL) return -1;
    if (!PyCapsule_CheckExact(capsule)) {
        PyObject* tn = dlpack_ref_priv_type_name(capsule);
        if (tn != NULL) {
            PyErr_Format(PyExc_TypeError, "__dlpack__ returned %U, not a DLPack capsule", tn);
            Py_DECREF(tn);
        }
        dlpack_ref_decref_keeping_error(capsule);
        return -1;
    }
    r = dlpack_ref_take(capsule, out);
    /* A refused capsule dies with the refusal pending: its destructor must
       not see it. */
    dlpack_ref_decref_keeping_error(capsule);
    return r;
}

/* The plain request, from_dlpack(x) with nothing asked: x.__dlpack__(
 * max_version=(1, 3)) (the legacy call on TypeError). __dlpack_device__ must
 * exist (checked after, so that __dlpack__'s refusals come first; its
 * absence runs the deleter) but is not called: nothing of this request
 * depends on it (no device, copy or stream is asked of the producer), and
 * the tensor says where it is, as a tensor from an exchange table does. */
static inline int dlpack_ref_priv_take_plain(PyObject* x, DLPackRefTensor* out) {
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    PyObject* capsule;
    int r;
    if (n == NULL) return -1;
    capsule = dlpack_ref_priv_call_dlpack(x, 1, NULL, NULL, NULL);
    if (capsule == NULL) {
        int type_error = PyErr_ExceptionMatches(PyExc_TypeError);
        if (!type_error && !PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        if (!dlpack_ref_priv_has(x, n->dlpack)) {
            PyErr_Clear();
            return dlpack_ref_priv_not_dlpack(x);
        }
        if (!type_error) return -1;
        /* A producer older than DLPack 1.0 rejects max_version. */
        PyErr_Clear();
        capsule = dlpack_ref_priv_call_dlpack(x, 0, NULL, NULL, NULL);
    }
    if (dlpack_ref_priv_take_returned(capsule, out) < 0) return -1;
    r = dlpack_ref_priv_has_dlpack_device(x);
    if (r > 0) return 0;
    if (r == 0) dlpack_ref_priv_not_dlpack(x);
    DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(out));
    return -1;
}

/* The arguments of `from_dlpack(x, /, *, device=None, copy=None)` for a
 * function defined with METH_FASTCALL | METH_KEYWORDS: *x, *device, *copy
 * borrowed (None when not given); -1 with a TypeError as Python words it. */
static inline int dlpack_ref_consumer_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** x,
                                           PyObject** device, PyObject** copy) {
    Py_ssize_t k, nk = kwnames == NULL ? 0 : DLPACK_REF_TUPLE_SIZE(kwnames);
    *device = *copy = Py_None;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "from_dlpack() takes exactly 1 positional argument (%zd given)", nargs);
        return -1;
    }
    *x = args[0];
    if (nk != 0) {
        const dlpack_ref_names* n = dlpack_ref_protocol_names();
        if (n == NULL) return -1;
        for (k = 0; k < nk; ++k) {
            PyObject* key = DLPACK_REF_TUPLE_ITEM(kwnames, k);
            if (key == n->device || PyUnicode_Compare(key, n->device) == 0) *device = args[1 + k];
            else if (key == n->copy || PyUnicode_Compare(key, n->copy) == 0) *copy = args[1 + k];
            else {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "from_dlpack() got an unexpected keyword argument %R", key);
                return -1;
            }
        }
    }
    return 0;
}

/* The plain request, from_dlpack(x) with nothing asked, of a producer (not a
 * capsule): through `api`, the exchange table of x's type (NULL: none), when
 * it gives a tensor, else x.__dlpack__(max_version=(1, 3)) with its legacy
 * retry and the check that __dlpack_device__ exists (it is not called).
 * 1 when the tensor came through the table (which is "NoSync": ordering a
 * CUDA tensor on the producer's stream is the caller's), 0 through
 * __dlpack__, -1 with the error set. */
static inline int dlpack_ref_consumer_plain(PyObject* x, const DLPackExchangeAPI* api, DLPackRefTensor* out) {
    if (api != NULL) {
        int by_table = dlpack_ref_priv_take_by_table(api, x, out);
        if (by_table != 0) return by_table;
    }
    return dlpack_ref_priv_take_plain(x, out) < 0 ? -1 : 0;
}

/* Take the tensor of any DLPack producer or capsule, zero-copy, with no
 * synchronization asked for (CPU data, or data whose stream ordering the
 * caller handles): a capsule is taken as it is; a producer gives the plain
 * request's tensor (dlpack_ref_consumer_plain: its type's exchange table,
 * kept alive while it is used, else `obj.__dlpack__(max_version=(1, 3))`
 * with the legacy retry and the check that __dlpack_device__ exists). */
static inline int dlpack_ref_import(PyObject* obj, DLPackRefTensor* out) {
    PyObject* owner;
    const DLPackExchangeAPI* api;
    int r;
    if (PyCapsule_CheckExact(obj)) return dlpack_ref_take(obj, out);
    api = dlpack_ref_exchange_api_ref((PyObject*)Py_TYPE(obj), &owner);
    if (api == NULL && PyErr_Occurred()) return -1;
    r = dlpack_ref_consumer_plain(obj, api, out);
    Py_XDECREF(owner);
    return r < 0 ? -1 : 0;
}

/* The device a producer (not a capsule) announces, for a request that asks
 * for a device, a copy or a stream: TypeError when x has no __dlpack__, then
 * x.__dlpack_device__(), checked. Asked before __dlpack__, whose stream and
 * dl_device arguments depend on it. */
static inline int dlpack_ref_consumer_source(PyObject* x, DLDevice* source) {
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    if (n == NULL) return -1;
    if (!dlpack_ref_priv_has_dlpack(x, n->dlpack)) return dlpack_ref_priv_not_dlpack(x);
    return dlpack_ref_announced_device(x, source);
}

/* dlpack_ref_consumer_source, where an unusable answer is not the end:
 * when x.__dlpack_device__() fails or gives an answer that names no device
 * (any Exception), the request cannot be built on it, and the plain
 * request's tensor is taken instead (dlpack_ref_consumer_plain: through
 * `api`, the exchange table of x's type, else `x.__dlpack__(max_version=
 * (1, 3))`; no device, copy or stream is asked of the producer): its
 * DLTensor.device is the source, and the caller moves or copies it itself,
 * as for a producer that cannot. So every request accepts the producers the
 * plain request accepts, and refuses those it refuses with the same error.
 * 1 or 2: taken into *out, *source set (2: through the table, which is
 * "NoSync": ordering a CUDA tensor is the caller's); 0: *source announced,
 * nothing taken; -1: the plain request's error, or an exception that is no
 * Exception. */
static inline int dlpack_ref_consumer_source_or_plain(PyObject* x, const DLPackExchangeAPI* api, DLDevice* source,
                                                      DLPackRefTensor* out) {
    int by_table;
    if (dlpack_ref_consumer_source(x, source) == 0) return 0;
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    if ((by_table = dlpack_ref_consumer_plain(x, api, out)) < 0) return -1;
    *source = out->dl_tensor->device;
    return 1 + by_table;
}

/* x.__dlpack__(max_version=(1, 3), stream=stream, dl_device=dl_device,
 * copy=copy), the last three passed when not NULL or None, and for a
 * producer older than DLPack 1.0 (TypeError) the legacy call with the
 * stream alone (*legacy is then 1). New reference, NULL with the error set. */
static inline PyObject* dlpack_ref_priv_request(PyObject* x, PyObject* stream, PyObject* dl_device, PyObject* copy,
                                                int* legacy) {
    PyObject* capsule = dlpack_ref_priv_call_dlpack(x, 1, stream, dl_device, copy);
    *legacy = 0;
    if (capsule == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        /* A producer older than DLPack 1.0: no max_version, dl_device or copy. */
        PyErr_Clear();
        *legacy = 1;
        capsule = dlpack_ref_priv_call_dlpack(x, 0, stream, NULL, NULL);
    }
    return capsule;
}

/* x.__dlpack__(max_version=(1, 3), stream=stream, dl_device=*target,
 * copy=copy) for the request dlpack_ref_consumer_source began (`target`
 * NULL: no device asked; stream and copy None when not asked), the tensor
 * taken into *out. A producer older than DLPack 1.0 (TypeError) is asked
 * the legacy call with the stream alone, and one that cannot move or copy
 * as asked (BufferError, or ValueError as NumPy before 2.4 raises it) the
 * plain request with the stream: *producer_did_it is then 0 and the rest is
 * the caller's. The tensor must be on `source`, the announced device,
 * unless the producer moved it as asked (a refusal runs the deleter). */
static inline int dlpack_ref_consumer_call(PyObject* x, PyObject* stream, const DLDevice* target, PyObject* copy,
                                           DLDevice source, DLPackRefTensor* out, int* producer_did_it) {
    PyObject *capsule, *dl_device = NULL;
    int legacy;
    *producer_did_it = 1;
    if (target != NULL
            && (dl_device = Py_BuildValue("(ii)", (int)target->device_type, (int)target->device_id)) == NULL)
        return -1;
    capsule = dlpack_ref_priv_request(x, stream, dl_device, copy, &legacy);
    if (legacy) {
        *producer_did_it = 0;
    } else if (capsule == NULL && (target != NULL || (copy != NULL && copy != Py_None))
               && (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError))) {
        /* It cannot move or copy as asked: the plain request, the rest here.
           Its refusal, if it refuses that too, is the one that propagates. */
        PyErr_Clear();
        *producer_did_it = 0;
        capsule = dlpack_ref_priv_call_dlpack(x, 1, stream, NULL, NULL);
    }
    Py_XDECREF(dl_device);
    if (dlpack_ref_priv_take_returned(capsule, out) < 0) return -1;
    if ((target == NULL || !*producer_did_it) && dlpack_ref_priv_check_announced(x, out, source) < 0) return -1;
    return 0;
}

/* The plain request with the stream (x.__dlpack__(max_version=(1, 3),
 * stream=stream), the legacy call on TypeError), for a consumer that makes
 * copy=True's copy itself from the producer's tensor in place: 1 with the
 * tensor taken into *out (it must be on `source`, the announced device: a
 * refusal runs the deleter); 0 when the producer refuses to export in place
 * (BufferError from its __dlpack__, cleared: ask it for its copy with
 * dlpack_ref_consumer_call); -1 with the error set. */
static inline int dlpack_ref_consumer_call_in_place(PyObject* x, PyObject* stream, DLDevice source,
                                                    DLPackRefTensor* out) {
    int legacy;
    PyObject* capsule = dlpack_ref_priv_request(x, stream, NULL, NULL, &legacy);
    if (capsule == NULL && PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Clear();
        return 0;
    }
    if (dlpack_ref_priv_take_returned(capsule, out) < 0) return -1;
    if (dlpack_ref_priv_check_announced(x, out, source) < 0) return -1;
    return 1;
}

/* What copy= and the target ask of a taken tensor (on `mem`, with the
 * versioned `flags`, 0 for legacy) that `x` gave: 1 when the caller must
 * copy it onto `target` (copy=True that no producer honoured, since only a
 * producer that did what was asked (`producer_did_it`; never a bare capsule)
 * copied for this request; or memory `target` cannot use in place), 0 when
 * it is the result as it is, -1 with CopyForbiddenError for copy=False (a
 * tensor flagged IS_COPIED, or one that would need a copy). The tensor is
 * not released here: a refusal is the holder's to release. */
static inline int dlpack_ref_consumer_copy_needed(PyObject* x, DLDevice mem, uint64_t flags, DLDevice target,
                                                  PyObject* copy, int producer_did_it) {
    int copied = (flags & DLPACK_FLAG_BITMASK_IS_COPIED) != 0;
    if (copy == Py_False && copied) return dlpack_ref_refuse_copied(x);
    if (copy == Py_True && !(producer_did_it && copied)) return 1;
    if (dlpack_ref_can_access(target, mem)) return 0;
    if (copy == Py_False) return dlpack_ref_refuse_copy(mem, target, 1);
    return 1;
}

/* from_dlpack(x, device=device, copy=copy) up to the tensor, for a consumer
 * that owns what it imports: on success *out holds the taken, checked tensor
 * (the caller runs dlpack_ref_release, or hands it to its array) and
 * *must_copy says whether the caller must copy it onto *target (copy=True
 * the producer did not honour, or memory *target cannot use in place);
 * copy=False refusals (CopyForbiddenError) and every protocol error are
 * raised here, the deleter called exactly once when a tensor was taken.
 *   - device: None, a (device_type, device_id) tuple or an object with
 *     __dlpack_device__; stream: the consumer's stream, or None.
 *   - x: a capsule, or a producer asked for max_version=(1, 3) (the legacy
 *     call only on TypeError), through its type's exchange table when
 *     nothing else is asked for (dlpack_ref_exchange_api: version checks,
 *     overrides; any failure falls back to __dlpack__);
 *   - a producer that refuses dl_device/copy with BufferError (or ValueError,
 *     NumPy before 2.4) is asked the plain request and the caller moves or
 *     copies; a producer's tensor must be on the device its
 *     __dlpack_device__ announced; one whose __dlpack_device__ fails or
 *     names no device gives the plain request's tensor, moved or copied by
 *     the caller (dlpack_ref_consumer_source_or_plain).
 * It is the four pieces above in order (dlpack_ref_consumer_plain, _source,
 * _call, _copy_needed), which a consumer with its own fast paths and stream
 * layer (dlpack-ref's core) calls one by one. */
static inline int dlpack_ref_consumer_take(PyObject* x, PyObject* device, PyObject* copy, PyObject* stream,
                                           DLPackRefTensor* out, DLDevice* target, int* must_copy) {
    DLDevice source;
    int have_target = device != Py_None, producer_did_it = 0, r;
    *must_copy = 0;
    if (dlpack_ref_check_copy_arg(copy) < 0) return -1;
    if (have_target) {
        if (PyTuple_Check(device)) r = dlpack_ref_parse_dl_device(device, target);
        else r = dlpack_ref_announced_device(device, target);
        if (r < 0) return -1;
    }
    if (PyCapsule_CheckExact(x)) {
        if (dlpack_ref_take(x, out) < 0) return -1;
        if (!have_target) *target = out->dl_tensor->device;
    } else if (!have_target && copy == Py_None && (stream == NULL || stream == Py_None)) {
        /* Nothing asked: the table, else __dlpack__; no copy can be needed. */
        PyObject* owner;
        const DLPackExchangeAPI* api = dlpack_ref_exchange_api_memo_ref(&dlpack_ref_priv_api_memo, Py_TYPE(x), &owner);
        if (api == NULL && PyErr_Occurred()) return -1;
        r = dlpack_ref_consumer_plain(x, api, out);
        Py_XDECREF(owner);
        if (r < 0) return -1;
        *target = out->dl_tensor->device;
        return 0;
    } else {
        PyObject* owner;
        const DLPackExchangeAPI* api = dlpack_ref_exchange_api_memo_ref(&dlpack_ref_priv_api_memo, Py_TYPE(x), &owner);
        if (api == NULL && PyErr_Occurred()) return -1;
        r = dlpack_ref_consumer_source_or_plain(x, api, &source, out);
        Py_XDECREF(owner);
        if (r < 0) return -1;
        if (!have_target) *target = source;
        if (r == 0
                && dlpack_ref_consumer_call(x, stream, have_target ? target : NULL, copy, source, out,
                                            &producer_did_it) < 0)
            return -1;
    }
    r = dlpack_ref_consumer_copy_needed(x, out->dl_tensor->device, out->flags, *target, copy, producer_did_it);
    if (r < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(out));
        return -1;
    }
    *must_copy = r;
    return 0;
}
