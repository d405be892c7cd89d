/* --- the producer protocol: __dlpack__ and __dlpack_device__ ---------------- */

/* What an adopter's array tells the producer call. The callbacks return 0,
 * or -1 with a Python exception set (which the call propagates). */
typedef struct dlpack_ref_producer {
    DLTensor tensor;     /* the memory as it is; strides NULL means row-major */
    PyObject* owner;     /* kept alive by the capsule until its deleter runs */
    int read_only;       /* exported with READ_ONLY; refused as legacy */
    uint64_t flags;      /* more flags, e.g. DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED */
    void* ctx;           /* handed to the callbacks */
    /* A copy of `src` usable on `target`, ordered on the consumer's stream
       (as parsed once, where the argument entered): fill *out (its shape and
       strides need live only until the call returns) and *out_owner (a new
       reference keeping out's memory alive). A device it cannot copy to:
       BufferError. NULL: the array cannot be copied. */
    int (*copy)(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* stream, DLTensor* out,
                PyObject** out_owner);
    /* Make the consumer's stream (as parsed: a CUDA stream for CUDA-family
       memory, a HIP stream for ROCm-family memory) wait for pending work on
       the memory. Called for memory of either family exported in place,
       unless stream is -1 (stream->sync 0). NULL: no work is ever pending. */
    int (*order)(void* ctx, const DLTensor* t, const dlpack_ref_stream* stream);
} dlpack_ref_producer;

/* The legacy capsule cannot say read-only, nor that sub-byte data is stored
 * one element per byte: BufferError naming the fix. */
static inline int dlpack_ref_priv_refuse_legacy(const DLTensor* t, uint64_t flags, PyObject* owner) {
    PyObject* tn;
    int read_only = (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    int padded = (int64_t)t->dtype.bits * t->dtype.lanes < 8 && (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
    if (!read_only && !padded) return 0;
    tn = dlpack_ref_priv_type_name(owner);
    if (tn == NULL) return -1;
    if (read_only)
        PyErr_Format(PyExc_BufferError,
                     "a read-only %U cannot be exported as a legacy 'dltensor' capsule (it has no read-only flag); "
                     "pass max_version=(1, 0) or newer, or copy=True", tn);
    else {
        const char* name = dlpack_ref_dtype_name(t->dtype.code, t->dtype.bits, t->dtype.lanes);
        PyErr_Format(PyExc_BufferError,
                     "a %s %U stored one element per byte cannot be exported as a legacy 'dltensor' capsule "
                     "(legacy sub-byte data is packed); pass max_version=(1, 0) or newer",
                     name ? name : "sub-byte", tn);
    }
    Py_DECREF(tn);
    return -1;
}

static inline int dlpack_ref_check_legacy_export(const DLTensor* t, uint64_t flags, PyObject* owner) {
    /* The common case decided here, where the compiler inlines it. */
    if (!(flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED))) return 0;
    return dlpack_ref_priv_refuse_legacy(t, flags, owner);
}

/* The flags an in-place export of `p` carries: READ_ONLY for a read-only
 * array, IS_SUBBYTE_TYPE_PADDED as described (the table's export uses the
 * same, so the two cannot disagree). */
static inline uint64_t dlpack_ref_priv_export_flags(const dlpack_ref_producer* p) {
    return (p->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) | (p->read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
}

/* What a __dlpack__ call exports, decided but not yet made: the tensor the
 * capsule will describe and what keeps its memory alive. Made by
 * dlpack_ref_producer_plan, used once by one of the dlpack_ref_export_plan*
 * calls (or dropped with dlpack_ref_export_plan_drop); not to be copied
 * (`tensor` may point into it). */
typedef struct dlpack_ref_export_plan {
    const DLTensor* tensor;   /* the array's memory as it is, or the copy (`copied`) */
    PyObject* owner;          /* keeps tensor's memory alive: p->owner (borrowed), or the copy's owner */
    PyObject* copy_owner;     /* the copy's owner, a reference the export gives back; NULL: no copy */
    uint64_t flags;           /* the capsule's flags */
    int versioned;            /* 1: dltensor_versioned, 0: a legacy dltensor */
    DLTensor copied;          /* the copy's description (its shape and strides are the copy owner's) */
} dlpack_ref_export_plan;

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
 * of the array `p` describes, its arguments already unpacked, up to the
 * capsule: every argument checked (TypeError for a wrong type, ValueError
 * for a bad value), a legacy or a versioned capsule chosen by max_version, a
 * copy made through p->copy when copy=True or dl_device cannot use the
 * memory in place (IS_COPIED set; copy=False then raises
 * CopyForbiddenError), the consumer's stream ordered through p->order
 * otherwise, READ_ONLY set for a read-only array, a legacy export refused
 * where it cannot say what it holds. 0 with *plan filled, or -1 with the
 * error set (and nothing held). */
static inline int dlpack_ref_producer_plan(const dlpack_ref_producer* p, PyObject* stream, PyObject* max_version,
                                           PyObject* dl_device, PyObject* copy, dlpack_ref_export_plan* plan) {
    dlpack_ref_stream s;
    int versioned, cuda_family, ordered;
    DLDevice target;
    plan->tensor = &p->tensor;
    plan->owner = p->owner;
    plan->copy_owner = NULL;
    if (max_version == Py_None && stream == Py_None && dl_device == Py_None && copy == Py_None) {
        /* The oldest consumers' call, and a hot one: with no stream work to
           order (memory of no stream rule, or no order callback) nothing is
           left to decide but the legacy capsule's limits. */
        if (!(dlpack_ref_device_streamed((int32_t)p->tensor.device.device_type) && p->order != NULL)) {
            plan->flags = dlpack_ref_priv_export_flags(p);
            plan->versioned = 0;
            return dlpack_ref_check_legacy_export(&p->tensor, plan->flags, p->owner);
        }
    }
    versioned = dlpack_ref_wants_versioned(max_version);
    if (versioned < 0 || dlpack_ref_check_copy_arg(copy) < 0) return -1;
    plan->versioned = versioned;
    cuda_family = dlpack_ref_device_cuda_family((int32_t)p->tensor.device.device_type);
    /* None, the common case, parsed here, where the compiler inlines it. */
    if (stream == Py_None) s = dlpack_ref_stream_none();
    else if (dlpack_ref_stream_parse(stream, cuda_family, p->tensor.device, p->owner, &s) < 0) return -1;
    /* ROCm memory is ordered as CUDA's is, on a HIP stream; its None names
       the default stream, handle 0 (tested after the CPU's common case). */
    ordered = cuda_family;
    if (!cuda_family && dlpack_ref_device_rocm_family((int32_t)p->tensor.device.device_type)) {
        ordered = 1;
        if (stream == Py_None) s = dlpack_ref_stream_none_rocm();
    }
    plan->flags = dlpack_ref_priv_export_flags(p);
    if (dl_device == Py_None && copy != Py_True) {
        if (ordered && p->order != NULL && s.sync && p->order(p->ctx, &p->tensor, &s) < 0) return -1;
    } else {
        if (dl_device == Py_None) target = p->tensor.device;
        else if (dlpack_ref_parse_dl_device(dl_device, &target) < 0) return -1;
        if (copy == Py_True || !dlpack_ref_can_access(target, p->tensor.device)) {
            if (copy == Py_False) return dlpack_ref_refuse_copy(p->tensor.device, target, 0);
            if (p->copy == NULL) {
                PyObject* tn = dlpack_ref_priv_type_name(p->owner);
                PyObject* where = tn == NULL ? NULL : dlpack_ref_device_str(target);
                if (where != NULL)
                    PyErr_Format(PyExc_BufferError, "this %U cannot be copied (asked for a copy on %U)", tn, where);
                Py_XDECREF(tn);
                Py_XDECREF(where);
                return -1;
            }
            if (p->copy(p->ctx, &p->tensor, target, &s, &plan->copied, &plan->copy_owner) < 0)
                return -1;
            plan->tensor = &plan->copied;
            plan->owner = plan->copy_owner;
            /* A copy is fresh memory: writable, laid out by the copy. */
            plan->flags = DLPACK_FLAG_BITMASK_IS_COPIED
                          | ((int64_t)plan->copied.dtype.bits * plan->copied.dtype.lanes < 8
                             ? (p->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) : 0);
        } else if (ordered && p->order != NULL && s.sync && p->order(p->ctx, &p->tensor, &s) < 0) {
            return -1;
        }
    }
    if (!versioned && dlpack_ref_check_legacy_export(plan->tensor, plan->flags, plan->owner) < 0) {
        Py_CLEAR(plan->copy_owner);
        return -1;
    }
    return 0;
}

/* Drop a plan that will not be exported (gives the copy's owner back). */
static inline void dlpack_ref_export_plan_drop(dlpack_ref_export_plan* plan) {
    Py_CLEAR(plan->copy_owner);
}

/* The capsule of a plan, owned by plan->owner (a reference to it kept until
 * the consumer's deleter call); the plan is used up. */
static inline PyObject* dlpack_ref_export_plan_capsule(dlpack_ref_export_plan* plan) {
    PyObject* capsule = plan->versioned ? dlpack_ref_export_versioned(plan->tensor, plan->owner, plan->flags)
                                        : dlpack_ref_export_legacy(plan->tensor, plan->owner);
    Py_XDECREF(plan->copy_owner);
    return capsule;
}

/* The capsule of a plan whose memory (plan->tensor's: the array's, or the
 * copy's) is owned by the count `memory`, which the capsule holds one of
 * instead of plan->owner: its deleter needs no Python. The plan is used up. */
static inline PyObject* dlpack_ref_export_plan_capsule_counted(dlpack_ref_export_plan* plan,
                                                               dlpack_ref_counted* memory) {
    PyObject* capsule = plan->versioned ? dlpack_ref_export_versioned_counted(plan->tensor, memory, plan->flags)
                                        : dlpack_ref_export_legacy_counted(plan->tensor, memory);
    Py_XDECREF(plan->copy_owner);
    return capsule;
}

/* The capsule of a plan whose in-place memory the library holds by `ctx`
 * and gives back with `release` (see "export of memory with the library's
 * own release function"): the caller made one hold for it, which this call
 * takes over in every case. A copy (copy=True, or a dl_device that needs
 * one) is owned by the copy's owner instead, and the hold is given back at
 * once. The plan is used up. */
static inline PyObject* dlpack_ref_export_plan_capsule_released(dlpack_ref_export_plan* plan, void* ctx,
                                                                void (*release)(void* ctx)) {
    PyObject* capsule;
    if (plan->copy_owner != NULL) {
        capsule = dlpack_ref_export_plan_capsule(plan);
        DLPACK_REF_PRIV_KEEP_ERROR(release(ctx));
        return capsule;
    }
    return plan->versioned ? dlpack_ref_export_versioned_released(plan->tensor, ctx, release, plan->flags)
                           : dlpack_ref_export_legacy_released(plan->tensor, ctx, release);
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
 * of the array `p` describes, its arguments already unpacked: the capsule of
 * dlpack_ref_producer_plan's decision, owned by p->owner (or the copy's
 * owner). Returns the capsule (new reference) or NULL with the error set. */
static inline PyObject* dlpack_ref_producer_export(const dlpack_ref_producer* p, PyObject* stream,
                                                   PyObject* max_version, PyObject* dl_device, PyObject* copy) {
    dlpack_ref_export_plan plan;
    if (dlpack_ref_producer_plan(p, stream, max_version, dl_device, copy, &plan) < 0) return NULL;
    return dlpack_ref_export_plan_capsule(&plan);
}

/* Which of __dlpack__'s four keyword-only arguments `key` names: 0 stream,
 * 1 max_version, 2 dl_device, 3 copy; -1 with the TypeError of an unknown
 * keyword. Interned names (what Python passes) are matched by pointer. */
static inline int dlpack_ref_priv_dlpack_arg(const dlpack_ref_names* n, PyObject* key) {
    PyObject* known[4];
    int i;
    known[0] = n->stream;
    known[1] = n->max_version;
    known[2] = n->dl_device;
    known[3] = n->copy;
    for (i = 0; i < 4; ++i)
        if (key == known[i]) return i;
    for (i = 0; i < 4; ++i)
        if (PyUnicode_Check(key) && PyUnicode_Compare(key, known[i]) == 0) return i;
    if (PyErr_Occurred()) return -1;
    PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument %R", key);
    return -1;
}

static inline PyObject* dlpack_ref_priv_no_positional(Py_ssize_t nargs) {
    PyErr_Format(PyExc_TypeError, "__dlpack__() takes no positional arguments (%zd given)", nargs);
    return NULL;
}

/* The producer call for a method defined with METH_VARARGS | METH_KEYWORDS:
 * the four arguments are keyword-only. */
static inline PyObject* dlpack_ref_producer_dlpack(const dlpack_ref_producer* p, PyObject* args, PyObject* kwargs) {
    const dlpack_ref_names* n = dlpack_ref_protocol_names();
    PyObject* v[4] = {Py_None, Py_None, Py_None, Py_None};
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int i;
    if (n == NULL) return NULL;
    if (args != NULL && DLPACK_REF_TUPLE_SIZE(args) != 0) return dlpack_ref_priv_no_positional(DLPACK_REF_TUPLE_SIZE(args));
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        if ((i = dlpack_ref_priv_dlpack_arg(n, key)) < 0) return NULL;
        v[i] = value;
    }
    return dlpack_ref_producer_export(p, v[0], v[1], v[2], v[3]);
}

/* __dlpack__'s arguments as a METH_FASTCALL | METH_KEYWORDS method receives
 * them (`args`, `nargs`, `kwnames`), into out[0..3]: stream, max_version,
 * dl_device, copy (borrowed; None where not passed). 0, or -1 with the
 * TypeError of a positional or unknown argument. For a producer that builds
 * its capsule itself (dlpack_ref_producer_plan and one of the plan's exports). */
static inline int dlpack_ref_dlpack_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                                         PyObject** out) {
    const dlpack_ref_names* n;
    Py_ssize_t k, nk;
    int i;
    out[0] = out[1] = out[2] = out[3] = Py_None;
    if (nargs != 0) { dlpack_ref_priv_no_positional(nargs); return -1; }
    if (kwnames != NULL && (nk = DLPACK_REF_TUPLE_SIZE(kwnames)) != 0) {
        if ((n = dlpack_ref_protocol_names()) == NULL) return -1;
        for (k = 0; k < nk; ++k) {
            if ((i = dlpack_ref_priv_dlpack_arg(n, DLPACK_REF_TUPLE_ITEM(kwnames, k))) < 0) return -1;
            out[i] = args[k];
        }
    }
    return 0;
}

/* The same call for a method defined with METH_FASTCALL | METH_KEYWORDS
 * (vectorcall: no argument tuple or keyword dict is built), the faster
 * entry: `args`, `nargs` and `kwnames` as the method receives them. */
static inline PyObject* dlpack_ref_producer_dlpack_fast(const dlpack_ref_producer* p, PyObject* const* args,
                                                        Py_ssize_t nargs, PyObject* kwnames) {
    PyObject* v[4];
    if (dlpack_ref_dlpack_args(args, nargs, kwnames, v) < 0) return NULL;
    return dlpack_ref_producer_export(p, v[0], v[1], v[2], v[3]);
}

/* The enum DLPack devices are reported in when dlpack-ref is not there: an
 * IntEnum `DeviceType` with dlpack_ref.DeviceType's names and values, made
 * once (borrowed reference, NULL with an error set). */
static PyObject* dlpack_ref_priv_device_enum = NULL;

static inline PyObject* dlpack_ref_device_enum(void) {
    if (dlpack_ref_priv_device_enum == NULL) {
        PyObject *enum_module, *members, *cls = NULL;
        int32_t v;
        enum_module = PyImport_ImportModule("enum");
        if (enum_module == NULL) return NULL;
        members = PyList_New(0);
        for (v = 1; members != NULL && v < 64; ++v) {
            const char* name = dlpack_ref_device_type_name(v);
            PyObject* item;
            if (name == NULL) continue;
            item = Py_BuildValue("(si)", name, (int)v);
            if (item == NULL || PyList_Append(members, item) < 0) { Py_XDECREF(item); Py_CLEAR(members); break; }
            Py_DECREF(item);
        }
        if (members != NULL) cls = PyObject_CallMethod(enum_module, "IntEnum", "sO", "DeviceType", members);
        Py_DECREF(enum_module);
        Py_XDECREF(members);
        if (cls == NULL) return NULL;
        if (dlpack_ref_priv_device_enum == NULL) dlpack_ref_priv_device_enum = cls;
        else Py_DECREF(cls);
    }
    return dlpack_ref_priv_device_enum;
}

/* __dlpack_device__ answers are made once and kept: the DeviceType member of
 * each device type, and the (member, id) tuple of each device with an id
 * below DLPACK_REF_PRIV_ANSWER_IDS, in slots of this translation unit filled
 * at first use. A call is then a load and an incref, as NumPy's answer is
 * (calling the enum class and building a tuple per call costs eight times
 * as many instructions). Slots are published with one compare-and-swap: two
 * threads that fill one at once (free threading) keep the first answer. */
#define DLPACK_REF_PRIV_ANSWER_TYPES 64
#define DLPACK_REF_PRIV_ANSWER_IDS 16
static PyObject* dlpack_ref_priv_device_members[DLPACK_REF_PRIV_ANSWER_TYPES];
static PyObject* dlpack_ref_priv_device_answers[DLPACK_REF_PRIV_ANSWER_TYPES][DLPACK_REF_PRIV_ANSWER_IDS];

#if defined(_MSC_VER) && !defined(__clang__)
#define DLPACK_REF_PRIV_SLOT_ACQUIRE(slot) (*(PyObject* volatile*)(slot))
#else
#define DLPACK_REF_PRIV_SLOT_ACQUIRE(slot) __atomic_load_n((slot), __ATOMIC_ACQUIRE)
#endif

/* Keep `made` in an empty `slot` (the slot owns the reference) and return
 * what the slot holds: `made`, or an answer another thread kept first
 * (`made` is then dropped). Borrowed reference. */
static inline PyObject* dlpack_ref_priv_keep_answer(PyObject** slot, PyObject* made) {
    if (DLPACK_REF_PRIV_SLOT_GIVE((void**)slot, made)) return made;
    Py_DECREF(made);
    return DLPACK_REF_PRIV_SLOT_ACQUIRE(slot);
}

/* The DeviceType member of device type `type` (borrowed reference; NULL with
 * the enum's ValueError for a type DLPack does not define). */
static inline PyObject* dlpack_ref_priv_device_member(int32_t type) {
    PyObject *cls, *member;
    int cached = type >= 0 && type < DLPACK_REF_PRIV_ANSWER_TYPES;
    if (cached && (member = DLPACK_REF_PRIV_SLOT_ACQUIRE(&dlpack_ref_priv_device_members[type])) != NULL)
        return member;
    if ((cls = dlpack_ref_device_enum()) == NULL) return NULL;
    if ((member = PyObject_CallFunction(cls, "i", (int)type)) == NULL) return NULL;
    if (!cached) {   /* the enum has no value past the slots; no slot, so no borrowed reference to hand out */
        Py_DECREF(member);
        PyErr_Format(PyExc_ValueError, "%d is not a valid DeviceType", (int)type);
        return NULL;
    }
    return dlpack_ref_priv_keep_answer(&dlpack_ref_priv_device_members[type], member);
}

/* __dlpack_device__(): (DeviceType member, device_id) of `device`, where the
 * memory truly lives (new reference, NULL with an error set). The same tuple
 * object is returned for every call on one device. */
static inline PyObject* dlpack_ref_dlpack_device(DLDevice device) {
    int32_t type = (int32_t)device.device_type;
    PyObject *member, *answer;
    int cached = type >= 0 && type < DLPACK_REF_PRIV_ANSWER_TYPES && device.device_id >= 0
                 && device.device_id < DLPACK_REF_PRIV_ANSWER_IDS;
    if (cached && (answer = DLPACK_REF_PRIV_SLOT_ACQUIRE(&dlpack_ref_priv_device_answers[type][device.device_id]))
                      != NULL) {
        Py_INCREF(answer);
        return answer;
    }
    if ((member = dlpack_ref_priv_device_member(type)) == NULL) return NULL;
    if ((answer = Py_BuildValue("(Oi)", member, (int)device.device_id)) == NULL) return NULL;
    if (!cached) return answer;
    answer = dlpack_ref_priv_keep_answer(&dlpack_ref_priv_device_answers[type][device.device_id], answer);
    Py_INCREF(answer);
    return answer;
}
