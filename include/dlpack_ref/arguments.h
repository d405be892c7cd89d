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

/* A `stream` argument of the protocol, parsed once where it enters (by
 * dlpack_ref_stream_parse, or the "O&" converters dlpack_ref_stream_converter
 * and dlpack_ref_stream_converter_rocm): what the producer's copy and order
 * callbacks and a CUDA or ROCm layer receive, so that none of them reads the
 * Python object again. The stream values of the array API standard, by the
 * memory's device family:
 *
 *   CUDA family (kDLCUDA, kDLCUDAHost, kDLCUDAManaged)
 *   stream                      given  sync  handle
 *   None (the default)            0     1     1   legacy default; a host reader waits
 *   1                             1     1     1   CU_STREAM_LEGACY
 *   2                             1     1     2   CU_STREAM_PER_THREAD
 *   h > 2 (below 2**64 - 1)       1     1     h   a CUstream
 *   __cuda_stream__() == (0, h)   1     1     h   (h 0, CUDA's NULL stream: 1)
 *   -1                            1     0     1   the producer must not synchronize
 *   0                             ValueError (ambiguous)
 *
 *   ROCm family (kDLROCM, kDLROCMHost)
 *   None (the default)            0     1     0   the default stream
 *   0                             1     1     0   the default stream
 *   h > 2 (below 2**64 - 1)       1     1     h   a hipStream_t
 *   -1                            1     0     0   the producer must not synchronize
 *   1, 2                          ValueError (not supported on ROCm)
 *   an object (__cuda_stream__ too) TypeError
 *
 * Memory of any other device (CPU among them) accepts only None. The handle
 * is always a stream a copy can run on: with sync 0 a copy runs on the
 * default stream (CUDA's legacy one). */
typedef struct dlpack_ref_stream {
    int given;         /* 0: stream=None, the argument's default */
    int sync;          /* 0: stream=-1, nothing is to be ordered */
    uintptr_t handle;  /* the driver stream: CUDA 1 legacy default, 2 per-thread default, > 2 a CUstream;
                          ROCm 0 the default stream, > 2 a hipStream_t */
} dlpack_ref_stream;

/* What stream=None parses to for CUDA-family memory (and memory of no
 * stream rule). */
static inline dlpack_ref_stream dlpack_ref_stream_none(void) {
    dlpack_ref_stream s = {0, 1, 1};
    return s;
}

/* What stream=None parses to for ROCm-family memory. */
static inline dlpack_ref_stream dlpack_ref_stream_none_rocm(void) {
    dlpack_ref_stream s = {0, 1, 0};
    return s;
}

/* A stream value for memory that has no stream rule (`device`): refused,
 * naming the array `owner` and the device (ValueError for an int or a
 * stream object, TypeError for anything else). Returns -1. */
static inline int dlpack_ref_priv_stream_off_cuda(PyObject* stream, DLDevice device, PyObject* owner) {
    PyObject *tn, *where;
    char kind[48];
    const char* name = dlpack_ref_device_type_name((int32_t)device.device_type);
    int has_proto = PyObject_HasAttrString(stream, "__cuda_stream__");
    if (name != NULL) PyOS_snprintf(kind, sizeof kind, "%s memory", name);
    else PyOS_snprintf(kind, sizeof kind, "memory of device type %d", (int)device.device_type);
    if (PyLong_Check(stream) || has_proto) {
        tn = dlpack_ref_priv_type_name(owner);
        where = tn == NULL ? NULL : dlpack_ref_device_str(device);
        if (where != NULL)
            PyErr_Format(PyExc_ValueError,
                         "stream=%R was passed to %U.__dlpack__ for memory on %U; only stream=None is accepted for %s",
                         stream, tn, where, kind);
        Py_XDECREF(tn);
        Py_XDECREF(where);
        return -1;
    }
    tn = dlpack_ref_priv_type_name(stream);
    if (tn != NULL) {
        PyErr_Format(PyExc_TypeError, "stream must be None for %s, not %U", kind, tn);
        Py_DECREF(tn);
    }
    return -1;
}

/* An int stream (not bool) as its value `*v` (-1 .. 2**62, where *big is 0)
 * or, when *big is 1, a handle's 64 bits above that: a handle is a pointer,
 * kept as its 64 bits. ValueError for a value below -1 (`accepted` says what
 * is) and for 2**64 - 1 and above (2**64 - 1 would read as -1, no sync; more
 * does not fit), naming a `handle_kind` handle. */
static inline int dlpack_ref_priv_stream_bits(PyObject* stream, const char* handle_kind, const char* accepted,
                                              long long* v, int* big, unsigned long long* u) {
    int overflow = 0;
    *big = 0;
    *v = PyLong_AsLongLongAndOverflow(stream, &overflow);
    if (*v == -1 && PyErr_Occurred()) return -1;
    if (overflow < 0 || (overflow == 0 && *v < -1)) {
        PyErr_Format(PyExc_ValueError, "stream=%R is not valid: expected %s", stream, accepted);
        return -1;
    }
    if (overflow == 0) return 0;
    *u = PyLong_AsUnsignedLongLong(stream);
    if (*u == (unsigned long long)-1) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "stream=%R is not valid: a %s handle is a 64-bit pointer below 2**64 - 1",
                     stream, handle_kind);
        return -1;
    }
    *big = 1;
    return 0;
}

/* A stream int read by dlpack_ref_priv_stream_bits into *out: -1 asks for
 * no synchronization; any other value (read unsigned when above LLONG_MAX) is the handle. */
static inline void dlpack_ref_priv_stream_given(dlpack_ref_stream* out, long long v, int big, unsigned long long u) {
    out->given = 1;
    if (big) out->handle = (uintptr_t)u;
    else if (v == -1) out->sync = 0;
    else out->handle = (uintptr_t)v;
}

/* A CUDA int stream (not bool) into *out: -1, 1, 2 or a 64-bit handle > 2. */
static inline int dlpack_ref_priv_stream_int(PyObject* stream, dlpack_ref_stream* out) {
    long long v;
    unsigned long long u;
    int big;
    if (dlpack_ref_priv_stream_bits(stream, "CUstream", "None, -1, 1, 2 or a CUstream handle > 2", &v, &big, &u) < 0)
        return -1;
    if (!big && v == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stream=0 is ambiguous and not allowed (use 1 for the legacy default stream, 2 for the "
                        "per-thread default stream, or a CUstream handle > 2)");
        return -1;
    }
    dlpack_ref_priv_stream_given(out, v, big, u);
    return 0;
}

/* A ROCm stream (anything but None) into *out: -1, 0 or a 64-bit hipStream_t
 * handle > 2; 1 and 2, CUDA's default streams, have no meaning on ROCm. */
static inline int dlpack_ref_priv_stream_rocm(PyObject* stream, dlpack_ref_stream* out) {
    long long v;
    unsigned long long u;
    int big;
    PyObject* tn;
    if (!PyLong_Check(stream) || PyBool_Check(stream)) {
        tn = dlpack_ref_priv_type_name(stream);
        if (tn != NULL) {
            PyErr_Format(PyExc_TypeError, "stream must be None or an int (-1, 0 or a hipStream_t handle > 2) for "
                         "ROCm memory, not %U", tn);
            Py_DECREF(tn);
        }
        return -1;
    }
    if (dlpack_ref_priv_stream_bits(stream, "hipStream_t", "None, -1, 0 or a hipStream_t handle > 2", &v, &big,
                                    &u) < 0)
        return -1;
    if (!big && (v == 1 || v == 2)) {
        PyErr_Format(PyExc_ValueError,
                     "stream=%R is not supported for ROCm memory (1 and 2 name CUDA's default streams; use 0 for "
                     "the default stream, -1 for no synchronization, or a hipStream_t handle > 2)", stream);
        return -1;
    }
    dlpack_ref_priv_stream_given(out, v, big, u);
    return 0;
}

/* The handle of __cuda_stream__'s answer `info` ((0, handle), handle from 0
 * to 2**64 - 2) into *out; -1 with no error set for any other answer. */
static inline int dlpack_ref_priv_stream_answer(PyObject* info, dlpack_ref_stream* out) {
    int overflow = 0;
    if (PyTuple_Check(info) && DLPACK_REF_TUPLE_SIZE(info) == 2 && PyLong_Check(DLPACK_REF_TUPLE_ITEM(info, 0))
            && !PyBool_Check(DLPACK_REF_TUPLE_ITEM(info, 1)) && PyLong_Check(DLPACK_REF_TUPLE_ITEM(info, 1))) {
        long long version = PyLong_AsLongLongAndOverflow(DLPACK_REF_TUPLE_ITEM(info, 0), &overflow);
        if (!overflow && version == 0) {
            unsigned long long handle = PyLong_AsUnsignedLongLong(DLPACK_REF_TUPLE_ITEM(info, 1));
            /* 2**64 - 1 would read as -1 (no sync): refused with the rest. */
            if (handle != (unsigned long long)-1) {
                out->given = 1;
                out->handle = handle == 0 ? 1 : (uintptr_t)handle;
                return 0;
            }
        }
    }
    PyErr_Clear();
    return -1;
}

/* An object with __cuda_stream__ (TypeError for one without) into *out. */
static inline int dlpack_ref_priv_stream_object(PyObject* stream, dlpack_ref_stream* out) {
    PyObject *proto, *info, *tn;
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
    if (dlpack_ref_priv_stream_answer(info, out) == 0) {
        Py_DECREF(info);
        return 0;
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

/* The stream rule: a DLPack `stream` argument for memory on `device`
 * parsed into *out (the table above): CUDA's values when `cuda_memory`,
 * else ROCm's for a ROCm-family `device`, else None alone. TypeError for a
 * wrong type, ValueError for a bad value. `owner` names the array in
 * messages. The one place the rule is written: the producer call, the
 * core's to_device and dlpack_ref.cuda.stream parse with it, and hand on the
 * struct. 0, or -1 with the error set (*out is then None's). */
static inline int dlpack_ref_stream_parse(PyObject* stream, int cuda_memory, DLDevice device, PyObject* owner,
                                          dlpack_ref_stream* out) {
    int rocm = !cuda_memory && dlpack_ref_device_rocm_family((int32_t)device.device_type);
    *out = rocm ? dlpack_ref_stream_none_rocm() : dlpack_ref_stream_none();
    if (stream == Py_None) return 0;
    if (rocm) {
        if (dlpack_ref_priv_stream_rocm(stream, out) == 0) return 0;
        *out = dlpack_ref_stream_none_rocm();
        return -1;
    }
    if (!cuda_memory) return dlpack_ref_priv_stream_off_cuda(stream, device, owner);
    if (PyBool_Check(stream)) {
        PyErr_SetString(PyExc_TypeError, "stream must be None, an int or an object with __cuda_stream__, not bool");
        return -1;
    }
    if (PyLong_Check(stream)) {
        if (dlpack_ref_priv_stream_int(stream, out) == 0) return 0;
    } else if (dlpack_ref_priv_stream_object(stream, out) == 0) {
        return 0;
    }
    *out = dlpack_ref_stream_none();
    return -1;
}

/* The stream rule as an "O&" converter of PyArg_ParseTuple and its kind, for
 * a stream of CUDA-family memory: `obj` parsed into the dlpack_ref_stream
 * at `out`. 1, or 0 with the error set. */
static inline int dlpack_ref_stream_converter(PyObject* obj, void* out) {
    DLDevice cuda = {kDLCUDA, 0};
    return dlpack_ref_stream_parse(obj, 1, cuda, Py_None, (dlpack_ref_stream*)out) == 0;
}

/* The same for a stream of ROCm-family memory (start *out at
 * dlpack_ref_stream_none_rocm() for an optional argument). */
static inline int dlpack_ref_stream_converter_rocm(PyObject* obj, void* out) {
    DLDevice rocm = {kDLROCM, 0};
    return dlpack_ref_stream_parse(obj, 0, rocm, Py_None, (dlpack_ref_stream*)out) == 0;
}

/* The parsed stream as one int64, as releases before the struct gave it:
 * the handle (a handle above 2**63 as its 64 bits), or -1 for no sync. */
static inline int dlpack_ref_stream_value(PyObject* stream, int cuda_memory, DLDevice device, PyObject* owner,
                                          int64_t* out) {
    dlpack_ref_stream s;
    if (dlpack_ref_stream_parse(stream, cuda_memory, device, owner, &s) < 0) return -1;
    *out = s.sync ? (int64_t)s.handle : -1;
    return 0;
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
