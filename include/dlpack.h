/* SPDX-License-Identifier: Apache-2.0 */
/* SPDX-FileCopyrightText: dlpack-ref developers */
/*
 * dlpack.h -- the DLPack 1.3 ABI, as written for dlpack-ref.
 *
 * This header is an independent rendering of the DLPack ABI (major 1,
 * minor 3).  Every type, field, enumerator and macro below has the same
 * name, value, order and layout as the upstream dlpack.h, and the include
 * guard is the upstream one, so either header may stand in for the other
 * in a translation unit.  tests/test_abi.py checks this by compiling a
 * probe against both.  It tracks upstream's main branch, which (still at
 * minor 3) adds kDLTPU, kDLTPUHost, kDLAscend and kDLBcomplex to the 1.3
 * release: a header of that release has the same values for every name it
 * has.
 *
 * Contents:
 *   1. configuration macros (version, linkage)
 *   2. version, device and data type descriptions
 *   3. the tensor and its two owning wrappers (legacy and versioned)
 *   4. the C exchange API behind __dlpack_c_exchange_api__
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

/* ==================================================================== */
/* 1. Configuration macros                                              */
/* ==================================================================== */

/* Linkage prefix: `extern "C"` when compiled as C++, nothing in C. */
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif

/* ABI version this header describes.  The major number changes only when
 * the layout of DLManagedTensorVersioned changes; the minor number when
 * enumerators or other compatible additions appear. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

/* Symbol visibility for Windows DLLs; empty elsewhere.  Define
 * DLPACK_EXPORTS when building the DLL that exports the symbols. */
#ifdef _WIN32
#ifdef DLPACK_EXPORTS
#define DLPACK_DLL __declspec(dllexport)
#else
#define DLPACK_DLL __declspec(dllimport)
#endif
#else
#define DLPACK_DLL
#endif

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================== */
/* 2. Version, device and data type                                     */
/* ==================================================================== */

/*
 * DLPackVersion -- the ABI version a managed tensor was produced with.
 *
 * Consumer rules:
 *   - major differs from DLPACK_MAJOR_VERSION: only `deleter` may be used
 *     (it is always safe to call); every other field may have moved.
 *   - minor differs: the tensor is usable as long as the consumer
 *     understands the values it finds (minor bumps only add enumerators).
 */
typedef struct {
  uint32_t major; /* incompatible layout changes */
  uint32_t minor; /* compatible additions */
} DLPackVersion;

/*
 * DLDeviceType -- where the memory of a tensor lives.
 *
 * C++ pins the underlying type to int32_t so that sizeof(DLDeviceType)
 * is 4 regardless of compiler flags; C compilers use int for this enum.
 * Values 5 and 6 are unused.
 */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,          /* host memory */
  kDLCUDA = 2,         /* CUDA device memory */
  kDLCUDAHost = 3,     /* host memory pinned by cudaMallocHost */
  kDLOpenCL = 4,       /* OpenCL buffer */
  kDLVulkan = 7,       /* Vulkan buffer */
  kDLMetal = 8,        /* Apple Metal buffer */
  kDLVPI = 9,          /* Verilog simulator buffer */
  kDLROCM = 10,        /* ROCm (AMD GPU) device memory */
  kDLROCMHost = 11,    /* host memory pinned by hipMallocHost */
  kDLExtDev = 12,      /* reserved for experimental devices; meaning is
                          up to the implementation */
  kDLCUDAManaged = 13, /* CUDA unified memory (cudaMallocManaged) */
  kDLOneAPI = 14,      /* oneAPI unified shared memory on an unpartitioned
                          device; the oneAPI runtime tells the device kind,
                          USM kind and SYCL context */
  kDLWebGPU = 15,      /* WebGPU buffer */
  kDLHexagon = 16,     /* Qualcomm Hexagon DSP */
  kDLMAIA = 17,        /* Microsoft MAIA accelerator */
  kDLTrn = 18,         /* AWS Trainium */
  kDLTPU = 19,         /* Google TPU device memory */
  kDLTPUHost = 20,     /* host memory pinned by the TPU runtime */
  kDLAscend = 21,      /* Huawei Ascend NPU device memory */
} DLDeviceType;

/*
 * DLDevice -- a device type together with the index of one device of that
 * type.  The index is 0 for host memory, pinned host memory and managed
 * memory.
 */
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/*
 * DLDataTypeCode -- the kind of an element; stored in DLDataType.code.
 */
typedef enum {
  kDLInt = 0U,          /* two's complement signed integer */
  kDLUInt = 1U,         /* unsigned integer */
  kDLFloat = 2U,        /* IEEE 754 binary floating point */
  kDLOpaqueHandle = 3U, /* opaque handle, for testing only; both sides must
                           agree on what it means */
  kDLBfloat = 4U,       /* bfloat16 */
  kDLComplex = 5U,      /* complex: real part then imaginary part, each of
                           bits / 2 */
  kDLBool = 6U,         /* boolean */
  /* 8-bit floating point formats */
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  /* 6-bit floating point formats; bits must be 6 (a consumer rejects
     anything else) */
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  /* 4-bit floating point format; bits must be 4 (a consumer rejects
     anything else) */
  kDLFloat4_e2m1fn = 17U,
  /* complex of two bfloat16: real part then imaginary part, laid out as
     kDLComplex */
  kDLBcomplex = 18U,
} DLDataTypeCode;

/*
 * DLDataType -- element type: code, width in bits, vector lanes.
 *
 * Elements are in the native byte order; a producer must refuse to export
 * data in another byte order.  A few encodings:
 *
 *   float32              code 2 (kDLFloat),   bits 32, lanes 1
 *   float32 x 4 vector   code 2 (kDLFloat),   bits 32, lanes 4
 *   int8                 code 0 (kDLInt),     bits 8,  lanes 1
 *   complex64            code 5 (kDLComplex), bits 64, lanes 1
 *   bcomplex32           code 18 (kDLBcomplex), bits 32, lanes 1 (two
 *                                             bfloat16)
 *   bool                 code 6 (kDLBool),    bits 8,  lanes 1 (one byte
 *                                             per element)
 *   float8_e4m3          code 8,              bits 8,  lanes 1
 *   float6_e3m2fn        code 16,             bits 6,  lanes 1 (packed)
 *   float4_e2m1fn        code 17,             bits 4,  lanes 1 (packed)
 *
 * Sub-byte elements are packed by default, little bit-endian: element i
 * occupies bits [i * bits, (i + 1) * bits) of the buffer.  The flag
 * DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED says one element per byte.
 */
typedef struct {
  uint8_t code;   /* a DLDataTypeCode value, kept in one byte */
  uint8_t bits;   /* width of one lane in bits */
  uint16_t lanes; /* number of lanes; 1 for scalars */
} DLDataType;

/* ==================================================================== */
/* 3. Tensors                                                           */
/* ==================================================================== */

/*
 * DLTensor -- a strided view of memory; it owns nothing.
 *
 * The first element is at (char*)data + byte_offset.  `data` may be an
 * opaque handle on some devices (an OpenCL cl_mem, for example).  The
 * specification asks for 256-byte aligned `data`, but common producers
 * export the address of the first element with byte_offset 0, so do not
 * rely on the alignment.  An empty tensor may have a NULL `data`.
 *
 * The bytes needed for a contiguous tensor are
 *   product(shape[0..ndim)) * ((dtype.bits * dtype.lanes + 7) / 8).
 */
typedef struct {
  void* data;           /* base address (or handle) of the memory */
  DLDevice device;      /* where that memory lives */
  int32_t ndim;         /* number of dimensions, 0 for a scalar */
  DLDataType dtype;     /* element type */
  int64_t* shape;       /* ndim extents; may be NULL when ndim == 0 */
  int64_t* strides;     /* ndim strides counted in elements (not bytes).
                           Must not be NULL when ndim > 0 since DLPack 1.2;
                           older producers used NULL for row-major.  May be
                           NULL when ndim == 0. */
  uint64_t byte_offset; /* bytes from data to the first element */
} DLTensor;

/*
 * DLManagedTensor -- legacy (pre-1.0, unversioned) owning wrapper.
 *
 * Superseded by DLManagedTensorVersioned and kept for old producers and
 * consumers; it carries no version and no flags.  Whoever holds it calls
 * `deleter(self)` once when done; the deleter releases the memory behind
 * `manager_ctx` and frees `self`.
 */
typedef struct DLManagedTensor {
  DLTensor dl_tensor; /* the tensor being lent */
  void* manager_ctx;  /* producer's private state; may be NULL */
  /* Releases the tensor and `self`; may be NULL when the producer has
     nothing to release. */
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/* Bits of DLManagedTensorVersioned.flags. */

/* The consumer must not write through the tensor. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)

/* The producer made a copy for this export: the consumer is the only owner
 * of the memory until it calls the deleter. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

/* Sub-byte elements (4- and 6-bit types) are stored one per byte rather
 * than packed (packed is the default). */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/*
 * DLManagedTensorVersioned -- the owning wrapper exchanged since DLPack 1.0.
 *
 * A producer lends a tensor through it; the consumer calls `deleter(self)`
 * exactly once when it no longer needs the tensor.  The first three fields
 * (version, manager_ctx, deleter) and `flags` stay where they are in every
 * future ABI, so that a consumer facing an unknown major version can still
 * release the tensor.
 */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; /* ABI version the producer filled this in with */
  void* manager_ctx;     /* producer's private state; may be NULL */
  /* Releases the tensor and `self`; may be NULL when the producer has
     nothing to release. */
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;        /* DLPACK_FLAG_BITMASK_* bits; 0 by default */
  DLTensor dl_tensor;    /* the tensor being lent */
} DLManagedTensorVersioned;

/* ==================================================================== */
/* 4. The C exchange API (__dlpack_c_exchange_api__)                    */
/* ==================================================================== */
/*
 * A Python array type may publish, as the type attribute
 * __dlpack_c_exchange_api__, a PyCapsule named "dlpack_exchange_api" whose
 * pointer is a DLPackExchangeAPI table that lives for the whole process.
 * A consumer looks the attribute up on the type (not the instance), may
 * cache it per type, checks header.version, and then exchanges tensors by
 * calling the table's functions directly, without going through
 * __dlpack__.
 *
 * Common rules for the functions below: they return 0 on success and -1 on
 * failure; they never let a C++ exception escape; `py_object` / `out_py_object`
 * are PyObject* passed as void*; and none of them synchronizes streams --
 * the consumer asks current_work_stream for the producer's stream and
 * orders its own work on it.
 */

/*
 * Allocate a new tensor in the producer, shaped after `prototype` (only
 * its ndim, shape, dtype and device are read), and store the owning
 * pointer in *out.  On failure, call SetError(error_ctx, kind, message)
 * exactly once and return -1; SetError is not called on success.  The
 * function needs no Python API of its own; SetError may need to take the
 * GIL if it raises a Python exception.
 */
typedef int (*DLPackManagedTensorAllocator)(
    DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
    void (*SetError)(void* error_ctx, const char* kind, const char* message));

/*
 * Export `py_object` (an instance of the type the table came from) as a
 * new owning DLManagedTensorVersioned in *out.  On failure a Python
 * exception is set; BufferError when the data has no DLPack description.
 */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(
    void* py_object, DLManagedTensorVersioned** out);

/*
 * Describe `py_object` (an instance of the type the table came from) in the
 * caller-provided DLTensor *out, without allocating.  Nothing is owned by
 * the caller: the data, shape and strides stay the producer's and are
 * guaranteed valid only until control returns to Python.  On failure a
 * Python exception is set.
 */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object,
                                                DLTensor* out);

/*
 * Store in *out_current_stream the producer's current work stream for the
 * given device (what torch.cuda.current_stream() is in PyTorch).  For
 * kDLCPU the answer is NULL, and a CPU-only producer may always answer
 * NULL.  On failure a Python exception is set.
 */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type,
                                       int32_t device_id,
                                       void** out_current_stream);

/*
 * Wrap an owning tensor in a new Python object of the producer's array
 * type and store it in *out_py_object.  The callee takes over ownership
 * of `tensor` (the reference is stolen).  On failure a Python exception
 * is set.
 */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(
    DLManagedTensorVersioned* tensor, void** out_py_object);

/*
 * DLPackExchangeAPIHeader -- the part of the table that never moves.
 * A consumer checks version.major first; if it is newer than the consumer
 * understands, it may follow prev_api to an older table (NULL when the
 * producer offers no older version).
 */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader* prev_api;
} DLPackExchangeAPIHeader;

/*
 * DLPackExchangeAPI -- the function table itself, usually one static
 * instance per producer library.  Every pointer is required except
 * dltensor_from_py_object_no_sync, which may be NULL.
 */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
} /* extern "C" */
#endif
#endif /* DLPACK_DLPACK_H_ */
