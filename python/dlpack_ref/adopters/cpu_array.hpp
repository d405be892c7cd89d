/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_array.hpp -- the array library of the three C++ example adopters
 * (cpp_adopter.cpp on the CPython API, pybind11_adopter.cpp,
 * nanobind_adopter.cpp) and its DLPack glue: written once, bound three
 * ways. C++17.
 *
 * What a real library would have anyway: a CPU array that owns its memory
 * (256-byte aligned) or holds a DLPack tensor it imported (an RAII guard that
 * runs the tensor's deleter exactly once), its shape and strides. What it
 * adds for DLPack is small and goes through the vendored dlpack_ref.h:
 * `Array::producer` (what __dlpack__ and the exchange table export),
 * `Array::from_dlpack` (the consumer: the header takes and checks the
 * tensor, the array holds it or copies it), and the glue below the array,
 * which any binding uses: the copy callback, `describe`, the exchange table,
 * and __dlpack__ and from_dlpack as METH_FASTCALL | METH_KEYWORDS entries.
 *
 * Include it after Python.h (or the binding library's header) with ADOPTER
 * defined as the module's name (used in messages) and, in an unnamed
 * namespace, `PythonError`: the exception a set Python error travels as
 * through the binding's C++ code (each binding library has its own). The
 * binding defines the two functions declared "defined by the binding": where
 * its Python object keeps the Array, and how it makes a new object holding
 * one. */
#ifndef CPU_ARRAY_HPP
#define CPU_ARRAY_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_ref.h"

#ifndef ADOPTER
#error "define ADOPTER (the module's name) before including cpu_array.hpp"
#endif

namespace {

/* --- errors ------------------------------------------------------------------ */

/* A set Python error travels through C++ code as the binding's own exception,
 * `PythonError` (declared by the binding before this file): constructed when
 * the error is set, restore()d into Python at the boundary. */
[[noreturn]] inline void throw_python_error() { throw PythonError(); }

/* Inside a catch block: the exception being handled as the Python error. */
inline void set_python_error() noexcept {
    try {
        throw;
    } catch (PythonError& e) {
        e.restore();
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
}

[[noreturn]] inline void raise(PyObject* type, const std::string& message) {
    PyErr_SetString(type, message.c_str());
    throw_python_error();
}

/* A C call's failure (-1 or NULL with a Python error set) as a C++ exception. */
template <class T> T checked(T result) {
    if (result == T(-1) && PyErr_Occurred()) throw_python_error();
    return result;
}
inline PyObject* checked(PyObject* result) {
    if (result == nullptr) throw_python_error();
    return result;
}

/* Run `body` for C (the header's callbacks, the exchange table): a C++
 * exception becomes the Python error and `failure` the result. */
template <class R, class F> R guarded(R failure, F&& body) noexcept {
    try {
        return body();
    } catch (...) {
        set_python_error();
    }
    return failure;
}

inline std::string device_text(DLDevice d) {
    return "(" + std::to_string(d.device_type) + ", " + std::to_string(d.device_id) + ")";
}

/* --- the array ------------------------------------------------------------- */

/* A taken DLPack tensor: its deleter runs exactly once, when the guard goes. */
class Taken {
public:
    Taken() noexcept = default;
    /* Own `*taken` from here on (the caller's holder is emptied). */
    explicit Taken(DLPackRefTensor* taken) noexcept : t_(std::exchange(*taken, DLPackRefTensor{})) {}
    Taken(Taken&& other) noexcept : t_(std::exchange(other.t_, DLPackRefTensor{})) {}
    Taken& operator=(Taken&& other) noexcept {
        dlpack_ref_release(&t_);
        t_ = std::exchange(other.t_, DLPackRefTensor{});
        return *this;
    }
    Taken(const Taken&) = delete;
    Taken& operator=(const Taken&) = delete;
    ~Taken() { dlpack_ref_release(&t_); }
    DLPackRefTensor* out() noexcept { return &t_; }
    const DLTensor& tensor() const noexcept { return *t_.dl_tensor; }
    uint64_t flags() const noexcept { return t_.flags; }
private:
    DLPackRefTensor t_{};
};

inline void row_major(int64_t* strides, const int64_t* shape, int32_t ndim) {
    int64_t k = 1;
    for (int32_t d = ndim; d-- > 0;) {
        strides[d] = k;
        k *= shape[d] > 0 ? shape[d] : 1;
    }
}

/* An array's shape and strides: inside the object for up to 8 dimensions
 * (where the exchange table's view borrows them, and small enough that a
 * Python object holding the array comes from CPython's small-object
 * allocator), on the heap beyond; owned either way, so valid while the
 * array lives. */
class Extents {
public:
    Extents(const int64_t* shape, int32_t ndim)
        : ndim_(ndim), heap_(ndim > kInline ? std::make_unique<int64_t[]>(2 * static_cast<size_t>(ndim)) : nullptr) {
        std::copy_n(shape, ndim, this->shape());
    }
    int32_t ndim() const noexcept { return ndim_; }
    int64_t* shape() noexcept { return heap_ ? heap_.get() : inline_.data(); }
    const int64_t* shape() const noexcept { return heap_ ? heap_.get() : inline_.data(); }
    int64_t* strides() noexcept { return shape() + ndim_; }
    const int64_t* strides() const noexcept { return shape() + ndim_; }
private:
    static constexpr int32_t kInline = 8;
    int32_t ndim_;
    std::array<int64_t, 2 * kInline> inline_;   /* filled up to 2 * ndim, no more */
    std::unique_ptr<int64_t[]> heap_;
};

/* A copy callback (dlpack_ref_producer.copy). */
using CopyCallback = int (*)(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* stream,
                             DLTensor* out, PyObject** owner);

/* Memory of our own: 256-byte aligned, as dlpack-ref's own allocations (JAX
 * imports host memory zero-copy only when it is 64-byte aligned, and copies
 * it otherwise), never NULL (not even for 0 bytes). */
class Memory {
public:
    static constexpr size_t kAlignment = 256;
    Memory() noexcept = default;
    explicit Memory(size_t nbytes)
        : bytes_(static_cast<std::byte*>(std::aligned_alloc(kAlignment, (nbytes / kAlignment + 1) * kAlignment))) {
        if (!bytes_) throw std::bad_alloc();
    }
    std::byte* data() const noexcept { return bytes_.get(); }
private:
    struct Free {
        void operator()(std::byte* p) const noexcept { std::free(p); }
    };
    std::unique_ptr<std::byte[], Free> bytes_;
};

/* A CPU array: row-major memory of its own, or a zero-copy view of a taken
 * tensor (host-accessible memory only). */
class Array {
public:
    /* A row-major copy of `src` in new memory of ours. */
    static Array copy_of(const DLTensor& src, uint64_t flags) {
        if (!dlpack_ref_device_host_accessible(static_cast<int32_t>(src.device.device_type)))
            raise(PyExc_BufferError, ADOPTER " copies host-accessible memory only");
        Array a(src, flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
        a.device_ = {kDLCPU, 0};
        row_major(a.extents_.strides(), a.extents_.shape(), src.ndim);
        const int64_t bits = dlpack_ref_storage_bits(src.dtype, flags);
        const int64_t count = dlpack_ref_element_count(src.shape, src.ndim);
        const auto nbytes = static_cast<size_t>(dlpack_ref_nbytes(count, bits));
        a.memory_ = Memory(nbytes);
        a.data_ = a.memory_.data();
        const auto* base = static_cast<const std::byte*>(src.data) + src.byte_offset;
        if (src.strides == nullptr || std::equal(src.strides, src.strides + src.ndim, a.extents_.strides())) {
            std::copy_n(base, nbytes, a.data_);
            return a;
        }
        if (bits % 8) raise(PyExc_BufferError, "strided sub-byte copy");
        const auto item = static_cast<size_t>(bits / 8);
        for (int64_t i = 0; i < count; ++i) {   /* element by element */
            int64_t rest = i, offset = 0;
            for (int32_t d = src.ndim - 1; d >= 0; --d) {
                offset += (rest % src.shape[d]) * src.strides[d];
                rest /= src.shape[d];
            }
            std::copy_n(base + offset * static_cast<int64_t>(item), item, a.data_ + i * static_cast<int64_t>(item));
        }
        return a;
    }

    /* The memory of `taken` itself, held until this array goes. */
    static Array view_of(Taken taken) {
        const DLTensor& t = taken.tensor();
        if (!dlpack_ref_device_host_accessible(static_cast<int32_t>(t.device.device_type)))
            raise(PyExc_BufferError, ADOPTER " holds host-accessible memory only");
        Array a(t, taken.flags() & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED));
        if (t.strides != nullptr) std::copy_n(t.strides, t.ndim, a.extents_.strides());
        else row_major(a.extents_.strides(), a.extents_.shape(), t.ndim);
        a.data_ = static_cast<std::byte*>(t.data) + t.byte_offset;
        a.device_ = t.device;   /* host-accessible memory keeps its true device */
        a.imported_ = std::move(taken);
        return a;
    }

    /* make(code, bits, lanes, shape, data, flags): a row-major array of ours
     * holding a copy of the `nbytes` bytes at `data`, checked by the header
     * as any tensor it imports. */
    static Array from_bytes(int code, int bits, int lanes, std::vector<int64_t> shape, const void* data,
                            size_t nbytes, uint64_t flags) {
        DLTensor desc{};
        desc.data = const_cast<void*>(data);
        desc.device = {kDLCPU, 0};
        desc.ndim = static_cast<int32_t>(shape.size());
        desc.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
        desc.shape = shape.data();
        checked(dlpack_check_tensor(&desc, flags, 1));
        if (dlpack_ref_nbytes(dlpack_ref_element_count(desc.shape, desc.ndim), dlpack_ref_storage_bits(desc.dtype, flags))
                != static_cast<int64_t>(nbytes))
            raise(PyExc_ValueError, "data has the wrong size for the shape and dtype");
        Array a = copy_of(desc, flags);
        a.flags_ |= flags & DLPACK_FLAG_BITMASK_READ_ONLY;
        return a;
    }

    /* from_dlpack(x, /, *, device=None, copy=None): the header negotiates,
     * takes and checks the tensor and says whether a copy is needed; the
     * array holds the tensor zero-copy or copies it. */
    static Array from_dlpack(PyObject* x, PyObject* device, PyObject* copy) {
        Taken taken;
        DLDevice target;
        int must_copy;
        checked(dlpack_ref_consumer_take(x, device, copy, Py_None, taken.out(), &target, &must_copy));
        if (!must_copy) return view_of(std::move(taken));
        if (target.device_type != kDLCPU) raise(PyExc_BufferError, ADOPTER " cannot copy to device " + device_text(target));
        return copy_of(taken.tensor(), taken.flags());
    }

    /* The one description of this array, which `owner` (the Python object
     * holding it) exports: __dlpack__ and the exchange table both export
     * from it, so they cannot disagree. The copy callback gets this array
     * as its context. */
    dlpack_ref_producer producer(PyObject* owner, CopyCallback copy) const noexcept {
        return {dltensor(), owner, read_only(), flags_, const_cast<Array*>(this), copy,
                nullptr /* CPU memory: nothing is ever pending */};
    }

    /* The copy callback's copy of `src`, an export of the array `ctx`, on
     * `target` (CPU only: BufferError otherwise). */
    static Array copy_for(void* ctx, const DLTensor& src, DLDevice target) {
        if (target.device_type != kDLCPU)
            raise(PyExc_BufferError, ADOPTER " cannot copy to device " + device_text(target) + "; it has CPU memory only");
        return copy_of(src, static_cast<const Array*>(ctx)->flags());
    }

    /* The DLPack description of this array (valid while it lives). */
    DLTensor dltensor() const noexcept {
        DLTensor t{};
        t.data = data_;
        t.device = device_;
        t.ndim = extents_.ndim();
        t.dtype = dtype_;
        t.shape = const_cast<int64_t*>(extents_.shape());
        t.strides = const_cast<int64_t*>(extents_.strides());
        return t;
    }
    void* data() const noexcept { return data_; }
    DLDevice device() const noexcept { return device_; }
    uint64_t flags() const noexcept { return flags_; }
    bool read_only() const noexcept { return (flags_ & DLPACK_FLAG_BITMASK_READ_ONLY) != 0; }

private:
    Array(const DLTensor& like, uint64_t flags) : dtype_(like.dtype), extents_(like.shape, like.ndim), flags_(flags) {}
    DLDataType dtype_;
    DLDevice device_{};
    Extents extents_;
    uint64_t flags_;
    Memory memory_;                   /* our own memory, or empty */
    Taken imported_;                  /* a taken tensor held zero-copy, or empty */
    std::byte* data_ = nullptr;
};

/* --- the Python objects: defined by the binding ------------------------------ */

/* The Array inside `self`, an object of the binding's type (or a subclass;
 * callers have checked). */
Array& array_of(PyObject* self);
/* A new object of the binding's type holding `array` (a new reference). */
PyObject* wrap(Array&& array);

/* --- the DLPack glue: the same for every binding ------------------------------ */

/* The copy callback: a new object of ours, which owns the copy's memory. */
inline int copy_cb(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream*, DLTensor* out,
                   PyObject** owner) {
    return guarded(-1, [&] {
        *owner = wrap(Array::copy_for(ctx, *src, target));
        *out = array_of(*owner).dltensor();
        return 0;
    });
}

/* What __dlpack__ and the exchange table export of `self`. */
inline int describe(PyObject* self, dlpack_ref_producer* p) {
    return guarded(-1, [&] {
        *p = array_of(self).producer(self, copy_cb);
        return 0;
    });
}

/* The exchange table's wrap: an object of ours holding *taken zero-copy;
 * consumes *taken in every case. */
inline PyObject* wrap_taken(DLPackRefTensor* taken) {
    Taken owned(taken);
    return guarded<PyObject*>(nullptr, [&] { return wrap(Array::view_of(std::move(owned))); });
}

/* __dlpack_c_exchange_api__ of the binding's type, from the same describe
 * and wrap; the builder's host allocator and "no stream" (CPU memory only). */
dlpack_ref_exchange_spec tensor_exchange = {nullptr, describe, wrap_taken, nullptr, nullptr};
DLPACK_REF_EXCHANGE_TABLE(tensor_api, tensor_exchange);

/* Publish the table on the binding's type, once, in the module's init (the
 * type's pointer is known only then). 0, or -1 with an exception set. */
inline int publish_exchange_table(PyTypeObject* type) {
    tensor_exchange.type = type;
    return dlpack_ref_publish_exchange_api(type, &tensor_api);
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) as a
 * METH_FASTCALL | METH_KEYWORDS method: the header parses the arguments where
 * they lie (no tuple, no dict), checks them and exports. */
inline PyObject* dlpack_fastcall(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dlpack_ref_producer p;
    if (describe(self, &p) < 0) return nullptr;
    return dlpack_ref_producer_dlpack_fast(&p, args, nargs, kwnames);
}

/* from_dlpack(x, /, *, device=None, copy=None) as a METH_FASTCALL |
 * METH_KEYWORDS function: the header's argument parsing, the array's import. */
inline PyObject* from_dlpack_fastcall(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyObject *x, *device, *copy;
    if (dlpack_ref_consumer_args(args, nargs, kwnames, &x, &device, &copy) < 0) return nullptr;
    return guarded<PyObject*>(nullptr, [&] { return wrap(Array::from_dlpack(x, device, copy)); });
}

/* __dlpack_device__() as a METH_NOARGS method. */
inline PyObject* dlpack_device_noargs(PyObject* self, PyObject*) {
    return dlpack_ref_dlpack_device(array_of(self).device());
}

/* The three as CPython method definitions (a binding that binds them its own
 * way, as nanobind_adopter.cpp does, uses none). */
[[maybe_unused]] PyMethodDef dlpack_fastcall_def = {
    "__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(dlpack_fastcall)),
    METH_FASTCALL | METH_KEYWORDS, nullptr};
[[maybe_unused]] PyMethodDef dlpack_device_def = {"__dlpack_device__", dlpack_device_noargs, METH_NOARGS, nullptr};
[[maybe_unused]] PyMethodDef from_dlpack_fastcall_def = {
    "from_dlpack", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(from_dlpack_fastcall)),
    METH_FASTCALL | METH_KEYWORDS, nullptr};

}  // namespace

#endif  /* CPU_ARRAY_HPP */
