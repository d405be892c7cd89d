/* --- devices and arguments of the producer protocol ------------------------- */

/* kDLTPU and kDLTPUHost by value: a dlpack.h of the 1.3 release (which a
 * library may include first) has no names for them. */
#define DLPACK_REF_PRIV_TPU 19
#define DLPACK_REF_PRIV_TPU_HOST 20

/* Whether code on `dev` can use memory on `mem` in place, without a copy:
 * the one in-place access table (docs/semantics.md prints it). */
static inline int dlpack_ref_can_access(DLDevice dev, DLDevice mem) {
    int32_t d = (int32_t)dev.device_type, m = (int32_t)mem.device_type;
    if (d == m && (dev.device_id == mem.device_id || d == kDLCPU)) return 1;
    if (m == kDLCUDAHost) return d == kDLCPU || d == kDLCUDA || d == kDLCUDAHost;
    if (m == kDLCUDAManaged) return d == kDLCPU || d == kDLCUDA || d == kDLCUDAManaged;
    if (m == kDLROCMHost) return d == kDLCPU || d == kDLROCM || d == kDLROCMHost;
    if (m == DLPACK_REF_PRIV_TPU_HOST) return d == kDLCPU || d == DLPACK_REF_PRIV_TPU || d == DLPACK_REF_PRIV_TPU_HOST;
    return 0;
}

/* "cpu:0", "cuda:1", ...: a device as dlpack_ref.Device prints it (new
 * reference, NULL with an error set). */
static inline PyObject* dlpack_ref_device_str(DLDevice dev) {
    char lower[32];
    size_t i;
    const char* name = dlpack_ref_device_type_name((int32_t)dev.device_type);
    if (name == NULL) return PyUnicode_FromFormat("%d:%d", (int)dev.device_type, (int)dev.device_id);
    for (i = 0; name[i] != '\0' && i + 1 < sizeof lower; ++i)
        lower[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    lower[i] = '\0';
    return PyUnicode_FromFormat("%s:%d", lower, (int)dev.device_id);
}

/* Whether a `max_version` argument asks for a versioned capsule: 0 for None
 * or a major below 1, 1 for (1, x) and above, -1 with a TypeError for
 * anything but None or a (major, minor) tuple of ints (bool is no int here). */
static inline int dlpack_ref_wants_versioned(PyObject* max_version) {
    PyObject *major, *minor;
    long long v;
    int overflow = 0;
    if (max_version == Py_None) return 0;
    if (!PyTuple_CheckExact(max_version) || DLPACK_REF_TUPLE_SIZE(max_version) != 2) goto bad;
    major = DLPACK_REF_TUPLE_ITEM(max_version, 0);
    minor = DLPACK_REF_TUPLE_ITEM(max_version, 1);
    if (!PyLong_Check(major) || PyBool_Check(major) || !PyLong_Check(minor) || PyBool_Check(minor)) goto bad;
    v = PyLong_AsLongLongAndOverflow(major, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    return overflow > 0 || (overflow == 0 && v >= 1);
bad:
    PyErr_Format(PyExc_TypeError, "max_version must be None or a (major, minor) tuple of ints, not %R", max_version);
    return -1;
}

/* `copy` is True, False or None: 0, or -1 with a TypeError. */
static inline int dlpack_ref_check_copy_arg(PyObject* copy) {
    if (copy == Py_None || copy == Py_True || copy == Py_False) return 0;
    PyErr_Format(PyExc_TypeError, "copy must be True, False or None, not %R", copy);
    return -1;
}

/* A `dl_device` argument: a (device_type, device_id) tuple of ints (IntEnum
 * members count, bool does not) naming a DLPack 1.3 device. TypeError for
 * another shape, ValueError for an unknown type or a negative id. */
static inline int dlpack_ref_parse_dl_device(PyObject* obj, DLDevice* out) {
    PyObject *t, *i;
    long long tv, iv;
    int o1 = 0, o2 = 0;
    if (!PyTuple_Check(obj) || DLPACK_REF_TUPLE_SIZE(obj) != 2) goto bad;
    t = DLPACK_REF_TUPLE_ITEM(obj, 0);
    i = DLPACK_REF_TUPLE_ITEM(obj, 1);
    if (!PyLong_Check(t) || PyBool_Check(t) || !PyLong_Check(i) || PyBool_Check(i)) goto bad;
    tv = PyLong_AsLongLongAndOverflow(t, &o1);
    iv = PyLong_AsLongLongAndOverflow(i, &o2);
    if ((tv == -1 || iv == -1) && PyErr_Occurred()) return -1;
    if (o1 || tv < 1 || tv > 0x7FFFFFFF || !dlpack_ref_device_type_known((int32_t)tv)) {
        PyErr_Format(PyExc_ValueError, "dl_device=%R has a device type that DLPack 1.3 does not define; defined: %s",
                     obj, DLPACK_REF_DEVICE_TYPES_ACCEPTED);
        return -1;
    }
    if (o2 || iv < 0 || iv > 0x7FFFFFFF) {
        PyErr_Format(PyExc_ValueError, "dl_device=%R has a device id that is not a non-negative int32", obj);
        return -1;
    }
    out->device_type = (DLDeviceType)tv;
    out->device_id = (int32_t)iv;
    return 0;
bad:
    PyErr_Format(PyExc_TypeError, "dl_device must be None or a (device_type, device_id) tuple of ints, not %R", obj);
    return -1;
}

/* The stream rule: the value a DLPack `stream` argument names for memory on
 * `device` (of the CUDA family when `cuda_memory`), into *out: 1 for None
 * (the legacy default stream), -1 (do not synchronize) as is, else 1, 2 or a
 * handle > 2; an object with `__cuda_stream__` stands for its handle (0 from
 * the protocol is the legacy default). 0 is ambiguous (ValueError); CPU and
 * other stream-less memory accept only None. `owner` names the array in
 * messages. The one place the rule is written: the core's CUDA layer, which
 * is Python, calls it too (dlpack_ref._streams.stream_handle). */
static inline int dlpack_ref_stream_value(PyObject* stream, int cuda_memory, DLDevice device, PyObject* owner,
                                          int64_t* out) {
    PyObject *proto, *info, *tn, *where;
    long long v;
    int overflow = 0;
    if (stream == Py_None) { *out = 1; return 0; }
    if (!cuda_memory) {
        int has_proto = PyObject_HasAttrString(stream, "__cuda_stream__");
        if (PyLong_Check(stream) || has_proto) {
            tn = dlpack_ref_priv_type_name(owner);
            where = tn == NULL ? NULL : dlpack_ref_device_str(device);
            if (where != NULL)
                PyErr_Format(PyExc_ValueError,
                             "stream=%R was passed to %U.__dlpack__ for memory on %U; only stream=None is accepted for CPU memory",
                             stream, tn, where);
            Py_XDECREF(tn);
            Py_XDECREF(where);
            return -1;
        }
        tn = dlpack_ref_priv_type_name(stream);
        if (tn != NULL) {
            PyErr_Format(PyExc_TypeError, "stream must be None for CPU memory, not %U", tn);
            Py_DECREF(tn);
        }
        return -1;
    }
    if (PyBool_Check(stream)) {
        PyErr_SetString(PyExc_TypeError, "stream must be None, an int or an object with __cuda_stream__, not bool");
        return -1;
    }
    if (PyLong_Check(stream)) {
        v = PyLong_AsLongLongAndOverflow(stream, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (overflow == 0 && v == 0) {
            PyErr_SetString(PyExc_ValueError,
                            "stream=0 is ambiguous and not allowed (use 1 for the legacy default stream, 2 for the "
                            "per-thread default stream, or a CUstream handle > 2)");
            return -1;
        }
        if (overflow < 0 || (overflow == 0 && v < -1)) {
            PyErr_Format(PyExc_ValueError,
                         "stream=%R is not valid: expected None, -1, 1, 2 or a CUstream handle > 2", stream);
            return -1;
        }
        if (overflow > 0) {
            /* A handle is a pointer, kept as its 64 bits; 2**64 - 1 would read
               as -1 (no sync), and more does not fit: both refused. */
            unsigned long long u = PyLong_AsUnsignedLongLong(stream);
            if (u == (unsigned long long)-1) {
                if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "stream=%R is not valid: a CUstream handle is a 64-bit pointer below 2**64 - 1", stream);
                return -1;
            }
            *out = (int64_t)u;
            return 0;
        }
        *out = (int64_t)v;
        return 0;
    }
    proto = PyObject_GetAttrString(stream, "__cuda_stream__");
    if (proto == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
        tn = dlpack_ref_priv_type_name(stream);
        if (tn != NULL) {
            PyErr_Format(PyExc_TypeError, "stream must be None, an int or an object with __cuda_stream__, not %U", tn);
            Py_DECREF(tn);
        }
        return -1;
    }
    info = PyObject_CallNoArgs(proto);
    Py_DECREF(proto);
    if (info == NULL) return -1;
    if (PyTuple_Check(info) && DLPACK_REF_TUPLE_SIZE(info) == 2 && PyLong_Check(DLPACK_REF_TUPLE_ITEM(info, 0))
            && !PyBool_Check(DLPACK_REF_TUPLE_ITEM(info, 1)) && PyLong_Check(DLPACK_REF_TUPLE_ITEM(info, 1))) {
        long long version = PyLong_AsLongLongAndOverflow(DLPACK_REF_TUPLE_ITEM(info, 0), &overflow);
        if (!overflow && version == 0) {
            unsigned long long handle = PyLong_AsUnsignedLongLong(DLPACK_REF_TUPLE_ITEM(info, 1));
            /* 2**64 - 1 would read as -1 (no sync): refused with the rest. */
            if (handle != (unsigned long long)-1) {
                Py_DECREF(info);
                *out = handle == 0 ? 1 : (int64_t)handle;
                return 0;
            }
            PyErr_Clear();
        }
        PyErr_Clear();
    }
    tn = dlpack_ref_priv_type_name(stream);
    if (tn != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "%U.__cuda_stream__() returned %R; expected (0, handle) with an int handle from 0 to "
                     "2**64 - 2 (protocol version 0)", tn, info);
        Py_DECREF(tn);
    }
    Py_DECREF(info);
    return -1;
}

/* The error a forbidden copy raises: both a BufferError and a ValueError, as
 * the standard names both. Each library that vendors this header has its
 * own class, `<module>.CopyForbiddenError` (dlpack-ref registers its public
 * dlpack_ref.CopyForbiddenError, so that its core raises that one). Borrowed
 * reference, NULL with an error set. */
static PyObject* dlpack_ref_priv_copy_forbidden = NULL;

static inline int dlpack_ref_set_copy_forbidden_error(PyObject* cls) {
    PyObject* old = dlpack_ref_priv_copy_forbidden;
    Py_INCREF(cls);
    dlpack_ref_priv_copy_forbidden = cls;
    Py_XDECREF(old);
    return 0;
}

static inline PyObject* dlpack_ref_copy_forbidden_error(void) {
    if (dlpack_ref_priv_copy_forbidden == NULL) {
        PyObject* bases = PyTuple_Pack(2, PyExc_BufferError, PyExc_ValueError);
        PyObject* cls;
        if (bases == NULL) return NULL;
        cls = PyErr_NewException("dlpack_ref_vendored.CopyForbiddenError", bases, NULL);
        Py_DECREF(bases);
        if (cls == NULL) return NULL;
        /* Two threads may both get here (free-threaded): the first class
           stays, the other is dropped; both are the same kind of error. */
        if (dlpack_ref_priv_copy_forbidden == NULL) dlpack_ref_priv_copy_forbidden = cls;
        else Py_DECREF(cls);
    }
    return dlpack_ref_priv_copy_forbidden;
}

/* The CopyForbiddenError of copy=False when `target` cannot use memory on
 * `mem` in place (returns -1). */
static inline int dlpack_ref_refuse_copy(DLDevice mem, DLDevice target, int importing) {
    PyObject* cls = dlpack_ref_copy_forbidden_error();
    PyObject *a, *b;
    if (cls == NULL) return -1;
    a = dlpack_ref_device_str(mem);
    b = a == NULL ? NULL : dlpack_ref_device_str(target);
    if (b != NULL) {
        if (importing)
            PyErr_Format(cls, "copy=False, but the data on %U cannot be used on %U without a copy", a, b);
        else
            PyErr_Format(cls, "copy=False, but memory on %U cannot be used in place on %U: a copy is needed", a, b);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
}
