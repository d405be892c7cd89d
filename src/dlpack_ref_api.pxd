# cython: language_level=3
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: dlpack-ref developers
#
# The Cython API of dlpack-ref: the checks every DLPack consumer must make,
# and the export and import of capsules, as inline functions that another
# extension compiles into itself. dlpack-ref's own core cimports this file
# and calls these very functions, so a library that vendors it gets exactly
# the reference's rules, not a copy of them.
#
# Header-only on purpose (see docs/exchange_api.md): nothing here links
# against dlpack-ref's compiled module, so a library can either build
# against an installed dlpack-ref (include_path=[dlpack_ref.get_include()])
# or vendor the four files of get_include() -- dlpack.h, dlpack.pxd,
# dlpack_ref_tables.h (the dtype and device tables, generated when
# dlpack-ref is built) and this one -- and need no dlpack-ref at run time.
# Only dlpack_ref_to_array and dlpack_ref_view talk to a dlpack_ref.Array,
# and they do it through the standard DLPack C exchange API table of the
# Array type, not through private symbols.
#
#     from dlpack cimport DLTensor
#     from dlpack_ref_api cimport *
#
# Exported capsules follow the rules of dlpack-ref itself: one allocation per
# export (struct, shape and strides together, from pymalloc: exports are
# made with the GIL held), strides never NULL, the owner kept alive until
# the deleter runs; the deleter may run on any thread, takes the GIL itself
# and leaks (never crashes) after the interpreter has finalized.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT64_MAX
from libc.string cimport strcmp
cimport cython
from cpython.object cimport PyObject
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_SetName,
)
from cpython.ref cimport Py_DECREF
from dlpack cimport *


# --- the dtype and device tables (generated from dlpack-ref's Python tables) --

cdef extern from "dlpack_ref_tables.h" nogil:
    const char* dlpack_ref_dtype_format(uint8_t code, uint8_t bits, uint16_t lanes)
    uint32_t dlpack_ref_dtype_of_format(const char* fmt, long itemsize)
    const char* DLPACK_REF_DTYPES_ACCEPTED
    bint dlpack_ref_device_type_known(int32_t device_type)
    bint dlpack_ref_device_supported(int32_t device_type)
    bint dlpack_ref_device_host_accessible(int32_t device_type)
    bint dlpack_ref_device_cuda_family(int32_t device_type)
    const char* DLPACK_REF_DEVICE_TYPES_ACCEPTED
    const char* DLPACK_REF_DEVICES_SUPPORTED


# --- the one allocation of an export, its deleters and capsule destructors -----

cdef extern from *:
    """
    #ifndef DLPACK_REF_API_EXPORT_H
    #define DLPACK_REF_API_EXPORT_H
    #include <string.h>

    static int dlpack_ref_api_is_finalizing(void) {
    #if PY_VERSION_HEX >= 0x030D0000
        return Py_IsFinalizing();
    #else
        return _Py_IsFinalizing();
    #endif
    }

    /* Drop the owner and free the block of an export. A deleter can run on a
       thread without the GIL, or after the interpreter has finalized; in the
       last case touching Python would crash, so both are leaked: the process
       is ending and the OS reclaims the memory. */
    static void dlpack_ref_api_release_block(PyObject* owner, void* block) {
        PyGILState_STATE st;
        if (!Py_IsInitialized()) return;
        if (PyGILState_Check()) { Py_XDECREF(owner); PyMem_Free(block); return; }
        if (dlpack_ref_api_is_finalizing()) return;
        st = PyGILState_Ensure();
        Py_XDECREF(owner);
        PyMem_Free(block);
        PyGILState_Release(st);
    }

    static void dlpack_ref_api_delete_versioned(DLManagedTensorVersioned* self) {
        dlpack_ref_api_release_block((PyObject*)self->manager_ctx, self);
    }

    static void dlpack_ref_api_delete_legacy(DLManagedTensor* self) {
        dlpack_ref_api_release_block((PyObject*)self->manager_ctx, self);
    }

    /* An unconsumed capsule still owns its tensor; a consumer renames it.
       Whoever destroys a capsule holds the GIL, so a block of ours is
       released right here; a foreign deleter is called as it is. */
    #define DLPACK_REF_API_DESTROY(Managed, own_deleter, capsule_name)                  \
        const char* name = PyCapsule_GetName(capsule);                                   \
        Managed* m;                                                                      \
        if (name == NULL || strcmp(name, capsule_name) != 0) return;                     \
        m = (Managed*)PyCapsule_GetPointer(capsule, name);                               \
        if (m->deleter == own_deleter) {                                                 \
            Py_XDECREF((PyObject*)m->manager_ctx);                                       \
            PyMem_Free(m);                                                               \
        } else if (m->deleter) {                                                         \
            m->deleter(m);                                                               \
        }

    static void dlpack_ref_api_destroy_versioned(PyObject* capsule) {
        DLPACK_REF_API_DESTROY(DLManagedTensorVersioned, dlpack_ref_api_delete_versioned,
                               DLPACK_REF_CAPSULE_VERSIONED)
    }

    static void dlpack_ref_api_destroy_legacy(PyObject* capsule) {
        DLPACK_REF_API_DESTROY(DLManagedTensor, dlpack_ref_api_delete_legacy, DLPACK_REF_CAPSULE_LEGACY)
    }

    /* t's metadata into `into`, shape and strides into `storage` (2 * ndim
       int64 right after the managed struct); NULL strides become row-major. */
    static void dlpack_ref_api_fill(DLTensor* into, const DLTensor* t, int64_t* storage) {
        int i;
        int64_t s = 1;
        *into = *t;
        into->shape = storage;
        into->strides = storage + t->ndim;
        if (t->ndim == 0) return;
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

    /* The block of a versioned export owning one reference to `owner`. */
    static DLManagedTensorVersioned* dlpack_ref_api_versioned_block(const DLTensor* t, PyObject* owner,
                                                                    uint64_t flags) {
        DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)PyMem_Malloc(
            sizeof(DLManagedTensorVersioned) + 2 * (size_t)t->ndim * sizeof(int64_t));
        if (m == NULL) { PyErr_NoMemory(); return NULL; }
        m->version.major = DLPACK_MAJOR_VERSION;
        m->version.minor = DLPACK_MINOR_VERSION;
        m->flags = flags;
        dlpack_ref_api_fill(&m->dl_tensor, t, (int64_t*)(m + 1));
        Py_INCREF(owner);
        m->manager_ctx = owner;
        m->deleter = dlpack_ref_api_delete_versioned;
        return m;
    }

    /* A capsule owning an existing managed tensor (deleted if that fails). */
    static PyObject* dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m) {
        PyObject* capsule = PyCapsule_New(m, DLPACK_REF_CAPSULE_VERSIONED, dlpack_ref_api_destroy_versioned);
        if (capsule == NULL && m->deleter) m->deleter(m);
        return capsule;
    }

    static PyObject* dlpack_ref_api_wrap_legacy(DLManagedTensor* m) {
        PyObject* capsule = PyCapsule_New(m, DLPACK_REF_CAPSULE_LEGACY, dlpack_ref_api_destroy_legacy);
        if (capsule == NULL && m->deleter) m->deleter(m);
        return capsule;
    }

    static PyObject* dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags) {
        DLManagedTensorVersioned* m = dlpack_ref_api_versioned_block(t, owner, flags);
        return m == NULL ? NULL : dlpack_ref_api_wrap_versioned(m);
    }

    static PyObject* dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner) {
        DLManagedTensor* m = (DLManagedTensor*)PyMem_Malloc(
            sizeof(DLManagedTensor) + 2 * (size_t)t->ndim * sizeof(int64_t));
        if (m == NULL) return PyErr_NoMemory();
        dlpack_ref_api_fill(&m->dl_tensor, t, (int64_t*)(m + 1));
        Py_INCREF(owner);
        m->manager_ctx = owner;
        m->deleter = dlpack_ref_api_delete_legacy;
        return dlpack_ref_api_wrap_legacy(m);
    }
    #endif
    """
    DLManagedTensorVersioned* dlpack_ref_api_versioned_block(const DLTensor* t, PyObject* owner,
                                                             uint64_t flags) except NULL
    object dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags)
    object dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner)
    object dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m)
    object dlpack_ref_api_wrap_legacy(DLManagedTensor* m)
    void dlpack_ref_api_delete_versioned(DLManagedTensorVersioned* self) noexcept nogil


# A DLPack tensor taken from a capsule or a producer. The holder owns it:
# dlpack_ref_release runs its deleter exactly once.
cdef struct DLPackRefTensor:
    DLTensor* dl_tensor
    uint64_t flags              # DLPACK_FLAG_BITMASK_*; 0 for legacy
    void* managed               # DLManagedTensorVersioned* or DLManagedTensor*
    bint versioned


# --- sizes -------------------------------------------------------------------

cdef inline int64_t dlpack_ref_storage_bits(DLDataType dtype, uint64_t flags) noexcept nogil:
    """Bits one element occupies in memory: bits * lanes, or 8 for sub-byte
    types stored one per byte (IS_SUBBYTE_TYPE_PADDED)."""
    cdef int64_t bits = <int64_t>dtype.bits * dtype.lanes
    if bits < 8 and (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED):
        return 8
    return bits


cdef inline int64_t dlpack_ref_nbytes(int64_t count, int64_t storage_bits) noexcept nogil:
    """Bytes that `count` elements of `storage_bits` bits occupy (packed
    sub-byte data rounds up to whole bytes). The callers' checks keep it in
    int64."""
    return (count * storage_bits + 7) // 8


@cython.cdivision(True)   # the divisors are extents > 1
cdef inline int64_t dlpack_ref_element_count(const int64_t* shape, int32_t ndim) noexcept nogil:
    """The product of the extents; -1 when one is negative, -2 when the
    product overflows int64 (a zero extent makes any shape's product 0)."""
    cdef int64_t n = 1
    cdef int64_t extent
    cdef int i
    for i in range(ndim):
        if shape[i] < 0:
            return -1
        if shape[i] == 0:
            n = 0
    if n == 0:
        return 0
    for i in range(ndim):
        extent = shape[i]
        # Extents of 1 (common at high ndim) change nothing: no division.
        if extent != 1:
            if n > INT64_MAX // extent:
                return -2
            n *= extent
    return n


@cython.cdivision(True)   # the divisor is a nonzero |stride|
cdef inline int64_t dlpack_ref_span(const int64_t* shape, const int64_t* strides, int32_t ndim) noexcept nogil:
    """Elements between the first and the farthest element, sum |stride| *
    (extent - 1), for a non-empty tensor; -1 when it overflows int64 or a
    stride is INT64_MAX or INT64_MIN."""
    cdef int64_t span = 0
    cdef int64_t stride
    cdef int i
    for i in range(ndim):
        stride = strides[i]
        # The two extreme values cannot be negated or stepped over, whatever
        # the extent: refused on every axis.
        if stride == INT64_MAX or stride < -INT64_MAX:
            return -1
        if shape[i] <= 1:
            continue
        if stride < 0:
            stride = -stride
        if stride and shape[i] - 1 > (INT64_MAX - span) // stride:
            return -1
        span += stride * (shape[i] - 1)
    return span


# --- the checks: one rule each; every consumer calls all of them --------------

cdef inline int dlpack_check_ndim(int32_t ndim) except -1:
    if ndim < 0 or ndim > DLPACK_REF_MAX_NDIM:
        raise BufferError(f"DLTensor.ndim={ndim} is out of range; accepted: 0 to {DLPACK_REF_MAX_NDIM}")
    return 0


cdef inline int dlpack_check_dtype(DLDataType dtype) except -1:
    if dlpack_ref_dtype_format(dtype.code, dtype.bits, dtype.lanes) == NULL:
        raise BufferError(
            f"unsupported DLDataType(code={dtype.code}, bits={dtype.bits}, lanes={dtype.lanes}): not a "
            f"DLPack 1.3 data type; accepted (code, bits, lanes): {DLPACK_REF_DTYPES_ACCEPTED.decode()}")
    return 0


cdef inline int dlpack_check_device(DLDevice device) except -1:
    if not dlpack_ref_device_type_known(device.device_type):
        raise BufferError(
            f"DLTensor.device=({<int>device.device_type}, {device.device_id}) has a device type that "
            f"DLPack 1.3 does not define; defined: {DLPACK_REF_DEVICE_TYPES_ACCEPTED.decode()}")
    if device.device_id < 0:
        raise BufferError(f"DLTensor.device.device_id={device.device_id} is negative")
    return 0


cdef inline int dlpack_check_shape(const DLTensor* t) except -1:
    if t.ndim > 0 and t.shape == NULL:
        raise BufferError(f"DLTensor.shape is NULL with ndim={t.ndim}")
    return 0


cdef inline int dlpack_check_strides(const DLTensor* t, bint null_strides_ok) except -1:
    # NULL strides meant row-major until DLPack 1.2 made them mandatory.
    if t.ndim > 0 and t.strides == NULL and not null_strides_ok:
        raise BufferError(
            "DLTensor.strides is NULL with ndim > 0, which DLPack >= 1.2 forbids (NULL meant "
            "row-major only in legacy and pre-1.2 capsules)")
    return 0


cdef inline int64_t dlpack_check_extents(const DLTensor* t, uint64_t flags) except -1:
    """The element count, after checking that it and its size in bytes fit int64."""
    cdef int64_t n = dlpack_ref_element_count(t.shape, t.ndim)
    cdef int i
    if n == -1:
        for i in range(t.ndim):
            if t.shape[i] < 0:
                raise BufferError(f"DLTensor.shape[{i}]={t.shape[i]} is negative")
    if n == -2:
        n = 1
        for i in range(t.ndim):
            if n > INT64_MAX // t.shape[i]:
                break
            n *= t.shape[i]
        raise BufferError(
            f"DLTensor shape {tuple([t.shape[j] for j in range(t.ndim)])} overflows int64 at axis {i} "
            f"(extent {t.shape[i]}): more elements than fit in int64")
    if n > (INT64_MAX - 7) // dlpack_ref_storage_bits(t.dtype, flags):
        raise BufferError(
            f"DLTensor.shape {tuple([t.shape[i] for i in range(t.ndim)])} of {t.dtype.bits}-bit elements "
            "needs more than 2**63 bytes")
    return n


cdef inline int dlpack_check_span(const DLTensor* t, int64_t count, uint64_t flags) except -1:
    """The farthest element is addressable: its byte distance from the first fits int64."""
    cdef int64_t span
    if count == 0 or t.strides == NULL:
        return 0   # row-major: covered by the byte size of the extents
    span = dlpack_ref_span(t.shape, t.strides, t.ndim)
    if span < 0 or span + 1 > INT64_MAX // dlpack_ref_storage_bits(t.dtype, flags):
        raise BufferError(
            f"DLTensor strides {tuple([t.strides[i] for i in range(t.ndim)])} with shape "
            f"{tuple([t.shape[i] for i in range(t.ndim)])} reach beyond 2**63 bytes")
    return 0


cdef inline int dlpack_check_data(const DLTensor* t, int64_t count) except -1:
    if t.data == NULL and count != 0:
        raise BufferError(
            f"DLTensor.data is NULL for a non-empty tensor (shape {tuple([t.shape[i] for i in range(t.ndim)])})")
    return 0


cdef inline int dlpack_check_byte_offset(const DLTensor* t) except -1:
    if t.byte_offset > <uint64_t>INT64_MAX:
        raise BufferError(f"DLTensor.byte_offset={t.byte_offset} overflows int64")
    return 0


cdef inline int dlpack_check_tensor(const DLTensor* t, uint64_t flags, bint null_strides_ok) except -1:
    """Every rule a DLTensor must meet before any of its fields is trusted."""
    dlpack_check_ndim(t.ndim)
    dlpack_check_dtype(t.dtype)
    dlpack_check_device(t.device)
    dlpack_check_shape(t)
    dlpack_check_strides(t, null_strides_ok)
    cdef int64_t count = dlpack_check_extents(t, flags)
    dlpack_check_span(t, count, flags)
    dlpack_check_data(t, count)
    dlpack_check_byte_offset(t)
    return 0


# --- export: DLTensor + owner -> capsule -------------------------------------

cdef inline int _dlpack_ref_check_export(const DLTensor* t) except -1:
    if t.ndim < 0 or t.ndim > DLPACK_REF_MAX_NDIM:
        raise ValueError(f"DLTensor.ndim={t.ndim} is out of range 0..{DLPACK_REF_MAX_NDIM}")
    if t.ndim > 0 and t.shape == NULL:
        raise ValueError(f"DLTensor.shape is NULL with ndim={t.ndim}")
    return 0


cdef inline object dlpack_ref_export_versioned(const DLTensor* tensor, object owner, uint64_t flags):
    """A ``dltensor_versioned`` capsule (version 1.3, ``flags``) describing
    ``tensor``; its shape/strides are copied (NULL strides become row-major),
    ``owner`` is kept alive until the consumer's deleter call."""
    _dlpack_ref_check_export(tensor)
    return dlpack_ref_api_new_versioned(tensor, <PyObject*>owner, flags)


cdef inline object dlpack_ref_export_legacy(const DLTensor* tensor, object owner):
    """A legacy ``dltensor`` capsule (for consumers older than DLPack 1.0)."""
    _dlpack_ref_check_export(tensor)
    return dlpack_ref_api_new_legacy(tensor, <PyObject*>owner)


# --- import: capsule or producer -> owned tensor -----------------------------

cdef inline void dlpack_ref_release(DLPackRefTensor* t) noexcept nogil:
    """Run the deleter of a taken tensor (once: the holder is cleared)."""
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    if t.managed == NULL:
        return
    if t.versioned:
        mv = <DLManagedTensorVersioned*>t.managed
        if mv.deleter != NULL:
            mv.deleter(mv)
    else:
        ml = <DLManagedTensor*>t.managed
        if ml.deleter != NULL:
            ml.deleter(ml)
    t.managed = NULL
    t.dl_tensor = NULL


cdef inline int dlpack_check_version(const DLManagedTensorVersioned* m) except -1:
    if m.version.major != DLPACK_MAJOR_VERSION:
        raise BufferError(
            f"DLPack capsule has version {m.version.major}.{m.version.minor}; major version "
            f"{DLPACK_MAJOR_VERSION} (ABI {DLPACK_MAJOR_VERSION}.{DLPACK_MINOR_VERSION}) is read here. "
            "Its deleter was called.")
    return 0


cdef inline int dlpack_check_managed(void* managed, bint versioned) except -1:
    """Every rule a managed tensor (DLManagedTensorVersioned* when
    ``versioned``, else DLManagedTensor*) must meet: the version, then
    dlpack_check_tensor. The caller owns it and runs its deleter on failure."""
    cdef DLManagedTensorVersioned* mv
    if not versioned:
        return dlpack_check_tensor(&(<DLManagedTensor*>managed).dl_tensor, 0, True)
    mv = <DLManagedTensorVersioned*>managed
    dlpack_check_version(mv)
    return dlpack_check_tensor(&mv.dl_tensor, mv.flags, mv.version.minor < 2)


cdef inline int dlpack_ref_adopt(void* managed, bint versioned, DLPackRefTensor* out) except -1:
    """Own ``managed`` and check it with dlpack_check_managed. On failure its
    deleter has run once and the error is raised; ``out`` is filled only on
    success."""
    cdef DLPackRefTensor t
    t.managed = managed
    t.versioned = versioned
    if versioned:
        t.dl_tensor = &(<DLManagedTensorVersioned*>managed).dl_tensor
        t.flags = (<DLManagedTensorVersioned*>managed).flags
    else:
        t.dl_tensor = &(<DLManagedTensor*>managed).dl_tensor
        t.flags = 0
    try:
        dlpack_check_managed(managed, versioned)
    except BaseException:
        dlpack_ref_release(&t)
        raise
    out[0] = t
    return 0


cdef inline void* dlpack_ref_claim(object capsule, bint* versioned) except NULL:
    """The managed tensor of an unconsumed ``dltensor_versioned`` or
    ``dltensor`` capsule, which is renamed ``used_*``: from here on the
    caller owns the tensor (and runs its deleter). ``versioned`` tells which
    struct it is."""
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"expected a DLPack capsule, not {type(capsule).__name__}")
    cdef const char* name
    cdef void* managed = NULL
    # Read and rename under the capsule's critical section: without the GIL
    # two threads could both read the unused name and both take the tensor
    # (two owners, the deleter called twice). It serializes the consumers
    # that lock the capsule (this API, so dlpack-ref); a library that renames
    # without locking races with them (docs/guarantees.md, Free threading).
    with cython.critical_section(capsule):
        name = PyCapsule_GetName(capsule)
        if name != NULL and strcmp(name, DLPACK_REF_CAPSULE_VERSIONED) == 0:
            # Its own name pointer: CPython compares pointers first, so the
            # name is not compared a second time.
            managed = PyCapsule_GetPointer(capsule, name)
            PyCapsule_SetName(capsule, DLPACK_REF_CAPSULE_USED_VERSIONED)
            versioned[0] = True
        elif name != NULL and strcmp(name, DLPACK_REF_CAPSULE_LEGACY) == 0:
            managed = PyCapsule_GetPointer(capsule, DLPACK_REF_CAPSULE_LEGACY)
            PyCapsule_SetName(capsule, DLPACK_REF_CAPSULE_USED_LEGACY)
            versioned[0] = False
    if managed != NULL:
        return managed
    if name != NULL and (strcmp(name, DLPACK_REF_CAPSULE_USED_VERSIONED) == 0
                         or strcmp(name, DLPACK_REF_CAPSULE_USED_LEGACY) == 0):
        raise BufferError(
            f"this DLPack capsule was already consumed (it is named {name.decode()!r}); "
            "a capsule can be imported once")
    shown = "NULL" if name == NULL else repr((<bytes>name).decode("utf-8", "replace"))
    raise BufferError(
        f"a capsule named {shown} is not a DLPack capsule; expected "
        f"{DLPACK_REF_CAPSULE_VERSIONED.decode()!r} or {DLPACK_REF_CAPSULE_LEGACY.decode()!r}")


cdef inline int dlpack_ref_take(object capsule, DLPackRefTensor* out) except -1:
    """Take ownership of the tensor of a ``dltensor_versioned`` or
    ``dltensor`` capsule (dlpack_ref_claim) and check it (dlpack_ref_adopt).
    Whether this library can hold memory of the tensor's device is the
    caller's to decide."""
    cdef bint versioned = False
    cdef void* managed = dlpack_ref_claim(capsule, &versioned)
    return dlpack_ref_adopt(managed, versioned, out)


cdef inline bint _dlpack_ref_dunder_overridden(object tp):
    """Whether a class of tp's MRO defines ``__dlpack__`` before (below) the
    one that publishes ``__dlpack_c_exchange_api__``."""
    for cls in getattr(tp, "__mro__", ()):
        namespace = getattr(cls, "__dict__", None)
        if namespace is None:
            continue
        if "__dlpack_c_exchange_api__" in namespace:
            return False
        if "__dlpack__" in namespace:
            return True
    return False


# --- calls into another library's exchange table ------------------------------
# Each function of a table is called through these wrappers, which hand back
# its status as a plain int: a table may return nonzero with no exception
# set (Cython's `except -1` would turn that into a SystemError) or set an
# exception and return 0. Either is a failure; what it leads to is decided
# per function (docs/exchange_api.md, "Calls into a foreign table").

cdef extern from *:
    """
    #ifndef DLPACK_REF_API_TABLE_CALLS_H
    #define DLPACK_REF_API_TABLE_CALLS_H
    static int dlpack_ref_api_table_from_py(const DLPackExchangeAPI* api, PyObject* obj,
                                            DLManagedTensorVersioned** out) {
        return api->managed_tensor_from_py_object_no_sync((void*)obj, out);
    }
    static int dlpack_ref_api_table_to_py(const DLPackExchangeAPI* api, DLManagedTensorVersioned* tensor,
                                          void** out) {
        return api->managed_tensor_to_py_object_no_sync(tensor, out);
    }
    static int dlpack_ref_api_table_view(const DLPackExchangeAPI* api, PyObject* obj, DLTensor* out) {
        return api->dltensor_from_py_object_no_sync((void*)obj, out);
    }
    static int dlpack_ref_api_table_stream(const DLPackExchangeAPI* api, int32_t device_type,
                                           int32_t device_id, void** out) {
        return api->current_work_stream((DLDeviceType)device_type, device_id, out);
    }
    /* -1 with the error a call left set: raises it in Cython. */
    static int dlpack_ref_api_pending_error(void) { return -1; }
    #endif
    """
    int dlpack_ref_api_table_from_py(const DLPackExchangeAPI* api, PyObject* obj,
                                     DLManagedTensorVersioned** out) noexcept
    int dlpack_ref_api_table_to_py(const DLPackExchangeAPI* api, DLManagedTensorVersioned* tensor,
                                   void** out) noexcept
    int dlpack_ref_api_table_view(const DLPackExchangeAPI* api, PyObject* obj, DLTensor* out) noexcept
    int dlpack_ref_api_table_stream(const DLPackExchangeAPI* api, int32_t device_type, int32_t device_id,
                                    void** out) noexcept
    # Raises the exception left pending by a call that failed.
    int dlpack_ref_raise_pending "dlpack_ref_api_pending_error"() except -1
    PyObject* _dlpack_ref_err_occurred "PyErr_Occurred"() noexcept
    void _dlpack_ref_err_clear "PyErr_Clear"() noexcept


cdef inline bint dlpack_ref_table_failed(int status) noexcept:
    """Whether a table call failed: a nonzero status or an exception set."""
    return status != 0 or _dlpack_ref_err_occurred() != NULL


cdef inline object dlpack_ref_table_error(object tp, str function, int status):
    """The exception for a failed call of ``function`` in the exchange table
    of type ``tp`` (raise it). A failure as the header describes it, a
    nonzero status with an exception set, gives that exception as it is:
    the producer's own error. A nonzero status with none set, or an
    exception set with status 0, gives a BufferError naming the type and
    the function, the exception (taken here) as its ``__cause__``."""
    cause = None
    if _dlpack_ref_err_occurred() != NULL:
        try:
            dlpack_ref_raise_pending()
        except BaseException as exc:
            cause = exc
        if status != 0 or not isinstance(cause, Exception):
            return cause
    if cause is None:
        how = f"returned {status} without setting an exception"
    else:
        how = f"returned 0 but set {type(cause).__name__}: {cause}"
    error = BufferError(f"the DLPack exchange API of {getattr(tp, '__name__', tp)} failed in {function}: {how}")
    error.__cause__ = cause
    return error


cdef inline const DLPackExchangeAPI* dlpack_ref_exchange_api(object tp) except? NULL:
    """The DLPack 1.x exchange table a type publishes as
    ``__dlpack_c_exchange_api__`` (following ``prev_api`` from another major
    version, at most DLPACK_REF_MAX_API_CHAIN links: a longer chain is taken
    as a cycle), or NULL when it has none usable. Any error reading the
    attribute also means "none": the caller falls back to ``__dlpack__``.
    The table stands in for ``__dlpack__``, so it is not used when a class
    below the one that publishes it in ``tp.__mro__`` defines ``__dlpack__``:
    a subclass that overrides ``__dlpack__`` gets its override called.
    Not cached: callers on a hot path keep the result per type."""
    try:
        cap = getattr(tp, "__dlpack_c_exchange_api__", None)
        if cap is not None and _dlpack_ref_dunder_overridden(tp):
            return NULL
    except Exception:
        return NULL
    if cap is None or not PyCapsule_IsValid(cap, DLPACK_REF_CAPSULE_EXCHANGE_API):
        return NULL
    cdef DLPackExchangeAPIHeader* header = <DLPackExchangeAPIHeader*>PyCapsule_GetPointer(
        cap, DLPACK_REF_CAPSULE_EXCHANGE_API)
    cdef int links = 0
    while header != NULL and header.version.major != DLPACK_MAJOR_VERSION:
        links += 1
        if links > DLPACK_REF_MAX_API_CHAIN:
            return NULL
        header = header.prev_api
    if header == NULL or (<DLPackExchangeAPI*>header).managed_tensor_from_py_object_no_sync == NULL:
        return NULL
    return <const DLPackExchangeAPI*>header


cdef inline int dlpack_ref_import(object obj, DLPackRefTensor* out) except -1:
    """Take the tensor of any DLPack producer or capsule, zero-copy, with no
    synchronization asked for (CPU data, or data whose stream ordering the
    caller handles). The exchange table of obj's type is used when it has
    one, else ``obj.__dlpack__(max_version=(1, 3))`` (``obj.__dlpack__()``
    for producers older than 1.0)."""
    cdef const DLPackExchangeAPI* api
    cdef DLManagedTensorVersioned* m = NULL
    if PyCapsule_CheckExact(obj):
        return dlpack_ref_take(obj, out)
    cdef int status
    api = dlpack_ref_exchange_api(type(obj))
    if api != NULL:
        status = dlpack_ref_api_table_from_py(api, <PyObject*>obj, &m)
        if not dlpack_ref_table_failed(status) and m != NULL:
            return dlpack_ref_adopt(m, True, out)
        # The table stands in for __dlpack__, so any failure of it asks
        # __dlpack__, whose answer (or refusal) is the one the caller gets.
        _dlpack_ref_err_clear()
        if m != NULL and m.deleter != NULL:
            # Handed with a failure status: not trusted, but ours to free.
            m.deleter(m)
    try:
        capsule = obj.__dlpack__(max_version=(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION))
    except TypeError:
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"expected a DLPack producer or capsule, not {type(obj).__name__}") from None
        capsule = obj.__dlpack__()
    except AttributeError:
        raise TypeError(f"expected a DLPack producer or capsule, not {type(obj).__name__}") from None
    return dlpack_ref_take(capsule, out)


# --- dlpack_ref.Array, through its exchange table ----------------------------

cdef inline const DLPackExchangeAPI* _dlpack_ref_array_api() except NULL:
    from dlpack_ref import Array
    cdef const DLPackExchangeAPI* api = dlpack_ref_exchange_api(Array)
    if api == NULL:
        raise ImportError("dlpack_ref.Array publishes no usable DLPack exchange API")
    return api


cdef inline object dlpack_ref_to_array(DLPackRefTensor* t):
    """A ``dlpack_ref.Array`` owning the taken tensor ``t`` (zero-copy; ``t``
    is emptied: the Array runs the deleter). Needs dlpack-ref installed."""
    cdef const DLPackExchangeAPI* api = _dlpack_ref_array_api()
    cdef void* out = NULL
    cdef DLManagedTensorVersioned* m
    if t.managed == NULL:
        raise ValueError("this DLPackRefTensor holds no tensor (released or moved)")
    if not t.versioned:
        # The table takes versioned tensors only; a legacy one goes through
        # a capsule, which dlpack-ref reads as well.
        from dlpack_ref import from_dlpack
        capsule = dlpack_ref_api_wrap_legacy(<DLManagedTensor*>t.managed)
        t.managed = NULL
        t.dl_tensor = NULL
        return from_dlpack(capsule)
    m = <DLManagedTensorVersioned*>t.managed
    t.managed = NULL
    t.dl_tensor = NULL
    cdef int status = dlpack_ref_api_table_to_py(api, m, &out)   # owns m from here on, also on failure
    if dlpack_ref_table_failed(status) or out == NULL:
        from dlpack_ref import Array
        error = dlpack_ref_table_error(Array, "managed_tensor_to_py_object_no_sync", status)
        if out != NULL:
            # An object handed with a failure status is still a reference of ours.
            Py_DECREF(<object>out)
        raise error
    array = <object>out   # a new reference of ours, plus the one handed over
    Py_DECREF(array)
    return array


cdef inline int dlpack_ref_view(object array, DLTensor* out) except -1:
    """Borrow the DLTensor of a ``dlpack_ref.Array`` (no allocation, valid
    while the Array lives) through its table."""
    cdef int status = dlpack_ref_api_table_view(_dlpack_ref_array_api(), <PyObject*>array, out)
    if dlpack_ref_table_failed(status):
        raise dlpack_ref_table_error(type(array), "dltensor_from_py_object_no_sync", status)
    return 0
