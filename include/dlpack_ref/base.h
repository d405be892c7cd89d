/* --- the capsule names and limits of the Python protocol ------------------
 * Not in dlpack.h, so written here once; dlpack.pxd declares them for
 * Cython, and the core exports them to Python (dlpack_ref.CAPSULE_NAMES). */
#ifndef DLPACK_REF_PROTOCOL_NAMES
#define DLPACK_REF_PROTOCOL_NAMES
#define DLPACK_REF_CAPSULE_VERSIONED "dltensor_versioned"
#define DLPACK_REF_CAPSULE_LEGACY "dltensor"
#define DLPACK_REF_CAPSULE_USED_VERSIONED "used_dltensor_versioned"
#define DLPACK_REF_CAPSULE_USED_LEGACY "used_dltensor"
#define DLPACK_REF_CAPSULE_EXCHANGE_API "dlpack_exchange_api"
/* The most dimensions a tensor may have (NumPy 2 allows as many). */
#define DLPACK_REF_MAX_NDIM 64
/* How many prev_api links are followed before a table is judged cyclic. */
#define DLPACK_REF_MAX_API_CHAIN 16
#endif

/* A capsule's critical section (free-threaded 3.13+); the GIL serializes
 * the same code elsewhere. The limited API has none: a free-threaded build
 * under it would claim capsules unserialized, so it is refused. */
#if defined(Py_LIMITED_API) && defined(Py_GIL_DISABLED)
#error "dlpack_ref.h: Py_LIMITED_API on a free-threaded build has no critical sections to serialize capsule claims"
#endif
#if PY_VERSION_HEX >= 0x030D0000 && !defined(Py_LIMITED_API)
#define DLPACK_REF_BEGIN_CRITICAL_SECTION(o) Py_BEGIN_CRITICAL_SECTION(o)
#define DLPACK_REF_END_CRITICAL_SECTION() Py_END_CRITICAL_SECTION()
#else
#define DLPACK_REF_BEGIN_CRITICAL_SECTION(o) {
#define DLPACK_REF_END_CRITICAL_SECTION() }
#endif

/* Tuple access. The limited API (Py_LIMITED_API, abi3) has no access
 * macros: there the checked calls stand in (one call each, and the item
 * set steals the reference alike); every other build uses the macros. */
#ifdef Py_LIMITED_API
#define DLPACK_REF_TUPLE_SIZE(t) PyTuple_Size(t)
#define DLPACK_REF_TUPLE_ITEM(t, i) PyTuple_GetItem((t), (i))
#define DLPACK_REF_TUPLE_SET(t, i, v) ((void)PyTuple_SetItem((t), (i), (v)))
#else
#define DLPACK_REF_TUPLE_SIZE(t) PyTuple_GET_SIZE(t)
#define DLPACK_REF_TUPLE_ITEM(t, i) PyTuple_GET_ITEM((t), (i))
#define DLPACK_REF_TUPLE_SET(t, i, v) PyTuple_SET_ITEM((t), (i), (v))
#endif

/* A DLPack tensor taken from a capsule or a producer. The holder owns it:
 * dlpack_ref_release runs its deleter exactly once. */
typedef struct DLPackRefTensor {
    DLTensor* dl_tensor;
    uint64_t flags;   /* DLPACK_FLAG_BITMASK_*; 0 for legacy */
    void* managed;    /* DLManagedTensorVersioned* or DLManagedTensor* */
    int versioned;
} DLPackRefTensor;

/* --- small helpers (not part of the API) ---------------------------------- */

/* The tuple of n int64 values, for messages (NULL with an error set). */
static inline PyObject* dlpack_ref_priv_tuple(const int64_t* v, int32_t n) {
    int32_t i;
    PyObject* t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (i = 0; i < n; ++i) {
        PyObject* item = PyLong_FromLongLong((long long)v[i]);
        if (item == NULL) { Py_DECREF(t); return NULL; }
        DLPACK_REF_TUPLE_SET(t, i, item);
    }
    return t;
}

/* type(o).__name__, as a new reference (NULL with an error set). */
static inline PyObject* dlpack_ref_priv_type_name(PyObject* o) {
    return PyObject_GetAttrString((PyObject*)Py_TYPE(o), "__name__");
}

/* Run `fn(arg)` with the pending exception (if any) put aside: a deleter may
 * run Python code (an owner's finalizer), which must not see it. The
 * limited API has PyErr_GetRaisedException from 3.12 on. */
#if PY_VERSION_HEX >= 0x030C0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030C0000)
#define DLPACK_REF_PRIV_KEEP_ERROR(call)                 \
    do {                                                 \
        PyObject* dlref_pending_ = PyErr_GetRaisedException(); \
        call;                                            \
        PyErr_SetRaisedException(dlref_pending_);        \
    } while (0)
#else
/* Fetch and Restore cost more than the deleter of a buffer; with nothing
   pending (every release), only an error `call` leaves is cleared. */
#define DLPACK_REF_PRIV_KEEP_ERROR(call)                                      \
    do {                                                                      \
        PyObject *dlref_t_ = NULL, *dlref_v_ = NULL, *dlref_tb_ = NULL;       \
        int dlref_pending_ = PyErr_Occurred() != NULL;                        \
        if (dlref_pending_) PyErr_Fetch(&dlref_t_, &dlref_v_, &dlref_tb_);    \
        call;                                                                 \
        if (dlref_pending_ || PyErr_Occurred() != NULL)                       \
            PyErr_Restore(dlref_t_, dlref_v_, dlref_tb_);                     \
    } while (0)
#endif

/* --- sizes ----------------------------------------------------------------- */

/* Bits one element occupies in memory: bits * lanes, or 8 for sub-byte types
 * stored one per byte (IS_SUBBYTE_TYPE_PADDED). */
static inline int64_t dlpack_ref_storage_bits(DLDataType dtype, uint64_t flags) {
    int64_t bits = (int64_t)dtype.bits * dtype.lanes;
    if (bits < 8 && (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)) return 8;
    return bits;
}

/* Bytes that `count` elements of `storage_bits` bits occupy (packed sub-byte
 * data rounds up to whole bytes). The callers' checks keep it in int64. */
static inline int64_t dlpack_ref_nbytes(int64_t count, int64_t storage_bits) {
    return (count * storage_bits + 7) / 8;
}

/* The product of the extents; -1 when one is negative, -2 when the product
 * overflows int64 (a zero extent makes any shape's product 0). */
static inline int64_t dlpack_ref_element_count(const int64_t* shape, int32_t ndim) {
    int64_t n = 1;
    int32_t i;
    for (i = 0; i < ndim; ++i) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) n = 0;
    }
    if (n == 0) return 0;
    for (i = 0; i < ndim; ++i) {
        int64_t extent = shape[i];
        /* Extents of 1 (common at high ndim) change nothing: no division. */
        if (extent != 1) {
            if (n > INT64_MAX / extent) return -2;
            n *= extent;
        }
    }
    return n;
}

/* Elements between the first and the farthest element, sum |stride| *
 * (extent - 1), for a non-empty tensor; -1 when it overflows int64 or a
 * stride is INT64_MAX or INT64_MIN. */
static inline int64_t dlpack_ref_span(const int64_t* shape, const int64_t* strides, int32_t ndim) {
    int64_t span = 0;
    int32_t i;
    for (i = 0; i < ndim; ++i) {
        int64_t stride = strides[i];
        /* The two extreme values cannot be negated or stepped over, whatever
           the extent: refused on every axis. */
        if (stride == INT64_MAX || stride < -INT64_MAX) return -1;
        if (shape[i] <= 1) continue;
        if (stride < 0) stride = -stride;
        if (stride && shape[i] - 1 > (INT64_MAX - span) / stride) return -1;
        span += stride * (shape[i] - 1);
    }
    return span;
}


/* The names of the capsules made here, and the names a claimed capsule
 * gets. The capsule keeps the pointer and the other side compares it
 * (strcmp) on every import and release, so each is a 32-byte array,
 * 32-byte aligned where the compiler allows it: a string that starts near
 * the end of a memory page takes the slow path of the vectorized strcmp
 * (NumPy's deleter paid about 60 instructions more per import). */
#if defined(__GNUC__) || defined(__clang__)
#define DLPACK_REF_PRIV_ALIGN32 __attribute__((aligned(32)))
#else
#define DLPACK_REF_PRIV_ALIGN32
#endif
static const char dlpack_ref_priv_name_versioned[32] DLPACK_REF_PRIV_ALIGN32 = DLPACK_REF_CAPSULE_VERSIONED;
static const char dlpack_ref_priv_name_legacy[32] DLPACK_REF_PRIV_ALIGN32 = DLPACK_REF_CAPSULE_LEGACY;
static const char dlpack_ref_priv_used_versioned[32] DLPACK_REF_PRIV_ALIGN32 = DLPACK_REF_CAPSULE_USED_VERSIONED;
static const char dlpack_ref_priv_used_legacy[32] DLPACK_REF_PRIV_ALIGN32 = DLPACK_REF_CAPSULE_USED_LEGACY;
