/* --- dlpack_ref.Array, through its exchange table ----------------------------
 * The only two calls that need dlpack-ref installed; they use the standard
 * exchange table of its Array type, no private symbol. */

static inline const DLPackExchangeAPI* dlpack_ref_priv_array_api(void) {
    const DLPackExchangeAPI* api;
    PyObject* array_type;
    PyObject* module = PyImport_ImportModule("dlpack_ref");
    if (module == NULL) return NULL;
    array_type = PyObject_GetAttrString(module, "Array");
    Py_DECREF(module);
    if (array_type == NULL) return NULL;
    {
        /* dlpack-ref's table is static data of its extension module, which
           is never unloaded: no capsule needs to be kept. */
        PyObject* owner;
        api = dlpack_ref_exchange_api_ref(array_type, &owner);
        Py_XDECREF(owner);
    }
    Py_DECREF(array_type);
    if (api == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_ImportError, "dlpack_ref.Array publishes no usable DLPack exchange API");
    return api;
}

/* A `dlpack_ref.Array` owning the taken tensor `t` (zero-copy; `t` is
 * emptied: the Array runs the deleter). Needs dlpack-ref installed. */
static inline PyObject* dlpack_ref_to_array(DLPackRefTensor* t) {
    const DLPackExchangeAPI* api = dlpack_ref_priv_array_api();
    void* out = NULL;
    DLManagedTensorVersioned* m;
    if (api == NULL) return NULL;
    if (t->managed == NULL) {
        PyErr_SetString(PyExc_ValueError, "this DLPackRefTensor holds no tensor (released or moved)");
        return NULL;
    }
    if (!t->versioned) {
        /* The table takes versioned tensors only; a legacy one goes through a
           capsule, which dlpack-ref reads as well. */
        PyObject *capsule, *module, *array;
        capsule = dlpack_ref_api_wrap_legacy((DLManagedTensor*)t->managed);
        t->managed = NULL;
        t->dl_tensor = NULL;
        if (capsule == NULL) return NULL;
        module = PyImport_ImportModule("dlpack_ref");
        array = module == NULL ? NULL : PyObject_CallMethod(module, "from_dlpack", "O", capsule);
        Py_XDECREF(module);
        Py_DECREF(capsule);
        return array;
    }
    m = (DLManagedTensorVersioned*)t->managed;
    t->managed = NULL;
    t->dl_tensor = NULL;
    {
        int status;
        /* The type named in a failure's message, looked up before the call:
           nothing may run with its error pending. */
        PyObject* module = PyImport_ImportModule("dlpack_ref");
        PyObject* array_type = module == NULL ? NULL : PyObject_GetAttrString(module, "Array");
        Py_XDECREF(module);
        if (array_type == NULL) {
            DLPACK_REF_PRIV_KEEP_ERROR(if (m->deleter) m->deleter(m));
            return NULL;
        }
        status = dlpack_ref_api_table_to_py(api, m, &out);   /* owns m from here on, also on failure */
        if (dlpack_ref_table_failed(status) || out == NULL) {
            PyObject* error = dlpack_ref_table_error(array_type, "managed_tensor_to_py_object_no_sync", status);
            Py_DECREF(array_type);
            /* An object handed with a failure status is still a reference of ours. */
            Py_XDECREF((PyObject*)out);
            if (error != NULL) { PyErr_SetObject((PyObject*)Py_TYPE(error), error); Py_DECREF(error); }
            return NULL;
        }
        Py_DECREF(array_type);
    }
    return (PyObject*)out;
}

/* Borrow the DLTensor of a `dlpack_ref.Array` (no allocation, valid while the
 * Array lives) through its table. */
static inline int dlpack_ref_view(PyObject* array, DLTensor* out) {
    const DLPackExchangeAPI* api = dlpack_ref_priv_array_api();
    int status;
    if (api == NULL) return -1;
    status = dlpack_ref_api_table_view(api, array, out);
    if (dlpack_ref_table_failed(status)) {
        PyObject* error = dlpack_ref_table_error((PyObject*)Py_TYPE(array), "dltensor_from_py_object_no_sync", status);
        if (error != NULL) { PyErr_SetObject((PyObject*)Py_TYPE(error), error); Py_DECREF(error); }
        return -1;
    }
    return 0;
}
