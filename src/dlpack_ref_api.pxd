# cython: language_level=3
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: dlpack-ref developers
#
# The Cython API of dlpack-ref: Cython declarations of include/dlpack_ref.h,
# the vendorable DLPack protocol in C, with no rule of its own. Every check a
# DLPack consumer must make, the export and import of capsules, and the
# deleters and capsule destructors are written once, in that header; the
# core cimports this file and calls those very functions, so a library that
# vendors them (from C, C++ or Cython) gets exactly the reference's rules,
# not a copy of them.
#
# Header-only on purpose (see docs/vendoring.md): nothing here links against
# dlpack-ref's compiled module, so a library can either build against an
# installed dlpack-ref (include_path=[dlpack_ref.get_include()]) or vendor
# the files of get_include() -- dlpack.h, dlpack_ref.h, dlpack_ref_tables.h
# (the dtype and device tables, generated when dlpack-ref is built),
# dlpack.pxd and this one -- and need no dlpack-ref at run time. Only
# dlpack_ref_to_array and dlpack_ref_view talk to a dlpack_ref.Array, and
# they do it through the standard DLPack C exchange API table of the Array
# type, not through private symbols.
#
#     from dlpack cimport DLTensor
#     from dlpack_ref_api cimport *
#
# Exceptions: a function declared `except -1` / `except NULL` returns that
# value with a Python exception set (the C convention of the header), which
# Cython raises.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from cpython.object cimport PyObject, PyTypeObject
from dlpack cimport *

# The Py_buffer of the buffer calls below by a name of its own: a module that
# declares its own Py_buffer struct (as many do, from Python.h) casts its
# pointer to this one.
ctypedef Py_buffer dlpack_ref_py_buffer


# --- the dtype and device tables (generated from dlpack-ref's Python tables) --

cdef extern from "dlpack_ref_tables.h" nogil:
    const char* DLPACK_REF_VERSION      # the dlpack-ref release these files come from
    const char* dlpack_ref_dtype_format(uint8_t code, uint8_t bits, uint16_t lanes)
    uint32_t dlpack_ref_dtype_of_format(const char* fmt, long itemsize)
    const char* DLPACK_REF_DTYPES_ACCEPTED
    bint dlpack_ref_device_type_known(int32_t device_type)
    bint dlpack_ref_device_supported(int32_t device_type)
    bint dlpack_ref_device_host_accessible(int32_t device_type)
    bint dlpack_ref_device_cuda_family(int32_t device_type)
    bint dlpack_ref_device_rocm_family(int32_t device_type)
    bint dlpack_ref_device_streamed(int32_t device_type)
    const char* dlpack_ref_device_type_name(int32_t device_type)
    const char* dlpack_ref_dtype_name(uint8_t code, uint8_t bits, uint16_t lanes)
    const char* DLPACK_REF_DEVICE_TYPES_ACCEPTED
    const char* DLPACK_REF_DEVICES_SUPPORTED


# --- dlpack_ref.h: sizes, checks, export, import ------------------------------

cdef extern from "dlpack_ref.h":
    # A DLPack tensor taken from a capsule or a producer. The holder owns it:
    # dlpack_ref_release runs its deleter exactly once.
    ctypedef struct DLPackRefTensor:
        DLTensor* dl_tensor
        uint64_t flags              # DLPACK_FLAG_BITMASK_*; 0 for legacy
        void* managed               # DLManagedTensorVersioned* or DLManagedTensor*
        bint versioned

    # sizes
    int64_t dlpack_ref_storage_bits(DLDataType dtype, uint64_t flags) noexcept nogil
    int64_t dlpack_ref_nbytes(int64_t count, int64_t storage_bits) noexcept nogil
    int64_t dlpack_ref_element_count(const int64_t* shape, int32_t ndim) noexcept nogil
    int64_t dlpack_ref_span(const int64_t* shape, const int64_t* strides, int32_t ndim) noexcept nogil

    # the checks: one rule each (BufferError naming the value and what is accepted)
    int dlpack_check_ndim(int32_t ndim) except -1
    int dlpack_check_dtype(DLDataType dtype) except -1
    int dlpack_check_device(DLDevice device) except -1
    int dlpack_check_shape(const DLTensor* t) except -1
    int dlpack_check_strides(const DLTensor* t, bint null_strides_ok) except -1
    int64_t dlpack_check_extents(const DLTensor* t, uint64_t flags) except -1
    int dlpack_check_span(const DLTensor* t, int64_t count, uint64_t flags) except -1
    int dlpack_check_data(const DLTensor* t, int64_t count) except -1
    int dlpack_check_byte_offset(const DLTensor* t) except -1
    int dlpack_check_tensor(const DLTensor* t, uint64_t flags, bint null_strides_ok) except -1
    int dlpack_check_version(const DLManagedTensorVersioned* m) except -1
    int dlpack_check_managed(void* managed, bint versioned) except -1
    # the data types a consumer accepts: DLPack's own, or, for a consumer
    # that takes memory as bytes, any with a size (bits and lanes not 0)
    enum:
        DLPACK_REF_DTYPES_DLPACK
        DLPACK_REF_DTYPES_AS_BYTES
    int dlpack_check_dtype_as(DLDataType dtype, int dtypes) except -1
    int dlpack_check_tensor_as(const DLTensor* t, uint64_t flags, bint null_strides_ok, int dtypes) except -1
    int dlpack_check_managed_as(void* managed, bint versioned, int dtypes) except -1

    # export: the one allocation, its deleters and capsule destructors
    int dlpack_ref_api_is_finalizing() noexcept nogil
    # drop the owner and free the block of an export, from any thread
    void dlpack_ref_api_release_block(PyObject* owner, void* block) noexcept nogil
    # t's metadata into `into`, shape and strides into `storage` (2 * ndim)
    void dlpack_ref_api_fill(DLTensor* into, const DLTensor* t, int64_t* storage) noexcept nogil
    DLManagedTensorVersioned* dlpack_ref_api_versioned_block(const DLTensor* t, PyObject* owner,
                                                             uint64_t flags) except NULL
    object dlpack_ref_api_new_versioned(const DLTensor* t, PyObject* owner, uint64_t flags)
    object dlpack_ref_api_new_legacy(const DLTensor* t, PyObject* owner)
    object dlpack_ref_api_wrap_versioned(DLManagedTensorVersioned* m)
    object dlpack_ref_api_wrap_legacy(DLManagedTensor* m)
    void dlpack_ref_api_delete_versioned(DLManagedTensorVersioned* self) noexcept nogil
    void dlpack_ref_api_delete_legacy(DLManagedTensor* self) noexcept nogil
    void dlpack_ref_api_destroy_versioned(object capsule) noexcept
    void dlpack_ref_api_destroy_legacy(object capsule) noexcept
    # ``dltensor_versioned`` / ``dltensor`` capsules describing ``tensor``
    # (shape/strides copied, NULL strides made row-major), ``owner`` kept
    # alive until the consumer's deleter call; ValueError for ndim out of
    # range or a NULL shape.
    object dlpack_ref_export_versioned(const DLTensor* tensor, object owner, uint64_t flags)
    object dlpack_ref_export_legacy(const DLTensor* tensor, object owner)

    # export of memory owned by a C reference count: the array holds one
    # count, each export another; the export's deleter gives its count back
    # (release() frees the memory at 0) with no Python at all
    ctypedef struct dlpack_ref_counted:
        int64_t refs
        void (*release)(dlpack_ref_counted* self) noexcept nogil
    void dlpack_ref_counted_retain(dlpack_ref_counted* c) noexcept nogil
    void dlpack_ref_counted_release(dlpack_ref_counted* c) noexcept nogil
    void dlpack_ref_api_delete_counted_versioned(DLManagedTensorVersioned* self) noexcept nogil
    void dlpack_ref_api_delete_counted_legacy(DLManagedTensor* self) noexcept nogil
    DLManagedTensorVersioned* dlpack_ref_api_counted_block(const DLTensor* t, dlpack_ref_counted* memory,
                                                           uint64_t flags) except NULL
    object dlpack_ref_export_versioned_counted(const DLTensor* tensor, dlpack_ref_counted* memory, uint64_t flags)
    object dlpack_ref_export_legacy_counted(const DLTensor* tensor, dlpack_ref_counted* memory)

    # export of memory with the library's own release function: the caller
    # makes one hold on its buffer and hands it over; release(ctx) is called
    # exactly once (by the deleter, on any thread, maybe without the GIL; or
    # before NULL is returned)
    void dlpack_ref_api_delete_released_versioned(DLManagedTensorVersioned* self) noexcept nogil
    void dlpack_ref_api_delete_released_legacy(DLManagedTensor* self) noexcept nogil
    object dlpack_ref_export_versioned_released(const DLTensor* tensor, void* ctx,
                                                void (*release)(void* ctx) noexcept nogil, uint64_t flags)
    object dlpack_ref_export_legacy_released(const DLTensor* tensor, void* ctx,
                                             void (*release)(void* ctx) noexcept nogil)

    # import: capsule or producer -> owned tensor
    void dlpack_ref_release(DLPackRefTensor* t) noexcept nogil
    int dlpack_ref_adopt(void* managed, bint versioned, DLPackRefTensor* out) except -1
    void* dlpack_ref_claim(object capsule, bint* versioned) except NULL
    int dlpack_ref_take(object capsule, DLPackRefTensor* out) except -1
    int dlpack_ref_adopt_as(void* managed, bint versioned, int dtypes, DLPackRefTensor* out) except -1
    int dlpack_ref_take_as(object capsule, int dtypes, DLPackRefTensor* out) except -1
    # Py_DECREF with the pending exception put aside (a capsule's destructor
    # may run Python code)
    void dlpack_ref_decref_keeping_error(PyObject* o) noexcept
    # the exchange table of type tp and, in owner, a new reference to the
    # capsule keeping it alive (NULL when none): released once the table is
    # no longer used. The second form (deprecated) returns only a table the
    # type itself holds, borrowed.
    const DLPackExchangeAPI* dlpack_ref_exchange_api_ref(object tp, PyObject** owner) except? NULL
    const DLPackExchangeAPI* dlpack_ref_exchange_api(object tp) except? NULL

    # fast calls: the protocol's names, interned once (borrowed references)
    ctypedef struct dlpack_ref_names:
        PyObject* dlpack
        PyObject* dlpack_device
        PyObject* exchange_api
        PyObject* stream
        PyObject* max_version
        PyObject* dl_device
        PyObject* copy
        PyObject* device
        PyObject* version
        PyObject* kw_max_version
    const dlpack_ref_names* dlpack_ref_protocol_names() except NULL
    # memoized per-type lookups (GIL builds of CPython 3.11 to 3.15; a fresh
    # lookup elsewhere). A memo is a zero-initialized static.
    ctypedef struct dlpack_ref_method_memo:
        pass
    ctypedef struct dlpack_ref_api_memo:
        pass
    # x.name(*args[1:nargs], **kwnames) for x = args[0], by vectorcall. kwnames
    # is a PyObject* so that "no keywords" is NULL (Cython would pass None).
    # args[0] may be replaced during the call and is put back after it.
    object dlpack_ref_call_method(dlpack_ref_method_memo* memo, object name, PyObject* const* args, size_t nargs,
                                  PyObject* kwnames)
    # The same call with its failure left pending (NULL, the error set), for
    # hot paths that enter no try block.
    PyObject* dlpack_ref_call_method_or_null "dlpack_ref_call_method"(
        dlpack_ref_method_memo* memo, object name, PyObject* const* args, size_t nargs, PyObject* kwnames)
    bint dlpack_ref_device_answer_is(object answer, DLDevice device)
    const DLPackExchangeAPI* dlpack_ref_exchange_api_memo_ref(dlpack_ref_api_memo* memo, PyTypeObject* tp,
                                                             PyObject** owner) except? NULL
    const DLPackExchangeAPI* dlpack_ref_exchange_api_memo(dlpack_ref_api_memo* memo, PyTypeObject* tp) except? NULL

    # calls into another library's exchange table: the status as a plain
    # int (a table may return nonzero with no exception set, or set one and
    # return 0); dlpack_ref_table_failed says whether it failed and
    # dlpack_ref_table_error gives the exception to raise
    int dlpack_ref_api_table_from_py(const DLPackExchangeAPI* api, PyObject* obj,
                                     DLManagedTensorVersioned** out) noexcept
    int dlpack_ref_api_table_to_py(const DLPackExchangeAPI* api, DLManagedTensorVersioned* tensor,
                                   void** out) noexcept
    int dlpack_ref_api_table_view(const DLPackExchangeAPI* api, PyObject* obj, DLTensor* out) noexcept
    int dlpack_ref_api_table_stream(const DLPackExchangeAPI* api, int32_t device_type, int32_t device_id,
                                    void** out) noexcept
    # Raises the exception left pending by a call that failed.
    int dlpack_ref_raise_pending "dlpack_ref_api_pending_error"() except -1
    bint dlpack_ref_table_failed(int status) noexcept
    object dlpack_ref_table_error(object tp, const char* function, int status)
    PyObject* _dlpack_ref_err_occurred "PyErr_Occurred"() noexcept
    void _dlpack_ref_err_clear "PyErr_Clear"() noexcept
    int dlpack_ref_import(object obj, DLPackRefTensor* out) except -1

    # dlpack_ref.Array, through its exchange table (needs dlpack-ref installed)
    object dlpack_ref_to_array(DLPackRefTensor* t)
    int dlpack_ref_view(object array, DLTensor* out) except -1

    # devices and the arguments of the producer protocol
    bint dlpack_ref_can_access(DLDevice dev, DLDevice mem) noexcept nogil
    object dlpack_ref_device_str(DLDevice dev)
    int dlpack_ref_wants_versioned(object max_version) except -1
    int dlpack_ref_check_copy_arg(object copy) except -1
    int dlpack_ref_parse_dl_device(object obj, DLDevice* out) except -1
    # a `stream` argument, parsed once where it enters
    ctypedef struct dlpack_ref_stream:
        bint given                  # 0: stream=None
        bint sync                   # 0: stream=-1 (nothing to order)
        uintptr_t handle            # CUDA: 1 legacy default, 2 per-thread default, > 2 a CUstream;
                                    # ROCm: 0 the default stream, > 2 a hipStream_t
    dlpack_ref_stream dlpack_ref_stream_none() noexcept nogil
    dlpack_ref_stream dlpack_ref_stream_none_rocm() noexcept nogil
    int dlpack_ref_stream_parse(object stream, bint cuda_memory, DLDevice device, object owner,
                                dlpack_ref_stream* out) except -1
    int dlpack_ref_stream_converter(object obj, void* out) except 0
    int dlpack_ref_stream_converter_rocm(object obj, void* out) except 0
    int dlpack_ref_stream_value(object stream, bint cuda_memory, DLDevice device, object owner,
                                int64_t* out) except -1
    int dlpack_ref_set_copy_forbidden_error(object cls) except -1
    PyObject* dlpack_ref_copy_forbidden_error() except NULL
    int dlpack_ref_refuse_copy(DLDevice mem, DLDevice target, bint importing) except -1
    int dlpack_ref_refuse_copied(object x) except -1
    int dlpack_ref_check_legacy_export(const DLTensor* t, uint64_t flags, object owner) except -1

    # the producer protocol: what an array tells it, and the calls its
    # __dlpack__ and __dlpack_device__ forward to
    ctypedef struct dlpack_ref_producer:
        DLTensor tensor
        PyObject* owner
        bint read_only
        uint64_t flags
        void* ctx
        int (*copy)(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* stream,
                    DLTensor* out, PyObject** out_owner) except -1
        int (*order)(void* ctx, const DLTensor* t, const dlpack_ref_stream* stream) except -1
    object dlpack_ref_producer_export(const dlpack_ref_producer* p, object stream, object max_version,
                                      object dl_device, object copy)
    # the same call in two steps: the plan (every argument checked, the
    # copy made or the stream ordered), then its capsule, owned by the
    # plan's owner or by a count of the memory; a plan not exported is
    # dropped
    ctypedef struct dlpack_ref_export_plan:
        const DLTensor* tensor
        PyObject* owner
        PyObject* copy_owner
        uint64_t flags
        bint versioned
        DLTensor copied
    int dlpack_ref_producer_plan(const dlpack_ref_producer* p, object stream, object max_version, object dl_device,
                                 object copy, dlpack_ref_export_plan* plan) except -1
    void dlpack_ref_export_plan_drop(dlpack_ref_export_plan* plan) noexcept
    object dlpack_ref_export_plan_capsule(dlpack_ref_export_plan* plan)
    object dlpack_ref_export_plan_capsule_counted(dlpack_ref_export_plan* plan, dlpack_ref_counted* memory)
    object dlpack_ref_export_plan_capsule_released(dlpack_ref_export_plan* plan, void* ctx,
                                                   void (*release)(void* ctx) noexcept nogil)
    object dlpack_ref_producer_dlpack(const dlpack_ref_producer* p, object args, object kwargs)
    object dlpack_ref_producer_dlpack_fast(const dlpack_ref_producer* p, PyObject* const* args, Py_ssize_t nargs,
                                           PyObject* kwnames)
    int dlpack_ref_dlpack_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** out) except -1
    PyObject* dlpack_ref_device_enum() except NULL
    object dlpack_ref_dlpack_device(DLDevice device)

    # the exchange-table builder: __dlpack_c_exchange_api__ of an adopter's
    # type from the description its __dlpack__ uses. C adopters define the
    # table with the DLPACK_REF_EXCHANGE_TABLE macro; a Cython adopter writes
    # the five functions of its static DLPackExchangeAPI as one-line calls of
    # the dlpack_ref_exchange_* functions with its static spec, and fills the
    # table with dlpack_ref_exchange_table_init.
    ctypedef struct dlpack_ref_exchange_spec:
        PyTypeObject* type
        int (*describe)(PyObject* obj, dlpack_ref_producer* out) except -1
        PyObject* (*wrap)(DLPackRefTensor* taken) except NULL
        DLPackManagedTensorAllocator allocator         # NULL: dlpack_ref_exchange_allocate
        DLPackCurrentWorkStream current_work_stream   # NULL: no stream on any device
    int dlpack_ref_exchange_from_py(const dlpack_ref_exchange_spec* spec, PyObject* obj,
                                    DLManagedTensorVersioned** out) except -1
    int dlpack_ref_exchange_to_py(const dlpack_ref_exchange_spec* spec, DLManagedTensorVersioned* tensor,
                                  void** out_py_object) except -1
    int dlpack_ref_exchange_view(const dlpack_ref_exchange_spec* spec, PyObject* obj, DLTensor* out) except -1
    int dlpack_ref_exchange_allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                                     void (*SetError)(void* error_ctx, const char* kind,
                                                      const char* message) noexcept nogil) noexcept nogil
    int dlpack_ref_exchange_allocator_of(const dlpack_ref_exchange_spec* spec, DLTensor* prototype,
                                         DLManagedTensorVersioned** out, void* error_ctx,
                                         void (*SetError)(void* error_ctx, const char* kind,
                                                          const char* message) noexcept nogil) noexcept nogil
    int dlpack_ref_exchange_no_stream(DLDeviceType device_type, int32_t device_id, void** out) except -1
    int dlpack_ref_exchange_stream_of(const dlpack_ref_exchange_spec* spec, DLDeviceType device_type,
                                      int32_t device_id, void** out) except -1
    void dlpack_ref_exchange_table_init(DLPackExchangeAPI* table, DLPackManagedTensorAllocator allocator,
                                        DLPackManagedTensorFromPyObjectNoSync from_py,
                                        DLPackManagedTensorToPyObjectNoSync to_py,
                                        DLPackDLTensorFromPyObjectNoSync view,
                                        DLPackCurrentWorkStream current_work_stream)
    int dlpack_ref_publish_exchange_api(PyTypeObject* type, DLPackExchangeAPI* table) except -1

    # the consumer protocol: from_dlpack(x, device=device, copy=copy) up to
    # the taken, checked tensor; *must_copy says whether the caller copies it
    # onto *target (stream: the consumer's stream, or None)
    int dlpack_ref_consumer_take(object x, object device, object copy, object stream, DLPackRefTensor* out,
                                 DLDevice* target, int* must_copy) except -1
    # from_dlpack's arguments for METH_FASTCALL | METH_KEYWORDS (borrowed)
    int dlpack_ref_consumer_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** x,
                                 PyObject** device, PyObject** copy) except -1
    # its pieces, for a consumer with its own fast paths and stream layer:
    # the plain request (1 through the table, 0 through __dlpack__), the
    # announced device of any other, the __dlpack__ call with its retries,
    # and what copy= and the target ask of the taken tensor (1: copy it;
    # a refusal leaves the tensor to its holder)
    int dlpack_ref_consumer_plain(object x, const DLPackExchangeAPI* api, DLPackRefTensor* out) except -1
    int dlpack_ref_consumer_source(object x, DLDevice* source) except -1
    # x.__dlpack_device__(), checked
    int dlpack_ref_announced_device(object x, DLDevice* out) except -1
    # the same, with an unusable __dlpack_device__ answer replaced by the
    # plain request's tensor (through api, the type's table, looked up
    # beforehand, else __dlpack__): 1 when it was taken through __dlpack__,
    # 2 through the table (its device is the source; the caller moves or
    # copies it, and orders a table's CUDA tensor)
    int dlpack_ref_consumer_source_or_plain(object x, const DLPackExchangeAPI* api, DLDevice* source,
                                            DLPackRefTensor* out) except -1
    int dlpack_ref_consumer_call(object x, object stream, const DLDevice* target, object copy, DLDevice source,
                                 DLPackRefTensor* out, int* producer_did_it) except -1
    # the plain request for a consumer that makes copy=True's copy itself: 1
    # taken, 0 when the producer refuses to export in place (BufferError,
    # cleared: ask for its copy with dlpack_ref_consumer_call)
    int dlpack_ref_consumer_call_in_place(object x, object stream, DLDevice source, DLPackRefTensor* out) except -1
    int dlpack_ref_consumer_copy_needed(object x, DLDevice mem, uint64_t flags, DLDevice target, object copy,
                                        bint producer_did_it) except -1

    # the consumer of memory as bytes: a Py_buffer over the producer's own
    # memory (copy=False), any device, whose owner (view.obj) runs the
    # deleter once when the buffer is released; *device: the memory's device,
    # *dtype (unless NULL) its data type.
    # BufferError for what the checks refuse, non-contiguous memory and
    # READ_ONLY memory asked writable (PyBUF_WRITABLE), the deleter called once.
    bint dlpack_ref_is_contiguous(const DLTensor* t) noexcept nogil
    int dlpack_ref_tensor_to_buffer(DLPackRefTensor* t, Py_buffer* view, int flags) except -1
    int dlpack_ref_capsule_to_buffer(object capsule, Py_buffer* view, int flags, int dtypes,
                                     const DLDevice* announced, DLDevice* device, DLDataType* dtype) except -1
    # x.__dlpack_device__(), then x.__dlpack__(max_version=(1, 3), copy=False)
    # with stream passed only when the device is not the CPU (legacy call on
    # TypeError): the capsule
    object dlpack_ref_consumer_request_in_place(object x, object stream, DLDevice* announced)
    int dlpack_ref_get_buffer(object x, Py_buffer* view, int flags, int dtypes, object stream,
                              DLDevice* device, DLDataType* dtype) except -1
