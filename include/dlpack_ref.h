/* SPDX-License-Identifier: Apache-2.0 */
/* SPDX-FileCopyrightText: dlpack-ref developers */
/*
 * dlpack_ref.h -- the vendorable DLPack protocol of dlpack-ref, in C.
 *
 * C99 and valid C++17. Every function is `static inline`: a library copies
 * this file beside dlpack.h and dlpack_ref_tables.h (the dtype and device
 * tables, generated from dlpack-ref's one Python table when dlpack-ref is
 * built; dlpack_ref.get_include() ships all three) and includes it after
 * Python.h, in as many translation units as it likes. Nothing links against
 * dlpack-ref's compiled module, so the library needs no dlpack-ref at build
 * or run time. Header-only rather than a single-file library with an
 * implementation section: an implementation section needs exactly one
 * translation unit to define a macro, which Cython modules (which include
 * the header from generated C) cannot arrange, and inline functions let the
 * compiler fold the checks into the caller's hot path.
 *
 * dlpack-ref's own core calls these very functions (through the Cython
 * declarations in dlpack_ref_api.pxd), so a library that vendors them gets
 * exactly the reference's rules, not a copy: this file is the one place each
 * rule below is written (docs/vendoring.md).
 *
 * Conventions: a function that can fail returns -1 (or NULL) with a Python
 * exception set, and needs the GIL (or, free-threaded, an attached thread
 * state); deleters and capsule destructors need neither.
 *
 * Contents, in order:
 *   - the capsule names and limits of the Python protocol
 *   - small helpers (private)
 *   - sizes: storage bits, bytes, element count, byte span
 *   - the checks, one rule each: dlpack_check_*
 *   - export: the one allocation block, its deleters, capsule destructors
 *   - export of memory owned by a C reference count (dlpack_ref_counted):
 *     deleters that need no Python
 *   - export of memory with the library's own release function (ctx, release)
 *   - import: claiming a capsule, adopting and releasing a managed tensor,
 *     the exchange table of a type, importing any capsule
 *   - fast calls: interned names, memoized method and table lookups
 *   - calls into another library's exchange table
 *   - devices and arguments of the producer protocol (the stream rule)
 *   - the producer protocol: __dlpack__ and __dlpack_device__ (its plan,
 *     then the capsule owned by a Python object or by a count)
 *   - the exchange-table builder: __dlpack_c_exchange_api__ of an adopter's type
 *   - the consumer protocol: from_dlpack(x, /, *, device=None, copy=None)
 *   - the consumer of memory as bytes: a Py_buffer over the producer's
 *     memory, any device, any data type with a size (dlpack_ref_get_buffer)
 *   - dlpack_ref.Array, through its exchange table (only these two calls
 *     need dlpack-ref installed)
 */
#ifndef DLPACK_REF_H
#define DLPACK_REF_H

#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dlpack.h"
#include "dlpack_ref_tables.h"
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

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
 * the same code elsewhere. */
#if PY_VERSION_HEX >= 0x030D0000 && !defined(Py_LIMITED_API)
#define DLPACK_REF_BEGIN_CRITICAL_SECTION(o) Py_BEGIN_CRITICAL_SECTION(o)
#define DLPACK_REF_END_CRITICAL_SECTION() Py_END_CRITICAL_SECTION()
#else
#define DLPACK_REF_BEGIN_CRITICAL_SECTION(o) {
#define DLPACK_REF_END_CRITICAL_SECTION() }
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
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

/* type(o).__name__, as a new reference (NULL with an error set). */
static inline PyObject* dlpack_ref_priv_type_name(PyObject* o) {
    return PyObject_GetAttrString((PyObject*)Py_TYPE(o), "__name__");
}

/* Run `fn(arg)` with the pending exception (if any) put aside: a deleter may
 * run Python code (an owner's finalizer), which must not see it. */
#if PY_VERSION_HEX >= 0x030C0000
#define DLPACK_REF_PRIV_KEEP_ERROR(call)                 \
    do {                                                 \
        PyObject* dlref_pending_ = PyErr_GetRaisedException(); \
        call;                                            \
        PyErr_SetRaisedException(dlref_pending_);        \
    } while (0)
#else
#define DLPACK_REF_PRIV_KEEP_ERROR(call)                 \
    do {                                                 \
        PyObject *dlref_t_, *dlref_v_, *dlref_tb_;       \
        PyErr_Fetch(&dlref_t_, &dlref_v_, &dlref_tb_);   \
        call;                                            \
        PyErr_Restore(dlref_t_, dlref_v_, dlref_tb_);    \
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

/* --- the checks: one rule each; every consumer calls all of them ------------
 * Each returns 0, or -1 with a BufferError naming the offending value and
 * what is accepted. */

static inline int dlpack_check_ndim(int32_t ndim) {
    if (ndim < 0 || ndim > DLPACK_REF_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError, "DLTensor.ndim=%d is out of range; accepted: 0 to %d", (int)ndim,
                     DLPACK_REF_MAX_NDIM);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_dtype(DLDataType dtype) {
    if (dlpack_ref_dtype_format(dtype.code, dtype.bits, dtype.lanes) == NULL) {
        PyErr_Format(PyExc_BufferError,
                     "unsupported DLDataType(code=%d, bits=%d, lanes=%d): not a DLPack 1.3 data type; "
                     "accepted (code, bits, lanes): %s",
                     (int)dtype.code, (int)dtype.bits, (int)dtype.lanes, DLPACK_REF_DTYPES_ACCEPTED);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_device(DLDevice device) {
    if (!dlpack_ref_device_type_known((int32_t)device.device_type)) {
        PyErr_Format(PyExc_BufferError,
                     "DLTensor.device=(%d, %d) has a device type that DLPack 1.3 does not define; defined: %s",
                     (int)device.device_type, (int)device.device_id, DLPACK_REF_DEVICE_TYPES_ACCEPTED);
        return -1;
    }
    if (device.device_id < 0) {
        PyErr_Format(PyExc_BufferError, "DLTensor.device.device_id=%d is negative", (int)device.device_id);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_shape(const DLTensor* t) {
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_Format(PyExc_BufferError, "DLTensor.shape is NULL with ndim=%d", (int)t->ndim);
        return -1;
    }
    return 0;
}

/* NULL strides meant row-major until DLPack 1.2 made them mandatory. */
static inline int dlpack_check_strides(const DLTensor* t, int null_strides_ok) {
    if (t->ndim > 0 && t->strides == NULL && !null_strides_ok) {
        PyErr_SetString(PyExc_BufferError,
                        "DLTensor.strides is NULL with ndim > 0, which DLPack >= 1.2 forbids (NULL meant "
                        "row-major only in legacy and pre-1.2 capsules)");
        return -1;
    }
    return 0;
}

/* The element count, after checking that it and its size in bytes fit
 * int64; -1 with a BufferError otherwise. */
static inline int64_t dlpack_check_extents(const DLTensor* t, uint64_t flags) {
    int64_t n = dlpack_ref_element_count(t->shape, t->ndim);
    int64_t bits;
    int32_t i;
    PyObject* shape;
    if (n == -1) {
        for (i = 0; i < t->ndim; ++i) {
            if (t->shape[i] < 0) {
                PyErr_Format(PyExc_BufferError, "DLTensor.shape[%d]=%lld is negative", (int)i,
                             (long long)t->shape[i]);
                return -1;
            }
        }
    }
    if (n == -2) {
        n = 1;
        for (i = 0; i < t->ndim; ++i) {
            if (n > INT64_MAX / t->shape[i]) break;
            n *= t->shape[i];
        }
        if (i == t->ndim) i = t->ndim - 1;
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) return -1;
        PyErr_Format(PyExc_BufferError,
                     "DLTensor shape %R overflows int64 at axis %d (extent %lld): more elements than fit "
                     "in int64", shape, (int)i, (long long)t->shape[i]);
        Py_DECREF(shape);
        return -1;
    }
    bits = dlpack_ref_storage_bits(t->dtype, flags);
    if (bits > 0 && n > (INT64_MAX - 7) / bits) {
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) return -1;
        PyErr_Format(PyExc_BufferError, "DLTensor.shape %R of %d-bit elements needs more than 2**63 bytes",
                     shape, (int)t->dtype.bits);
        Py_DECREF(shape);
        return -1;
    }
    return n;
}

/* The farthest element is addressable: its byte distance from the first
 * fits int64. */
static inline int dlpack_check_span(const DLTensor* t, int64_t count, uint64_t flags) {
    int64_t span, bits;
    PyObject *strides, *shape;
    if (count == 0 || t->strides == NULL) return 0;   /* row-major: covered by the extents */
    span = dlpack_ref_span(t->shape, t->strides, t->ndim);
    bits = dlpack_ref_storage_bits(t->dtype, flags);
    if (span < 0 || (bits > 0 && span + 1 > INT64_MAX / bits)) {
        strides = dlpack_ref_priv_tuple(t->strides, t->ndim);
        if (strides == NULL) return -1;
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) { Py_DECREF(strides); return -1; }
        PyErr_Format(PyExc_BufferError, "DLTensor strides %R with shape %R reach beyond 2**63 bytes", strides,
                     shape);
        Py_DECREF(strides);
        Py_DECREF(shape);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_data(const DLTensor* t, int64_t count) {
    PyObject* shape;
    if (t->data == NULL && count != 0) {
        shape = dlpack_ref_priv_tuple(t->shape, t->ndim);
        if (shape == NULL) return -1;
        PyErr_Format(PyExc_BufferError, "DLTensor.data is NULL for a non-empty tensor (shape %R)", shape);
        Py_DECREF(shape);
        return -1;
    }
    return 0;
}

static inline int dlpack_check_byte_offset(const DLTensor* t) {
    if (t->byte_offset > (uint64_t)INT64_MAX) {
        PyErr_Format(PyExc_BufferError, "DLTensor.byte_offset=%llu overflows int64",
                     (unsigned long long)t->byte_offset);
        return -1;
    }
    return 0;
}

/* What a consumer accepts as a tensor's data type (the `dtypes` argument of
 * the *_as calls):
 *   DLPACK_REF_DTYPES_DLPACK: the DLPack 1.3 data types (dlpack_check_dtype),
 *     for a consumer that reads elements;
 *   DLPACK_REF_DTYPES_AS_BYTES: any (code, bits, lanes) whose element has a
 *     size (bits and lanes not 0), for a consumer that takes the memory as
 *     bytes and never reads an element by its type (a message buffer, a
 *     byte copy): float128 or a vendor's code is as many bytes as any other. */
#define DLPACK_REF_DTYPES_DLPACK 0
#define DLPACK_REF_DTYPES_AS_BYTES 1

static inline int dlpack_check_dtype_as(DLDataType dtype, int dtypes) {
    if (dtypes != DLPACK_REF_DTYPES_AS_BYTES) return dlpack_check_dtype(dtype);
    if (dtype.bits == 0 || dtype.lanes == 0) {
        PyErr_Format(PyExc_BufferError,
                     "DLDataType(code=%d, bits=%d, lanes=%d) has no size: bits and lanes must be at least 1",
                     (int)dtype.code, (int)dtype.bits, (int)dtype.lanes);
        return -1;
    }
    return 0;
}

/* Every rule a DLTensor must meet before any of its fields is trusted, with
 * the data types `dtypes` accepts (DLPACK_REF_DTYPES_*). */
static inline int dlpack_check_tensor_as(const DLTensor* t, uint64_t flags, int null_strides_ok, int dtypes) {
    int64_t count;
    if (dlpack_check_ndim(t->ndim) < 0 || dlpack_check_dtype_as(t->dtype, dtypes) < 0
            || dlpack_check_device(t->device) < 0 || dlpack_check_shape(t) < 0
            || dlpack_check_strides(t, null_strides_ok) < 0)
        return -1;
    count = dlpack_check_extents(t, flags);
    if (count < 0 || dlpack_check_span(t, count, flags) < 0 || dlpack_check_data(t, count) < 0
            || dlpack_check_byte_offset(t) < 0)
        return -1;
    return 0;
}

/* Every rule a DLTensor must meet, DLPack 1.3 data types only. */
static inline int dlpack_check_tensor(const DLTensor* t, uint64_t flags, int null_strides_ok) {
    return dlpack_check_tensor_as(t, flags, null_strides_ok, DLPACK_REF_DTYPES_DLPACK);
}

static inline int dlpack_check_version(const DLManagedTensorVersioned* m) {
    if (m->version.major != DLPACK_MAJOR_VERSION) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack capsule has version %u.%u; major version %d (ABI %d.%d) is read here. "
                     "Its deleter was called.",
                     (unsigned)m->version.major, (unsigned)m->version.minor, DLPACK_MAJOR_VERSION,
                     DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
        return -1;
    }
    return 0;
}

/* Every rule a managed tensor (DLManagedTensorVersioned* when `versioned`,
 * else DLManagedTensor*) must meet: the version, then dlpack_check_tensor_as
 * with the data types `dtypes` accepts (dlpack_check_managed: DLPack's
 * own). The caller owns it and runs its deleter on failure. */
static inline int dlpack_check_managed_as(void* managed, int versioned, int dtypes) {
    DLManagedTensorVersioned* mv;
    if (!versioned) return dlpack_check_tensor_as(&((DLManagedTensor*)managed)->dl_tensor, 0, 1, dtypes);
    mv = (DLManagedTensorVersioned*)managed;
    if (dlpack_check_version(mv) < 0) return -1;
    return dlpack_check_tensor_as(&mv->dl_tensor, mv->flags, mv->version.minor < 2, dtypes);
}

static inline int dlpack_check_managed(void* managed, int versioned) {
    return dlpack_check_managed_as(managed, versioned, DLPACK_REF_DTYPES_DLPACK);
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

/* --- export: the one allocation, its deleters and capsule destructors ------
 * Exports are made with the GIL held, so the block comes from pymalloc:
 * the managed struct, then shape and strides (2 * ndim int64), then (CPython
 * 3.15+) the record of the interpreter that made the export. */

static inline int dlpack_ref_api_is_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Drop the owner and free the block of an export, from any thread, with
 * PyGILState (which attaches to the main interpreter). A deleter can run on
 * a thread without the GIL, or after the interpreter has finalized; in the
 * last case touching Python would crash, so both are leaked: the process is
 * ending and the OS reclaims the memory. CPython leaves a window: a thread
 * that passes the finalizing check just before finalization begins attaches
 * during it (docs/guarantees.md). The exports of this header release through
 * their interpreter's view instead on CPython 3.15+, where that window is
 * closed. */
static inline void dlpack_ref_api_release_block(PyObject* owner, void* block) {
    PyGILState_STATE st;
    if (!Py_IsInitialized()) return;
    if (PyGILState_Check()) { Py_XDECREF(owner); PyMem_Free(block); return; }
    if (dlpack_ref_api_is_finalizing()) return;
    st = PyGILState_Ensure();
    Py_XDECREF(owner);
    PyMem_Free(block);
    PyGILState_Release(st);
}

#if PY_VERSION_HEX >= 0x030F0000 && !defined(Py_LIMITED_API)
/* CPython 3.15 (PEP 788): a deleter attaches through a view of the
 * interpreter that made the export, holding a guard that keeps it from
 * finalizing while the owner is dropped; when no guard can be had (it is
 * finalizing or gone) nothing is touched and the block is leaked. */
#define DLPACK_REF_RELEASE_BY_VIEW 1

/* The interpreter exports were made in: one record per interpreter that
 * exported through this translation unit, made at its first export and
 * kept for the life of the process (a view does not keep its interpreter
 * alive). Identified by interpreter ID, which is never reused. */
typedef struct dlpack_ref_priv_origin {
    int64_t interp_id;
    PyInterpreterView* view;
    struct dlpack_ref_priv_origin* next;
} dlpack_ref_priv_origin;

static dlpack_ref_priv_origin* dlpack_ref_priv_origins = NULL;   /* pushed by compare-and-swap */

/* The record of the current interpreter (NULL with MemoryError). */
static inline dlpack_ref_priv_origin* dlpack_ref_priv_origin_here(void) {
    int64_t id = PyInterpreterState_GetID(PyInterpreterState_Get());
    dlpack_ref_priv_origin *o, *head;
    head = (dlpack_ref_priv_origin*)_Py_atomic_load_ptr_acquire(&dlpack_ref_priv_origins);
    for (o = head; o != NULL; o = o->next)
        if (o->interp_id == id) return o;
    o = (dlpack_ref_priv_origin*)PyMem_RawMalloc(sizeof(dlpack_ref_priv_origin));
    if (o == NULL) { PyErr_NoMemory(); return NULL; }
    o->interp_id = id;
    o->view = PyInterpreterView_FromCurrent();
    if (o->view == NULL) {
        PyMem_RawFree(o);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    do { o->next = head; } while (!_Py_atomic_compare_exchange_ptr(&dlpack_ref_priv_origins, &head, o));
    return o;
}

/* Where the record's address is kept: after shape and strides. */
static inline dlpack_ref_priv_origin** dlpack_ref_priv_origin_slot(const DLTensor* t) {
    return (dlpack_ref_priv_origin**)(t->shape + 2 * (size_t)t->ndim);
}

/* dlpack_ref_api_release_block, through the interpreter that made the
 * export: at once when this thread is attached to it, else attached by its
 * view, else (no guard) leaked. */
static inline void dlpack_ref_priv_release_export(PyObject* owner, void* block, const dlpack_ref_priv_origin* o) {
    PyThreadState* attached;
    PyThreadStateToken* token;
    if (!Py_IsInitialized()) return;
    attached = PyThreadState_GetUnchecked();
    if (attached != NULL && PyInterpreterState_GetID(PyThreadState_GetInterpreter(attached)) == o->interp_id) {
        Py_XDECREF(owner);
        PyMem_Free(block);
        return;
    }
    token = PyThreadState_EnsureFromView(o->view);
    if (token == NULL) return;   /* finalizing or gone: no guard, no touch */
    Py_XDECREF(owner);
    PyMem_Free(block);
    PyThreadState_Release(token);
}
#define DLPACK_REF_PRIV_BLOCK_TAIL sizeof(void*)
#define DLPACK_REF_PRIV_RELEASE(self) \
    dlpack_ref_priv_release_export((PyObject*)(self)->manager_ctx, (self), *dlpack_ref_priv_origin_slot(&(self)->dl_tensor))
#else
#define DLPACK_REF_PRIV_BLOCK_TAIL 0
#define DLPACK_REF_PRIV_RELEASE(self) dlpack_ref_api_release_block((PyObject*)(self)->manager_ctx, (self))
#endif

/* The block of an export: the managed struct `head` bytes, shape and
 * strides, and the interpreter's record where deleters release through it
 * (NULL with MemoryError). */
static inline void* dlpack_ref_priv_export_block(size_t head, int32_t ndim) {
    void* block = PyMem_Malloc(head + 2 * (size_t)ndim * sizeof(int64_t) + DLPACK_REF_PRIV_BLOCK_TAIL);
    if (block == NULL) { PyErr_NoMemory(); return NULL; }
#ifdef DLPACK_REF_RELEASE_BY_VIEW
    {
        dlpack_ref_priv_origin* o = dlpack_ref_priv_origin_here();
        if (o == NULL) { PyMem_Free(block); return NULL; }
        *(dlpack_ref_priv_origin**)((char*)block + head + 2 * (size_t)ndim * sizeof(int64_t)) = o;
    }
#endif
    return block;
}

static inline void dlpack_ref_api_delete_versioned(DLManagedTensorVersioned* self) {
    DLPACK_REF_PRIV_RELEASE(self);
}

static inline void dlpack_ref_api_delete_legacy(DLManagedTensor* self) {
    DLPACK_REF_PRIV_RELEASE(self);
}

/* An unconsumed capsule still owns its tensor; a consumer renames it.
 * Whoever destroys a capsule holds the GIL, so a block of ours is released
 * right here; a foreign deleter is called as it is. Deleters are compared by
 * address: each translation unit (each vendoring library) has its own copy
 * of the inline deleters, and releases the others' blocks through their
 * deleter, which is just as right. */
#define DLPACK_REF_PRIV_DESTROY(Managed, own_deleter, capsule_name)   \
    const char* name = PyCapsule_GetName(capsule);                    \
    Managed* m;                                                       \
    if (name != capsule_name && (name == NULL || strcmp(name, capsule_name) != 0)) return; \
    m = (Managed*)PyCapsule_GetPointer(capsule, name);                \
    if (m->deleter == own_deleter) {                                  \
        Py_XDECREF((PyObject*)m->manager_ctx);                        \
        PyMem_Free(m);                                                \
    } else if (m->deleter) {                                          \
        m->deleter(m);                                                \
    }

static inline void dlpack_ref_api_destroy_versioned(PyObject* capsule) {
    DLPACK_REF_PRIV_DESTROY(DLManagedTensorVersioned, dlpack_ref_api_delete_versioned, dlpack_ref_priv_name_versioned)
}

static inline void dlpack_ref_api_destroy_legacy(PyObject* capsule) {
    DLPACK_REF_PRIV_DESTROY(DLManagedTensor, dlpack_ref_api_delete_legacy, dlpack_ref_priv_name_legacy)
}

/* t's metadata into `into`, shape and strides into `storage` (2 * ndim int64
 * right after the managed struct); NULL strides become row-major. */
static inline void dlpack_ref_api_fill(DLTensor* into, const DLTensor* t, int64_t* storage) {
    int32_t i;
    int64_t s = 1;
    *into = *t;
    into->shape = storage;
    into->strides = storage + t->ndim;
    if (t->ndim == 0) return;
    if (t->ndim <= 4 && t->strides != NULL) {
        /* A few words: copied in place (a memcpy call costs more). */
        for (i = 0; i < t->ndim; ++i) {
            storage[i] = t->shape[i];
            storage[t->ndim + i] = t->strides[i];
        }
        return;
    }
    memcpy(storage, t->shape, (size_t)t->ndim * sizeof(int64_t));
    if (t->strides != NULL) {
        memcpy(storage + t->ndim, t->strides, (size_t)t->ndim * sizeof(int64_t));
        return;
    }
    for (i = t->ndim - 1; i >= 0; --i) {
        storage[t->ndim + i] = s;
        s *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
}

/* Fill a versioned export's block: version 1.3, `flags`, t's metadata with
 * shape and strides in the block, the manager and its deleter. */
static inline DLManagedTensorVersioned* dlpack_ref_priv_versioned(DLManagedTensorVersioned* m, const DLTensor* t,
                                                                  uint64_t flags, void* manager,
                                                                  void (*deleter)(DLManagedTensorVersioned*)) {
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->flags = flags;
    dlpack_ref_api_fill(&m->dl_tensor, t, (int64_t*)(m + 1));
    m->manager_ctx = manager;
    m->deleter = deleter;
    return m;
}

/* The block of a versioned export owning one reference to `owner`. */
static inline DLManagedTensorVersioned* dlpack_ref_api_versioned_block(const DLTensor* t, PyObject* owner,
                                                                       uint64_t flags) {
    DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)dlpack_ref_priv_export_block(
        sizeof(DLManagedTensorVersioned), t->ndim);
    if (m == NULL) return NULL;
    Py_INCREF(owner);
    return dlpack_ref_priv_versioned(m, t, flags, owner, dlpack_ref_api_delete_versioned);
}

/* A capsule owning an existing managed tensor (deleted if that fails). */
static inline PyObject* dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m) {
    PyObject* capsule = PyCapsule_New(m, dlpack_ref_priv_name_versioned, dlpack_ref_api_destroy_versioned);
    if (capsule == NULL && m->deleter) DLPACK_REF_PRIV_KEEP_ERROR(m->deleter(m));
    return capsule;
}

static inline PyObject* dlpack_ref_api_wrap_legacy(DLManagedTensor* m) {
    PyObject* capsule = PyCapsule_New(m, dlpack_ref_priv_name_legacy, dlpack_ref_api_destroy_legacy);
    if (capsule == NULL && m->deleter) DLPACK_REF_PRIV_KEEP_ERROR(m->deleter(m));
    return capsule;
}

static inline PyObject* dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags) {
    DLManagedTensorVersioned* m = dlpack_ref_api_versioned_block(t, owner, flags);
    return m == NULL ? NULL : dlpack_ref_api_wrap_versioned(m);
}

static inline PyObject* dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner) {
    DLManagedTensor* m = (DLManagedTensor*)dlpack_ref_priv_export_block(sizeof(DLManagedTensor), t->ndim);
    if (m == NULL) return NULL;
    dlpack_ref_api_fill(&m->dl_tensor, t, (int64_t*)(m + 1));
    Py_INCREF(owner);
    m->manager_ctx = owner;
    m->deleter = dlpack_ref_api_delete_legacy;
    return dlpack_ref_api_wrap_legacy(m);
}

/* What an exporter must describe: a ValueError (a caller's bug, not a
 * DLPack refusal) for an ndim out of range or a missing shape. */
static inline int dlpack_ref_priv_check_export(const DLTensor* t) {
    if (t->ndim < 0 || t->ndim > DLPACK_REF_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "DLTensor.ndim=%d is out of range 0..%d", (int)t->ndim,
                     DLPACK_REF_MAX_NDIM);
        return -1;
    }
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_Format(PyExc_ValueError, "DLTensor.shape is NULL with ndim=%d", (int)t->ndim);
        return -1;
    }
    return 0;
}

/* A `dltensor_versioned` capsule (version 1.3, `flags`) describing
 * `tensor`; its shape/strides are copied (NULL strides become row-major),
 * `owner` is kept alive until the consumer's deleter call. */
static inline PyObject* dlpack_ref_export_versioned(const DLTensor* tensor, PyObject* owner, uint64_t flags) {
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    return dlpack_ref_api_new_versioned(tensor, owner, flags);
}

/* A legacy `dltensor` capsule (for consumers older than DLPack 1.0). */
static inline PyObject* dlpack_ref_export_legacy(const DLTensor* tensor, PyObject* owner) {
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    return dlpack_ref_api_new_legacy(tensor, owner);
}

/* --- export of memory owned by a C reference count ------------------------
 * Memory whose release needs no Python (a library's own host allocation) can
 * be owned by a dlpack_ref_counted: a reference count and the function that
 * frees the memory when it reaches 0. The array holds one count and each
 * export of the memory another, so an export keeps the memory alive, not the
 * array object: its deleter only gives its count back (and frees the memory
 * at 0) and gives its block back (kept for reuse, or freed). It needs no
 * GIL, no thread state and no interpreter: it is safe on any thread at any time, during and
 * after finalization included. Memory a Python object owns is exported with
 * that object as the owner (above). */

/* An owner with a C reference count. `refs` counts the holders (the array,
 * each export); whoever takes it to 0 calls `release`, once, on whatever
 * thread that is, with no Python: it frees the memory and the count. */
typedef struct dlpack_ref_counted {
    int64_t refs;
    void (*release)(struct dlpack_ref_counted* self);
} dlpack_ref_counted;

/* One more holder (atomic: any thread may hold and let go of counts at once). */
static inline void dlpack_ref_counted_retain(dlpack_ref_counted* c) {
#if defined(_MSC_VER) && !defined(__clang__)
    _InterlockedIncrement64((volatile __int64*)&c->refs);
#else
    __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
#endif
}

/* One holder fewer; the last one calls c->release. */
static inline void dlpack_ref_counted_release(dlpack_ref_counted* c) {
#if defined(_MSC_VER) && !defined(__clang__)
    if (_InterlockedDecrement64((volatile __int64*)&c->refs) == 0) c->release(c);
#else
    if (__atomic_fetch_sub(&c->refs, 1, __ATOMIC_ACQ_REL) == 1) c->release(c);
#endif
}

/* The blocks of exports owned by a count come from malloc, not Python's
 * allocator (their deleter has no interpreter to give them back to), and
 * those of up to DLPACK_REF_PRIV_CACHED_NDIM dimensions (one size) are kept
 * for reuse in a few slots of this translation unit, each taken and given
 * back with one atomic exchange, no lock and no Python, on any thread: a
 * malloc and free pair costs about 120 instructions, a slot about 10. */
#define DLPACK_REF_PRIV_CACHED_NDIM 4
#define DLPACK_REF_PRIV_CACHE_SLOTS 8
#define DLPACK_REF_PRIV_CACHED_BYTES \
    (sizeof(DLManagedTensorVersioned) + 2 * DLPACK_REF_PRIV_CACHED_NDIM * sizeof(int64_t) + DLPACK_REF_PRIV_FN_TAIL)
/* Every block of this family has room for a function pointer after shape
 * and strides: where an export of memory with its own release function
 * (below) keeps that function. */
#define DLPACK_REF_PRIV_FN_TAIL sizeof(void (*)(void*))
static void* dlpack_ref_priv_block_cache[DLPACK_REF_PRIV_CACHE_SLOTS];

#if defined(_MSC_VER) && !defined(__clang__)
#define DLPACK_REF_PRIV_SLOT_LOAD(slot) (*(void* volatile*)(slot))
#define DLPACK_REF_PRIV_SLOT_TAKE(slot) _InterlockedExchangePointer((void* volatile*)(slot), NULL)
#define DLPACK_REF_PRIV_SLOT_GIVE(slot, b) (_InterlockedCompareExchangePointer((void* volatile*)(slot), (b), NULL) == NULL)
#else
#define DLPACK_REF_PRIV_SLOT_LOAD(slot) __atomic_load_n((slot), __ATOMIC_RELAXED)
#define DLPACK_REF_PRIV_SLOT_TAKE(slot) __atomic_exchange_n((slot), (void*)NULL, __ATOMIC_ACQUIRE)
static inline int dlpack_ref_priv_slot_give(void** slot, void* block) {
    void* empty = NULL;
    return __atomic_compare_exchange_n(slot, &empty, block, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}
#define DLPACK_REF_PRIV_SLOT_GIVE(slot, b) dlpack_ref_priv_slot_give((slot), (b))
#endif

/* A block for a managed struct of `head` bytes (at most a versioned one's)
 * with the shape and strides of `ndim` dimensions and a function pointer;
 * NULL when out of memory. */
static inline void* dlpack_ref_priv_counted_alloc(size_t head, int32_t ndim) {
    int i;
    if (ndim > DLPACK_REF_PRIV_CACHED_NDIM)
        return malloc(head + 2 * (size_t)ndim * sizeof(int64_t) + DLPACK_REF_PRIV_FN_TAIL);
    for (i = 0; i < DLPACK_REF_PRIV_CACHE_SLOTS; ++i) {
        void* block;
        if (DLPACK_REF_PRIV_SLOT_LOAD(&dlpack_ref_priv_block_cache[i]) == NULL) continue;
        block = DLPACK_REF_PRIV_SLOT_TAKE(&dlpack_ref_priv_block_cache[i]);
        if (block != NULL) return block;
    }
    return malloc(DLPACK_REF_PRIV_CACHED_BYTES);
}

/* Give a block of dlpack_ref_priv_counted_alloc back (kept, or freed). */
static inline void dlpack_ref_priv_counted_free(void* block, int32_t ndim) {
    int i;
    if (ndim <= DLPACK_REF_PRIV_CACHED_NDIM)
        for (i = 0; i < DLPACK_REF_PRIV_CACHE_SLOTS; ++i)
            if (DLPACK_REF_PRIV_SLOT_LOAD(&dlpack_ref_priv_block_cache[i]) == NULL
                    && DLPACK_REF_PRIV_SLOT_GIVE(&dlpack_ref_priv_block_cache[i], block))
                return;
    free(block);
}

/* The deleters of exports owned by a count: give the count back, give the
 * block back (no Python allocator is involved). */
static inline void dlpack_ref_api_delete_counted_versioned(DLManagedTensorVersioned* self) {
    dlpack_ref_counted_release((dlpack_ref_counted*)self->manager_ctx);
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
}

static inline void dlpack_ref_api_delete_counted_legacy(DLManagedTensor* self) {
    dlpack_ref_counted_release((dlpack_ref_counted*)self->manager_ctx);
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
}

/* The block of a versioned export of `t` holding one count of `memory`
 * (NULL with MemoryError). */
static inline DLManagedTensorVersioned* dlpack_ref_api_counted_block(const DLTensor* t, dlpack_ref_counted* memory,
                                                                     uint64_t flags) {
    DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)dlpack_ref_priv_counted_alloc(
        sizeof(DLManagedTensorVersioned), t->ndim);
    if (m == NULL) { PyErr_NoMemory(); return NULL; }
    dlpack_ref_counted_retain(memory);
    return dlpack_ref_priv_versioned(m, t, flags, memory, dlpack_ref_api_delete_counted_versioned);
}

/* A `dltensor_versioned` capsule describing `tensor` (shape and strides
 * copied, NULL strides made row-major), holding one count of `memory`. */
static inline PyObject* dlpack_ref_export_versioned_counted(const DLTensor* tensor, dlpack_ref_counted* memory,
                                                           uint64_t flags) {
    DLManagedTensorVersioned* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    m = dlpack_ref_api_counted_block(tensor, memory, flags);
    return m == NULL ? NULL : dlpack_ref_api_wrap_versioned(m);
}

/* A legacy `dltensor` capsule describing `tensor`, holding one count of
 * `memory`. */
static inline PyObject* dlpack_ref_export_legacy_counted(const DLTensor* tensor, dlpack_ref_counted* memory) {
    DLManagedTensor* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) return NULL;
    m = (DLManagedTensor*)dlpack_ref_priv_counted_alloc(sizeof(DLManagedTensor), tensor->ndim);
    if (m == NULL) { PyErr_NoMemory(); return NULL; }
    dlpack_ref_api_fill(&m->dl_tensor, tensor, (int64_t*)(m + 1));
    dlpack_ref_counted_retain(memory);
    m->manager_ctx = memory;
    m->deleter = dlpack_ref_api_delete_counted_legacy;
    return dlpack_ref_api_wrap_legacy(m);
}

/* --- export of memory with the library's own release function -------------
 * A library whose buffers are not Python objects (a C allocation with its own
 * reference count, a pool, memory mapped from a file) exports them with `ctx`
 * (whatever identifies the buffer to it) and `release`, its function that
 * gives the buffer back. The caller makes one hold on the buffer for the
 * export (its own retain) and hands that hold over: `release(ctx)` is called
 * exactly once, by the deleter when the consumer is done with the capsule,
 * or before the export returns NULL when no capsule could be made. The
 * deleter itself needs no GIL, thread state or interpreter (its block comes
 * from malloc), so `release` decides what it needs: it may run on any
 * thread, with or without the GIL, during or after finalization. */

typedef void (*dlpack_ref_priv_release_fn)(void* ctx);

/* Where a block of this family keeps its release function. */
static inline dlpack_ref_priv_release_fn* dlpack_ref_priv_release_slot(const DLTensor* t) {
    return (dlpack_ref_priv_release_fn*)(void*)(t->shape + 2 * (size_t)t->ndim);
}

static inline void dlpack_ref_api_delete_released_versioned(DLManagedTensorVersioned* self) {
    dlpack_ref_priv_release_fn release = *dlpack_ref_priv_release_slot(&self->dl_tensor);
    void* ctx = self->manager_ctx;
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
    release(ctx);
}

static inline void dlpack_ref_api_delete_released_legacy(DLManagedTensor* self) {
    dlpack_ref_priv_release_fn release = *dlpack_ref_priv_release_slot(&self->dl_tensor);
    void* ctx = self->manager_ctx;
    dlpack_ref_priv_counted_free(self, self->dl_tensor.ndim);
    release(ctx);
}

/* A `dltensor_versioned` capsule describing `tensor` (shape and strides
 * copied, NULL strides made row-major) whose deleter calls release(ctx);
 * NULL with the error set, release(ctx) then called already. */
static inline PyObject* dlpack_ref_export_versioned_released(const DLTensor* tensor, void* ctx,
                                                            void (*release)(void* ctx), uint64_t flags) {
    DLManagedTensorVersioned* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) goto fail;
    m = (DLManagedTensorVersioned*)dlpack_ref_priv_counted_alloc(sizeof(DLManagedTensorVersioned), tensor->ndim);
    if (m == NULL) { PyErr_NoMemory(); goto fail; }
    dlpack_ref_priv_versioned(m, tensor, flags, ctx, dlpack_ref_api_delete_released_versioned);
    *dlpack_ref_priv_release_slot(&m->dl_tensor) = release;
    return dlpack_ref_api_wrap_versioned(m);
fail:
    DLPACK_REF_PRIV_KEEP_ERROR(release(ctx));
    return NULL;
}

/* A legacy `dltensor` capsule describing `tensor` whose deleter calls
 * release(ctx); NULL with the error set, release(ctx) then called already. */
static inline PyObject* dlpack_ref_export_legacy_released(const DLTensor* tensor, void* ctx,
                                                         void (*release)(void* ctx)) {
    DLManagedTensor* m;
    if (dlpack_ref_priv_check_export(tensor) < 0) goto fail;
    m = (DLManagedTensor*)dlpack_ref_priv_counted_alloc(sizeof(DLManagedTensor), tensor->ndim);
    if (m == NULL) { PyErr_NoMemory(); goto fail; }
    dlpack_ref_api_fill(&m->dl_tensor, tensor, (int64_t*)(m + 1));
    *dlpack_ref_priv_release_slot(&m->dl_tensor) = release;
    m->manager_ctx = ctx;
    m->deleter = dlpack_ref_api_delete_released_legacy;
    return dlpack_ref_api_wrap_legacy(m);
fail:
    DLPACK_REF_PRIV_KEEP_ERROR(release(ctx));
    return NULL;
}

/* --- import: capsule or producer -> owned tensor --------------------------- */

/* Run the deleter of a taken tensor (once: the holder is cleared). Needs no
 * GIL of its own; the deleter takes what it needs. */
static inline void dlpack_ref_release(DLPackRefTensor* t) {
    if (t->managed == NULL) return;
    if (t->versioned) {
        DLManagedTensorVersioned* mv = (DLManagedTensorVersioned*)t->managed;
        if (mv->deleter != NULL) mv->deleter(mv);
    } else {
        DLManagedTensor* ml = (DLManagedTensor*)t->managed;
        if (ml->deleter != NULL) ml->deleter(ml);
    }
    t->managed = NULL;
    t->dl_tensor = NULL;
}

/* Own `managed` and check it with dlpack_check_managed_as (`dtypes`:
 * DLPACK_REF_DTYPES_*). On failure its deleter has run once and the error is
 * set; `out` is filled only on success. */
static inline int dlpack_ref_adopt_as(void* managed, int versioned, int dtypes, DLPackRefTensor* out) {
    DLPackRefTensor t;
    t.managed = managed;
    t.versioned = versioned;
    if (versioned) {
        t.dl_tensor = &((DLManagedTensorVersioned*)managed)->dl_tensor;
        t.flags = ((DLManagedTensorVersioned*)managed)->flags;
    } else {
        t.dl_tensor = &((DLManagedTensor*)managed)->dl_tensor;
        t.flags = 0;
    }
    if (dlpack_check_managed_as(managed, versioned, dtypes) < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    *out = t;
    return 0;
}

/* dlpack_ref_adopt_as with DLPack's own data types. */
static inline int dlpack_ref_adopt(void* managed, int versioned, DLPackRefTensor* out) {
    return dlpack_ref_adopt_as(managed, versioned, DLPACK_REF_DTYPES_DLPACK, out);
}

/* The managed tensor of an unconsumed `dltensor_versioned` or `dltensor`
 * capsule, which is renamed `used_*`: from here on the caller owns the
 * tensor (and runs its deleter). `*versioned` tells which struct it is.
 * NULL with TypeError (not a capsule) or BufferError (consumed, or not a
 * DLPack capsule). */
static inline void* dlpack_ref_claim(PyObject* capsule, int* versioned) {
    const char* name = NULL;
    void* managed = NULL;
    PyObject* shown;
    if (!PyCapsule_CheckExact(capsule)) {
        PyObject* tn = dlpack_ref_priv_type_name(capsule);
        if (tn != NULL) {
            PyErr_Format(PyExc_TypeError, "expected a DLPack capsule, not %U", tn);
            Py_DECREF(tn);
        }
        return NULL;
    }
    /* Read and rename under the capsule's critical section: without the GIL
       two threads could both read the unused name and both take the tensor
       (two owners, the deleter called twice). It serializes the consumers
       that lock the capsule (this header, so dlpack-ref and every library
       that vendors it); a library that renames without locking races with
       them (docs/guarantees.md, Free threading). */
    DLPACK_REF_BEGIN_CRITICAL_SECTION(capsule);
    name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, DLPACK_REF_CAPSULE_VERSIONED) == 0) {
        /* Its own name pointer: CPython compares pointers first, so the name
           is not compared a second time. */
        managed = PyCapsule_GetPointer(capsule, name);
        PyCapsule_SetName(capsule, dlpack_ref_priv_used_versioned);
        *versioned = 1;
    } else if (name != NULL && strcmp(name, DLPACK_REF_CAPSULE_LEGACY) == 0) {
        managed = PyCapsule_GetPointer(capsule, DLPACK_REF_CAPSULE_LEGACY);
        PyCapsule_SetName(capsule, dlpack_ref_priv_used_legacy);
        *versioned = 0;
    }
    DLPACK_REF_END_CRITICAL_SECTION();
    if (managed != NULL) return managed;
    if (name != NULL && (strcmp(name, DLPACK_REF_CAPSULE_USED_VERSIONED) == 0
                         || strcmp(name, DLPACK_REF_CAPSULE_USED_LEGACY) == 0)) {
        PyErr_Format(PyExc_BufferError,
                     "this DLPack capsule was already consumed (it is named '%s'); a capsule can be "
                     "imported once", name);
        return NULL;
    }
    if (name == NULL) {
        shown = PyUnicode_FromString("NULL");
    } else {
        PyObject* decoded = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
        shown = decoded == NULL ? NULL : PyObject_Repr(decoded);
        Py_XDECREF(decoded);
    }
    if (shown == NULL) return NULL;
    PyErr_Format(PyExc_BufferError, "a capsule named %U is not a DLPack capsule; expected '%s' or '%s'", shown,
                 DLPACK_REF_CAPSULE_VERSIONED, DLPACK_REF_CAPSULE_LEGACY);
    Py_DECREF(shown);
    return NULL;
}

/* Take ownership of the tensor of a `dltensor_versioned` or `dltensor`
 * capsule (dlpack_ref_claim) and check it (dlpack_ref_adopt_as, `dtypes`:
 * DLPACK_REF_DTYPES_*; dlpack_ref_take: DLPack's own). Whether this library
 * can hold memory of the tensor's device is the caller's to decide. */
static inline int dlpack_ref_take_as(PyObject* capsule, int dtypes, DLPackRefTensor* out) {
    int versioned = 0;
    void* managed = dlpack_ref_claim(capsule, &versioned);
    if (managed == NULL) return -1;
    return dlpack_ref_adopt_as(managed, versioned, dtypes, out);
}

static inline int dlpack_ref_take(PyObject* capsule, DLPackRefTensor* out) {
    return dlpack_ref_take_as(capsule, DLPACK_REF_DTYPES_DLPACK, out);
}

/* Drop a reference with the pending exception (if any) put aside: the last
 * reference to a capsule runs its destructor, which may run Python code (a
 * producer written in Python, a finalizer its deleter calls), and Python
 * code must not start with an exception set. */
static inline void dlpack_ref_decref_keeping_error(PyObject* o) {
    if (PyErr_Occurred() == NULL) { Py_DECREF(o); return; }
    DLPACK_REF_PRIV_KEEP_ERROR(Py_DECREF(o));
}

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
    int links = 0, overridden;
    PyObject *cap, *held = NULL;
    *owner = NULL;
    if (type_holds != NULL) *type_holds = 0;
    cap = PyObject_GetAttrString(tp, "__dlpack_c_exchange_api__");
    if (cap == NULL) goto failed;
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
    for (i = 0; i < k; ++i) { Py_INCREF(keys[i]); PyTuple_SET_ITEM(t, i, keys[i]); }
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

/* args[0].name(*args[1:nargs], kwnames...) as PyObject_VectorcallMethod
 * calls it (nargs counts args[0]; kwnames NULL or a tuple, their values
 * after the positional ones), with the attribute found on the type kept
 * in `memo` for as long as the type is unchanged. Only types whose
 * attribute lookup is the generic one and whose instances have no __dict__
 * are memoized (then the type's method is what x.name gives). */
static inline PyObject* dlpack_ref_call_method(dlpack_ref_method_memo* memo, PyObject* name, PyObject* const* args,
                                               size_t nargs, PyObject* kwnames) {
#ifdef DLPACK_REF_TYPE_MEMO
    PyTypeObject* tp = Py_TYPE(args[0]);
    PyObject *m, *r;
    if (tp == memo->type && memo->tag != 0 && tp->tp_version_tag == memo->tag) {
        m = memo->method;
    } else if (tp->tp_getattro == PyObject_GenericGetAttr && tp->tp_dictoffset == 0
               && !PyType_HasFeature(tp, Py_TPFLAGS_MANAGED_DICT)) {
        PyObject *old_method, *old_type;
        m = _PyType_Lookup(tp, name);   /* borrowed; gives tp a version tag */
        if (m == NULL || !PyType_HasFeature(Py_TYPE(m), Py_TPFLAGS_METHOD_DESCRIPTOR) || tp->tp_version_tag == 0)
            return PyObject_VectorcallMethod(name, (PyObject* const*)args, nargs, kwnames);
        old_method = memo->method;
        old_type = (PyObject*)memo->type;
        Py_INCREF(m);
        Py_INCREF(tp);
        memo->type = tp;
        memo->tag = tp->tp_version_tag;
        memo->method = m;
        Py_XDECREF(old_method);
        Py_XDECREF(old_type);
    } else {
        return PyObject_VectorcallMethod(name, (PyObject* const*)args, nargs, kwnames);
    }
    Py_INCREF(m);   /* the call may change the type and drop the memo's reference */
    r = PyObject_Vectorcall(m, args, nargs, kwnames);
    Py_DECREF(m);
    return r;
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
    if (!PyTuple_CheckExact(answer) || PyTuple_GET_SIZE(answer) != 2) return 0;
    t = PyTuple_GET_ITEM(answer, 0);
    i = PyTuple_GET_ITEM(answer, 1);
    if (!PyLong_Check(t) || PyBool_Check(t) || !PyLong_CheckExact(i)) return 0;
    tv = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (overflow || (tv == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    iv = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (overflow || (iv == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    return tv == (long long)device.device_type && iv == (long long)device.device_id;
}

/* The last type whose exchange table was asked for, and the answer. */
typedef struct dlpack_ref_api_memo {
    PyTypeObject* type;
    unsigned int tag;
    unsigned int meta_tag;   /* of type(type): attributes of a type are read through its metaclass too */
    const DLPackExchangeAPI* api;
} dlpack_ref_api_memo;

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
    if (tp == memo->type && memo->tag != 0 && tp->tp_version_tag == memo->tag && meta->tp_version_tag == memo->meta_tag)
        return memo->api;
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

/* --- calls into another library's exchange table ------------------------------
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
#if PY_VERSION_HEX >= 0x030C0000
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
    else
        error = PyObject_CallFunction(PyExc_BufferError, "N",
                                      PyUnicode_FromFormat("the DLPack exchange API of %U failed in %s: returned 0 "
                                                           "but set %s: %S", name, function,
                                                           Py_TYPE(cause)->tp_name, cause));
    Py_DECREF(name);
    if (error != NULL && cause != NULL) PyException_SetCause(error, cause);   /* steals cause */
    else Py_XDECREF(cause);
    return error;
}

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
    if (!PyTuple_CheckExact(max_version) || PyTuple_GET_SIZE(max_version) != 2) goto bad;
    major = PyTuple_GET_ITEM(max_version, 0);
    minor = PyTuple_GET_ITEM(max_version, 1);
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
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) goto bad;
    t = PyTuple_GET_ITEM(obj, 0);
    i = PyTuple_GET_ITEM(obj, 1);
    if (!PyLong_Check(t) || PyBool_Check(t) || !PyLong_Check(i) || PyBool_Check(i)) goto bad;
    tv = PyLong_AsLongLongAndOverflow(t, &o1);
    iv = PyLong_AsLongLongAndOverflow(i, &o2);
    if (PyErr_Occurred()) return -1;
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
    if (PyTuple_Check(info) && PyTuple_GET_SIZE(info) == 2 && PyLong_Check(PyTuple_GET_ITEM(info, 0))
            && !PyBool_Check(PyTuple_GET_ITEM(info, 1)) && PyLong_Check(PyTuple_GET_ITEM(info, 1))) {
        long long version = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(info, 0), &overflow);
        if (!overflow && version == 0) {
            unsigned long long handle = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(info, 1));
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
       (`stream` as passed, None included; `stream_value` as checked): fill
       *out (its shape and strides need live only until the call returns) and
       *out_owner (a new reference keeping out's memory alive). A device it
       cannot copy to: BufferError. NULL: the array cannot be copied. */
    int (*copy)(void* ctx, const DLTensor* src, DLDevice target, PyObject* stream, int64_t stream_value,
                DLTensor* out, PyObject** out_owner);
    /* Make the consumer's stream wait for pending work on the memory. Called
       for CUDA-family memory exported in place, unless stream is -1. NULL:
       no work is ever pending. */
    int (*order)(void* ctx, const DLTensor* t, PyObject* stream, int64_t stream_value);
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
    int64_t stream_value = 1;
    int versioned, cuda_family;
    DLDevice target;
    plan->tensor = &p->tensor;
    plan->owner = p->owner;
    plan->copy_owner = NULL;
    if (max_version == Py_None && stream == Py_None && dl_device == Py_None && copy == Py_None) {
        /* The oldest consumers' call, and a hot one: with no stream work to
           order (not CUDA-family memory, or no order callback) nothing is left
           to decide but the legacy capsule's limits. */
        if (!(dlpack_ref_device_cuda_family((int32_t)p->tensor.device.device_type) && p->order != NULL)) {
            plan->flags = dlpack_ref_priv_export_flags(p);
            plan->versioned = 0;
            return dlpack_ref_check_legacy_export(&p->tensor, plan->flags, p->owner);
        }
    }
    versioned = dlpack_ref_wants_versioned(max_version);
    if (versioned < 0 || dlpack_ref_check_copy_arg(copy) < 0) return -1;
    plan->versioned = versioned;
    cuda_family = dlpack_ref_device_cuda_family((int32_t)p->tensor.device.device_type);
    if (stream != Py_None && dlpack_ref_stream_value(stream, cuda_family, p->tensor.device, p->owner, &stream_value) < 0)
        return -1;
    plan->flags = dlpack_ref_priv_export_flags(p);
    if (dl_device == Py_None && copy != Py_True) {
        if (cuda_family && p->order != NULL && stream_value != -1
                && p->order(p->ctx, &p->tensor, stream, stream_value) < 0)
            return -1;
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
            if (p->copy(p->ctx, &p->tensor, target, stream, stream_value, &plan->copied, &plan->copy_owner) < 0)
                return -1;
            plan->tensor = &plan->copied;
            plan->owner = plan->copy_owner;
            /* A copy is fresh memory: writable, laid out by the copy. */
            plan->flags = DLPACK_FLAG_BITMASK_IS_COPIED
                          | ((int64_t)plan->copied.dtype.bits * plan->copied.dtype.lanes < 8
                             ? (p->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) : 0);
        } else if (cuda_family && p->order != NULL && stream_value != -1
                   && p->order(p->ctx, &p->tensor, stream, stream_value) < 0) {
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
    if (args != NULL && PyTuple_GET_SIZE(args) != 0) return dlpack_ref_priv_no_positional(PyTuple_GET_SIZE(args));
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
    if (kwnames != NULL && (nk = PyTuple_GET_SIZE(kwnames)) != 0) {
        if ((n = dlpack_ref_protocol_names()) == NULL) return -1;
        for (k = 0; k < nk; ++k) {
            if ((i = dlpack_ref_priv_dlpack_arg(n, PyTuple_GET_ITEM(kwnames, k))) < 0) return -1;
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

/* --- the exchange-table builder: __dlpack_c_exchange_api__ of an adopter's type ---
 * A DLPack 1.3 `DLPackExchangeAPI` for the adopter's own type, built from the
 * same description its `__dlpack__` uses, so the table and `__dlpack__` cannot
 * disagree. Table functions get no context argument, so each adopter type has
 * one static spec and one static table, which DLPACK_REF_EXCHANGE_TABLE
 * defines:
 *
 *     static dlpack_ref_exchange_spec tensor_spec = {
 *         &TensorType,      // objects of this type (and subclasses)
 *         describe,         // int describe(PyObject* obj, dlpack_ref_producer* out)
 *         wrap,             // PyObject* wrap(DLPackRefTensor* taken)
 *         NULL,             // allocator: NULL = host memory of the builder's
 *         NULL};            // current_work_stream: NULL = "no stream" (NULL)
 *     DLPACK_REF_EXCHANGE_TABLE(tensor_api, tensor_spec);
 *     ... in the module's init, after PyType_Ready:
 *     dlpack_ref_publish_exchange_api(&TensorType, &tensor_api);
 *
 * The table (header 1.3, prev_api NULL) reports errors as dlpack-ref's own
 * table does (docs/exchange_api.md): the four Python-object functions set a
 * Python exception and return -1 (they are called with the GIL held, or an
 * attached thread state); the allocator touches no Python and reports
 * through SetError(ctx, kind, message), kind the Python exception name. The
 * spec and table are written before they are published and only read
 * after, so any number of threads may use the table at once (free threading
 * included). */

/* What an adopter type tells the builder. */
typedef struct dlpack_ref_exchange_spec {
    /* The adopter's type: the table exports and views its instances (and its
       subclasses'), a TypeError for anything else. A heap type's pointer is
       stored here in the module's init, before publishing. */
    PyTypeObject* type;
    /* Fill *out for `obj` exactly as the type's __dlpack__ does before
       calling dlpack_ref_producer_dlpack(_fast): one description for both.
       Its shape and strides pointers must stay valid while `obj` lives (the
       view borrows them). 0, or -1 with an exception set. */
    int (*describe)(PyObject* obj, dlpack_ref_producer* out);
    /* A new reference to an object of the type owning the taken, checked
       tensor *taken, zero-copy (its from_dlpack uses the same function). It
       consumes *taken in every case: on failure it has released it
       (dlpack_ref_release) and returns NULL with an exception set, e.g. a
       BufferError for a device it cannot hold. */
    PyObject* (*wrap)(DLPackRefTensor* taken);
    /* Optional: the table's managed_tensor_allocator (dlpack.h's contract:
       no Python, errors through SetError). NULL: dlpack_ref_exchange_allocate,
       C-contiguous host memory for kDLCPU prototypes. */
    DLPackManagedTensorAllocator allocator;
    /* Optional: the table's current_work_stream. NULL: the answer is NULL for
       every device (a producer with no streams). */
    DLPackCurrentWorkStream current_work_stream;
} dlpack_ref_exchange_spec;

/* The TypeError of an object the table was not made for (returns -1). */
static inline int dlpack_ref_priv_exchange_refuse(const dlpack_ref_exchange_spec* spec, PyObject* obj,
                                                  const char* what) {
    PyObject* tn = dlpack_ref_priv_type_name(obj);
    if (tn != NULL) {
        PyErr_Format(PyExc_TypeError, "the DLPack exchange API of %s %s %s objects, not %U", spec->type->tp_name,
                     what, spec->type->tp_name, tn);
        Py_DECREF(tn);
    }
    return -1;
}

/* managed_tensor_from_py_object_no_sync: `obj` exported exactly as its
 * __dlpack__(max_version=(1, 3)) exports it (one allocation, READ_ONLY for a
 * read-only array, the owner kept alive until the deleter), without
 * ordering any stream ("NoSync": current_work_stream reports it). */
static inline int dlpack_ref_exchange_from_py(const dlpack_ref_exchange_spec* spec, PyObject* obj,
                                              DLManagedTensorVersioned** out) {
    dlpack_ref_producer p;
    uint64_t flags;
    *out = NULL;
    if (!PyObject_TypeCheck(obj, spec->type)) return dlpack_ref_priv_exchange_refuse(spec, obj, "exports");
    if (spec->describe(obj, &p) < 0) return -1;
    if (dlpack_ref_priv_check_export(&p.tensor) < 0) return -1;
    flags = dlpack_ref_priv_export_flags(&p);
    *out = dlpack_ref_api_versioned_block(&p.tensor, p.owner, flags);
    return *out == NULL ? -1 : 0;
}

/* managed_tensor_to_py_object_no_sync: takes `tensor` (stolen, also on
 * failure), checks it like any import (BufferError naming the field, its
 * deleter run once) and hands it to spec->wrap. */
static inline int dlpack_ref_exchange_to_py(const dlpack_ref_exchange_spec* spec, DLManagedTensorVersioned* tensor,
                                            void** out_py_object) {
    DLPackRefTensor taken;
    PyObject* obj;
    *out_py_object = NULL;
    if (tensor == NULL) {
        PyErr_SetString(PyExc_ValueError, "managed_tensor_to_py_object_no_sync was given a NULL tensor");
        return -1;
    }
    if (dlpack_ref_adopt(tensor, 1, &taken) < 0) return -1;
    obj = spec->wrap(&taken);
    if (obj == NULL) return -1;
    *out_py_object = (void*)obj;
    return 0;
}

/* dltensor_from_py_object_no_sync: the description's DLTensor, borrowing
 * the object's own shape and strides (no allocation). */
static inline int dlpack_ref_exchange_view(const dlpack_ref_exchange_spec* spec, PyObject* obj, DLTensor* out) {
    dlpack_ref_producer p;
    if (!PyObject_TypeCheck(obj, spec->type)) return dlpack_ref_priv_exchange_refuse(spec, obj, "views");
    if (spec->describe(obj, &p) < 0) return -1;
    *out = p.tensor;
    return 0;
}

/* The deleter of dlpack_ref_exchange_allocate's blocks: plain free(), so it
 * is safe on any thread, without the GIL, after finalization. */
static inline void dlpack_ref_priv_free_block(DLManagedTensorVersioned* self) { free(self); }

/* Report an allocator failure through SetError (which may be NULL). */
static inline int dlpack_ref_priv_alloc_error(void* ctx, void (*set_error)(void*, const char*, const char*),
                                              const char* kind, const char* message) {
    if (set_error != NULL) set_error(ctx, kind, message);
    return -1;
}

/* The default managed_tensor_allocator: one malloc block holding the managed
 * tensor, its shape and row-major strides and the data (256-byte aligned),
 * for a kDLCPU prototype of a DLPack 1.3 dtype; sub-byte dtypes are stored
 * one element per byte (IS_SUBBYTE_TYPE_PADDED), as dlpack-ref's allocator
 * stores them. No Python is touched; failures go to SetError with the kind
 * dlpack-ref's allocator gives (ValueError for the prototype's shape,
 * BufferError for its dtype or device, MemoryError). */
static inline int dlpack_ref_exchange_allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* ctx,
                                               void (*set_error)(void*, const char*, const char*)) {
    enum { ALIGN = 256 };
    DLManagedTensorVersioned* m;
    int64_t count, bits, nbytes, s = 1;
    size_t head;
    int32_t i;
    uint64_t flags;
    char message[160];
    *out = NULL;
    if (prototype == NULL || prototype->ndim < 0 || prototype->ndim > DLPACK_REF_MAX_NDIM
            || (prototype->ndim > 0 && prototype->shape == NULL))
        return dlpack_ref_priv_alloc_error(ctx, set_error, "ValueError",
                                           "the allocator's prototype must be a DLTensor with 0 to 64 dimensions "
                                           "and a shape");
    if (dlpack_ref_dtype_format(prototype->dtype.code, prototype->dtype.bits, prototype->dtype.lanes) == NULL) {
        snprintf(message, sizeof message, "unsupported DLDataType(code=%d, bits=%d, lanes=%d): not a DLPack 1.3 data type",
                 (int)prototype->dtype.code, (int)prototype->dtype.bits, (int)prototype->dtype.lanes);
        return dlpack_ref_priv_alloc_error(ctx, set_error, "BufferError", message);
    }
    if (prototype->device.device_type != kDLCPU) {
        snprintf(message, sizeof message, "cannot allocate memory on device (%d, %d): this allocator makes CPU memory only",
                 (int)prototype->device.device_type, (int)prototype->device.device_id);
        return dlpack_ref_priv_alloc_error(ctx, set_error, "BufferError", message);
    }
    count = dlpack_ref_element_count(prototype->shape, prototype->ndim);
    if (count == -1) {
        for (i = 0; prototype->shape[i] >= 0; ++i) {}
        snprintf(message, sizeof message, "negative dimension %lld in the allocator's prototype",
                 (long long)prototype->shape[i]);
        return dlpack_ref_priv_alloc_error(ctx, set_error, "ValueError", message);
    }
    flags = (int64_t)prototype->dtype.bits * prototype->dtype.lanes < 8 ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0;
    bits = dlpack_ref_storage_bits(prototype->dtype, flags);
    head = (sizeof(DLManagedTensorVersioned) + 2 * (size_t)prototype->ndim * sizeof(int64_t) + ALIGN - 1)
           / ALIGN * ALIGN;
    if (count == -2 || count > (INT64_MAX - 7) / bits
            || (nbytes = dlpack_ref_nbytes(count, bits)) > (int64_t)(SIZE_MAX / 2) - (int64_t)head - ALIGN)
        return dlpack_ref_priv_alloc_error(ctx, set_error, "ValueError",
                                           "the allocator's prototype has more bytes than fit in memory");
    m = (DLManagedTensorVersioned*)malloc(head + (size_t)nbytes + ALIGN);
    if (m == NULL) return dlpack_ref_priv_alloc_error(ctx, set_error, "MemoryError", "out of memory");
    memset(m, 0, sizeof *m);
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->flags = flags;
    m->deleter = dlpack_ref_priv_free_block;
    m->dl_tensor.device = prototype->device;
    m->dl_tensor.ndim = prototype->ndim;
    m->dl_tensor.dtype = prototype->dtype;
    m->dl_tensor.shape = (int64_t*)(m + 1);
    m->dl_tensor.strides = m->dl_tensor.shape + prototype->ndim;
    /* malloc aligns to 16 at least; the data starts at the next 256-byte
       boundary past the head. */
    m->dl_tensor.data = (void*)((((uintptr_t)m + head) + ALIGN - 1) / ALIGN * ALIGN);
    for (i = prototype->ndim - 1; i >= 0; --i) {
        m->dl_tensor.shape[i] = prototype->shape[i];
        m->dl_tensor.strides[i] = s;
        s *= prototype->shape[i] > 0 ? prototype->shape[i] : 1;
    }
    *out = m;
    return 0;
}

/* The default current_work_stream: NULL for every device. */
static inline int dlpack_ref_exchange_no_stream(DLDeviceType device_type, int32_t device_id, void** out) {
    (void)device_type;
    (void)device_id;
    *out = NULL;
    return 0;
}

static inline int dlpack_ref_exchange_allocator_of(const dlpack_ref_exchange_spec* spec, DLTensor* prototype,
                                                   DLManagedTensorVersioned** out, void* ctx,
                                                   void (*set_error)(void*, const char*, const char*)) {
    return (spec->allocator != NULL ? spec->allocator : dlpack_ref_exchange_allocate)(prototype, out, ctx, set_error);
}

static inline int dlpack_ref_exchange_stream_of(const dlpack_ref_exchange_spec* spec, DLDeviceType device_type,
                                                int32_t device_id, void** out) {
    return (spec->current_work_stream != NULL ? spec->current_work_stream : dlpack_ref_exchange_no_stream)(
        device_type, device_id, out);
}

/* Defines `static DLPackExchangeAPI name`, the table of `spec` (a static
 * dlpack_ref_exchange_spec of the same translation unit), and its five
 * functions, which forward to the dlpack_ref_exchange_* calls above. C99
 * and C++17 (positional initializer, no designated one). */
#define DLPACK_REF_EXCHANGE_TABLE(name, spec)                                                                \
    static int name##_priv_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* ctx,         \
                                     void (*set_error)(void*, const char*, const char*)) {                   \
        return dlpack_ref_exchange_allocator_of(&(spec), prototype, out, ctx, set_error);                    \
    }                                                                                                        \
    static int name##_priv_from_py(void* obj, DLManagedTensorVersioned** out) {                              \
        return dlpack_ref_exchange_from_py(&(spec), (PyObject*)obj, out);                                    \
    }                                                                                                        \
    static int name##_priv_to_py(DLManagedTensorVersioned* tensor, void** out) {                             \
        return dlpack_ref_exchange_to_py(&(spec), tensor, out);                                              \
    }                                                                                                        \
    static int name##_priv_view(void* obj, DLTensor* out) {                                                  \
        return dlpack_ref_exchange_view(&(spec), (PyObject*)obj, out);                                       \
    }                                                                                                        \
    static int name##_priv_stream(DLDeviceType device_type, int32_t device_id, void** out) {                 \
        return dlpack_ref_exchange_stream_of(&(spec), device_type, device_id, out);                          \
    }                                                                                                        \
    static DLPackExchangeAPI name = {{{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},                    \
                                     name##_priv_allocator, name##_priv_from_py, name##_priv_to_py,          \
                                     name##_priv_view, name##_priv_stream}

/* Publish `table` as `type.__dlpack_c_exchange_api__`: a capsule named
 * DLPACK_REF_CAPSULE_EXCHANGE_API, set in the type's own dict (static and
 * immutable types included), then PyType_Modified. Call it once, in the
 * module's init, after PyType_Ready. 0, or -1 with an exception set. */
static inline int dlpack_ref_publish_exchange_api(PyTypeObject* type, DLPackExchangeAPI* table) {
    PyObject* capsule = PyCapsule_New((void*)table, DLPACK_REF_CAPSULE_EXCHANGE_API, NULL);
    int r;
    if (capsule == NULL) return -1;
    r = PyDict_SetItemString(type->tp_dict, "__dlpack_c_exchange_api__", capsule);
    Py_DECREF(capsule);
    if (r < 0) return -1;
    PyType_Modified(type);
    return 0;
}

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
#if PY_VERSION_HEX >= 0x030D0000
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
    if (PyTuple_Check(answer) && PyTuple_GET_SIZE(answer) == 2 && PyLong_Check(PyTuple_GET_ITEM(answer, 0))
            && !PyBool_Check(PyTuple_GET_ITEM(answer, 0)) && PyLong_Check(PyTuple_GET_ITEM(answer, 1))
            && !PyBool_Check(PyTuple_GET_ITEM(answer, 1)))
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
    Py_ssize_t k, nk = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
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
            PyObject* key = PyTuple_GET_ITEM(kwnames, k);
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
    if (!PyObject_HasAttr(x, n->dlpack)) return dlpack_ref_priv_not_dlpack(x);
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

/* --- the consumer of memory as bytes: a Py_buffer over the producer's memory ---
 * For a consumer that hands memory on without reading it by element type (a
 * message library, a byte copy, a device-aware transport): the producer's
 * own memory (copy=False), any device, any data type with a size, exposed
 * as a Py_buffer whose owner (view->obj) runs the deleter when the buffer is
 * released. Memory on a device is taken without being read: whether it can
 * be read is the caller's to decide by the device it is given. */

#define DLPACK_REF_BUFFER_OWNER_NAME "dlpack_ref.buffer_owner"

/* The owner's destructor: the deleter of the tensor it holds, once (its
 * context tells a versioned tensor from a legacy one). */
static inline void dlpack_ref_priv_buffer_owner_destroy(PyObject* owner) {
    DLPackRefTensor t;
    t.managed = PyCapsule_GetPointer(owner, DLPACK_REF_BUFFER_OWNER_NAME);
    t.versioned = PyCapsule_GetContext(owner) != NULL;
    if (t.managed == NULL) { PyErr_Clear(); return; }
    DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
}

/* Whether the tensor is one block of memory in row-major (C) or
 * column-major (Fortran) order, judged by the strides of the extents that
 * are not 1 (NULL strides: row-major). */
static inline int dlpack_ref_is_contiguous(const DLTensor* t) {
    int32_t i;
    int64_t c = 1, f = 1;
    int c_ok = 1, f_ok = 1;
    if (t->strides == NULL) return 1;
    for (i = t->ndim - 1; i >= 0; --i) {
        if (t->shape[i] == 0) return 1;
        if (t->shape[i] != 1 && t->strides[i] != c) c_ok = 0;
        c *= t->shape[i];
    }
    for (i = 0; i < t->ndim; ++i) {
        if (t->shape[i] != 1 && t->strides[i] != f) f_ok = 0;
        f *= t->shape[i];
    }
    return c_ok || f_ok;
}

/* What a Py_buffer of the taken tensor `t` needs besides the checks every
 * tensor meets: one block of memory, and READ_ONLY memory asked for only
 * read-only (`flags` of the buffer request, PyBUF_*). 0, or -1 with a
 * BufferError; the caller releases the tensor. */
static inline int dlpack_ref_priv_check_buffer(const DLPackRefTensor* t, int flags) {
    if (!dlpack_ref_is_contiguous(t->dl_tensor)) {
        PyErr_SetString(PyExc_BufferError,
                        "the DLPack tensor is not contiguous (neither row-major nor column-major): a buffer is one "
                        "block of memory; its deleter was called");
        return -1;
    }
    if ((t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) && (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError,
                        "the DLPack tensor is flagged READ_ONLY and a writable buffer was asked for; its deleter "
                        "was called");
        return -1;
    }
    return 0;
}

/* Fill `view` (PyBuffer_FillInfo, `flags` PyBUF_*) with the memory of the
 * taken tensor `t`, as bytes, owned by a capsule that runs the deleter when
 * the buffer is released (PyBuffer_Release, or a Py_DECREF of view->obj).
 * `t` is emptied, also on failure, when the deleter has run once. */
static inline int dlpack_ref_tensor_to_buffer(DLPackRefTensor* t, Py_buffer* view, int flags) {
    const DLTensor* d = t->dl_tensor;
    PyObject* owner;
    int r;
    char* data = (char*)d->data + d->byte_offset;
    int64_t count = dlpack_ref_element_count(d->shape, d->ndim);
    Py_ssize_t len = (Py_ssize_t)dlpack_ref_nbytes(count, dlpack_ref_storage_bits(d->dtype, t->flags));
    int readonly = (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    if (dlpack_ref_priv_check_buffer(t, flags) < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(t));
        return -1;
    }
    owner = PyCapsule_New(t->managed, DLPACK_REF_BUFFER_OWNER_NAME, dlpack_ref_priv_buffer_owner_destroy);
    if (owner == NULL || (t->versioned && PyCapsule_SetContext(owner, (void*)dlpack_ref_priv_used_versioned) < 0)) {
        if (owner != NULL) PyCapsule_SetDestructor(owner, NULL);
        Py_XDECREF(owner);
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(t));
        return -1;
    }
    t->managed = NULL;   /* the owner's now */
    t->dl_tensor = NULL;
    r = PyBuffer_FillInfo(view, owner, data, len, readonly, flags);
    dlpack_ref_decref_keeping_error(owner);   /* the view holds it; on failure this runs the deleter */
    return r;
}

/* The destructor a claimed capsule gets when it owns the buffer made of its
 * tensor: the deleter, once, then the producer's own destructor (kept in
 * the context), which finds the capsule used and leaves the tensor alone. */
static inline void dlpack_ref_priv_owning_capsule_destroy(PyObject* capsule) {
    DLPackRefTensor t;
    PyCapsule_Destructor original;
    void* context = PyCapsule_GetContext(capsule);
    const char* name = PyCapsule_GetName(capsule);
    memcpy(&original, &context, sizeof original);
    t.versioned = name == dlpack_ref_priv_used_versioned
                  || (name != NULL && strcmp(name, DLPACK_REF_CAPSULE_USED_VERSIONED) == 0);
    t.managed = PyCapsule_GetPointer(capsule, name);
    if (t.managed == NULL) {
        PyErr_Clear();
        return;
    }
    DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t); if (original != NULL) original(capsule));
}

/* Make the claimed `capsule` the owner of its tensor (1), so that a buffer
 * needs no owner object of its own: the producer's destructor goes to the
 * capsule's context and dlpack_ref_priv_owning_capsule_destroy takes its
 * place. 0 (nothing changed) when the producer uses the context. */
static inline int dlpack_ref_priv_capsule_takes_ownership(PyObject* capsule) {
    PyCapsule_Destructor original;
    void* context;
    if (sizeof original != sizeof context || PyCapsule_GetContext(capsule) != NULL) return 0;
    original = PyCapsule_GetDestructor(capsule);
    memcpy(&context, &original, sizeof context);
    if (PyCapsule_SetContext(capsule, context) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (PyCapsule_SetDestructor(capsule, dlpack_ref_priv_owning_capsule_destroy) < 0) {
        PyErr_Clear();
        PyCapsule_SetContext(capsule, NULL);
        return 0;
    }
    return 1;
}

/* Take the tensor of a DLPack capsule (dlpack_ref_take_as, `dtypes`:
 * DLPACK_REF_DTYPES_*) into `view` (dlpack_ref_tensor_to_buffer); *device
 * receives its device and *dtype (unless NULL) its data type, for a
 * consumer that derives an element format of its own. `announced` (NULL:
 * none) is the device the producer said it is on: a tensor elsewhere is
 * refused; so is one flagged IS_COPIED (CopyForbiddenError). The buffer's
 * owner is the capsule itself when its context is free, else a capsule
 * made here. 0, or -1 with the error set (the deleter called once when the
 * tensor was taken). */
static inline int dlpack_ref_capsule_to_buffer(PyObject* capsule, Py_buffer* view, int flags, int dtypes,
                                               const DLDevice* announced, DLDevice* device, DLDataType* dtype) {
    DLPackRefTensor t;
    if (dlpack_ref_take_as(capsule, dtypes, &t) < 0) return -1;
    *device = t.dl_tensor->device;
    if (dtype != NULL) *dtype = t.dl_tensor->dtype;
    if (announced != NULL && (announced->device_type != device->device_type
                              || announced->device_id != device->device_id)) {
        PyErr_Format(PyExc_BufferError,
                     "__dlpack_device__() said (%d, %d) but the capsule's tensor is on (%d, %d); its deleter was "
                     "called", (int)announced->device_type, (int)announced->device_id, (int)device->device_type,
                     (int)device->device_id);
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    if (t.flags & DLPACK_FLAG_BITMASK_IS_COPIED) {
        dlpack_ref_refuse_copied(capsule);
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    if (dlpack_ref_priv_check_buffer(&t, flags) < 0) {
        DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
        return -1;
    }
    if (dlpack_ref_priv_capsule_takes_ownership(capsule)) {
        /* The capsule is the owner (view->obj): no object is made. */
        const DLTensor* d = t.dl_tensor;
        int64_t count = dlpack_ref_element_count(d->shape, d->ndim);
        return PyBuffer_FillInfo(view, capsule, (char*)d->data + d->byte_offset,
                                 (Py_ssize_t)dlpack_ref_nbytes(count, dlpack_ref_storage_bits(d->dtype, t.flags)),
                                 (t.flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0, flags);
    }
    return dlpack_ref_tensor_to_buffer(&t, view, flags);
}

/* x.__dlpack_device__(), then x.__dlpack__(max_version=(1, 3), copy=False),
 * with stream=`stream` added when the announced device is not the CPU
 * (NULL or None: no stream is passed; a consumer that orders the memory
 * itself passes -1), and for a producer older than DLPack 1.0 (TypeError)
 * the legacy call with that stream alone. The request of a consumer that
 * takes the producer's own memory, on whatever device, without a copy:
 * the capsule (new reference), *announced set; NULL with the error set
 * (TypeError when x has no __dlpack__ or __dlpack_device__). */
static inline PyObject* dlpack_ref_consumer_request_in_place(PyObject* x, PyObject* stream, DLDevice* announced) {
    const dlpack_ref_names* n;
    PyObject* capsule;
    if (dlpack_ref_announced_device(x, announced) < 0) return NULL;
    if (announced->device_type == kDLCPU) stream = NULL;
    capsule = dlpack_ref_priv_call_dlpack(x, 1, stream, NULL, Py_False);
    if (capsule != NULL) return capsule;
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    if ((n = dlpack_ref_protocol_names()) == NULL) return NULL;
    if (!dlpack_ref_priv_has(x, n->dlpack)) {
        PyErr_Clear();
        dlpack_ref_priv_not_dlpack(x);
        return NULL;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
    /* A producer older than DLPack 1.0 rejects max_version and copy. */
    PyErr_Clear();
    return dlpack_ref_priv_call_dlpack(x, 0, stream, NULL, NULL);
}

/* A Py_buffer over the memory of any DLPack producer or capsule, for a
 * consumer of bytes (see above): a capsule is taken as it is; a producer
 * gives its tensor through its type's exchange table (no synchronization),
 * else it is asked dlpack_ref_consumer_request_in_place(x, stream) and its
 * tensor must be where it said. `dtypes`: DLPACK_REF_DTYPES_*; *device receives
 * the memory's device, *dtype (unless NULL) its data type. 0 with `view` filled (its owner runs the deleter
 * once, when the buffer is released), or -1 with the error set: BufferError
 * for a tensor the checks refuse, a non-contiguous one, READ_ONLY memory
 * asked writable (PyBUF_WRITABLE in `flags`) or one flagged IS_COPIED
 * (CopyForbiddenError), the deleter called once. */
static inline int dlpack_ref_get_buffer(PyObject* x, Py_buffer* view, int flags, int dtypes, PyObject* stream,
                                        DLDevice* device, DLDataType* dtype) {
    DLDevice announced;
    PyObject *capsule, *owner;
    const DLPackExchangeAPI* api;
    DLPackRefTensor t;
    int r;
    if (PyCapsule_CheckExact(x)) return dlpack_ref_capsule_to_buffer(x, view, flags, dtypes, NULL, device, dtype);
    /* A type with an exchange table gives its tensor with no capsule and no
       synchronization, which is what the request below asks of any other
       (its own memory, the stream left to the caller); any failure of the
       table falls back to __dlpack__. */
    api = dlpack_ref_exchange_api_memo_ref(&dlpack_ref_priv_api_memo, Py_TYPE(x), &owner);
    if (api == NULL && PyErr_Occurred()) return -1;
    r = api == NULL ? 0 : dlpack_ref_priv_take_by_table(api, x, &t);
    Py_XDECREF(owner);
    if (r < 0) return -1;
    if (r > 0) {
        *device = t.dl_tensor->device;
        if (dtype != NULL) *dtype = t.dl_tensor->dtype;
        if (t.flags & DLPACK_FLAG_BITMASK_IS_COPIED) {
            dlpack_ref_refuse_copied(x);
            DLPACK_REF_PRIV_KEEP_ERROR(dlpack_ref_release(&t));
            return -1;
        }
        return dlpack_ref_tensor_to_buffer(&t, view, flags);
    }
    capsule = dlpack_ref_consumer_request_in_place(x, stream, &announced);
    if (capsule == NULL) return -1;
    if (!PyCapsule_CheckExact(capsule)) {
        /* BufferError, as the buffer protocol reports memory it cannot
           expose (dlpack_ref_take_returned says TypeError for an array). */
        PyObject* tn = dlpack_ref_priv_type_name(capsule);
        if (tn != NULL) {
            PyErr_Format(PyExc_BufferError, "__dlpack__ returned %U, not a DLPack capsule", tn);
            Py_DECREF(tn);
        }
        dlpack_ref_decref_keeping_error(capsule);
        return -1;
    }
    r = dlpack_ref_capsule_to_buffer(capsule, view, flags, dtypes, &announced, device, dtype);
    dlpack_ref_decref_keeping_error(capsule);
    return r;
}

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLPACK_REF_H */
