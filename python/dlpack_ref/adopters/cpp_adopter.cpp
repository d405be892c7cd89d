/* A minimal array library in idiomatic C++17 that adopts DLPack by vendoring
 * dlpack.h, dlpack_ref.h and dlpack_ref_tables.h: a value type that owns its
 * memory (std::vector) or holds a taken tensor (an RAII guard that runs its
 * deleter exactly once), C++ exceptions inside, turned into Python errors at
 * the one boundary, and glue that forwards __dlpack__, __dlpack_device__ and
 * from_dlpack to the header. A plain CPython extension (no pybind11 or
 * nanobind), built by tests/test_adopters.py with g++ -std=c++17 -Werror and
 * only the vendored files on the include path; dlpack-ref is not imported.
 * Same Python API as c_adopter.c, so adopter_hook.py serves it too. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_ref.h"

namespace {

/* --- the Python boundary: RAII references and one error translation ------- */

/* Thrown once a Python exception is set; caught at the boundary. */
struct PyErrorSet {};

[[noreturn]] void raise(PyObject* type, const std::string& message) {
    PyErr_SetString(type, message.c_str());
    throw PyErrorSet{};
}

/* A C call's failure (-1 with a Python error set) as a C++ exception. */
template <class T> T checked(T result) {
    if (result == T(-1) && PyErr_Occurred()) throw PyErrorSet{};
    return result;
}

/* An owned reference, released when it goes out of scope. */
class Ref {
public:
    explicit Ref(PyObject* p = nullptr) noexcept : p_(p) {}
    Ref(Ref&& other) noexcept : p_(other.release()) {}
    Ref& operator=(Ref&& other) noexcept {
        PyObject* old = std::exchange(p_, other.release());
        Py_XDECREF(old);   /* last: it may run code that reads this Ref */
        return *this;
    }
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    ~Ref() { Py_XDECREF(p_); }
    PyObject* get() const noexcept { return p_; }
    PyObject* release() noexcept { return std::exchange(p_, nullptr); }
private:
    PyObject* p_;
};

/* Run `body`; a C++ exception becomes a Python one and `failure` the result,
 * so nothing throws into CPython or into the header's C. */
template <class R, class F> R guarded(R failure, F&& body) noexcept {
    try {
        return body();
    } catch (const PyErrorSet&) {
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return failure;
}

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

/* --- the array type ------------------------------------------------------ */

void row_major(int64_t* strides, const int64_t* shape, int32_t ndim) {
    int64_t k = 1;
    for (int32_t d = ndim; d-- > 0;) {
        strides[d] = k;
        k *= shape[d] > 0 ? shape[d] : 1;
    }
}

/* An array's shape and strides: inside the object for up to 8 dimensions
 * (where the exchange table's view borrows them, and small enough that the
 * Python object comes from CPython's small-object allocator), on the heap
 * beyond; owned either way, so valid while the array lives. */
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

/* A CPU array: row-major memory of its own, or a zero-copy view of a taken
 * tensor (host-accessible memory only). */
class Array {
public:
    /* A row-major copy of `src` in new memory of ours. */
    static Array copy_of(const DLTensor& src, uint64_t flags) {
        if (!dlpack_ref_device_host_accessible(static_cast<int32_t>(src.device.device_type)))
            raise(PyExc_BufferError, "cpp_adopter copies host-accessible memory only");
        Array a(src, flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
        a.device_ = {kDLCPU, 0};
        row_major(a.extents_.strides(), a.extents_.shape(), src.ndim);
        const int64_t bits = dlpack_ref_storage_bits(src.dtype, flags);
        const int64_t count = dlpack_ref_element_count(src.shape, src.ndim);
        const auto nbytes = static_cast<size_t>(dlpack_ref_nbytes(count, bits));
        a.memory_.resize(std::max<size_t>(nbytes, 1));   /* never a NULL data pointer */
        a.data_ = a.memory_.data();
        const auto* base = static_cast<const std::byte*>(src.data) + src.byte_offset;
        if (src.strides == nullptr || std::equal(src.strides, src.strides + src.ndim, a.extents_.strides())) {
            std::copy_n(base, nbytes, a.memory_.begin());
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
            std::copy_n(base + offset * static_cast<int64_t>(item), item, a.memory_.begin() + i * static_cast<int64_t>(item));
        }
        return a;
    }

    /* The memory of `taken` itself, held until this array goes. */
    static Array view_of(Taken taken) {
        const DLTensor& t = taken.tensor();
        Array a(t, taken.flags() & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED));
        if (t.strides != nullptr) std::copy_n(t.strides, t.ndim, a.extents_.strides());
        else row_major(a.extents_.strides(), a.extents_.shape(), t.ndim);
        a.data_ = static_cast<std::byte*>(t.data) + t.byte_offset;
        a.device_ = t.device;   /* host-accessible memory keeps its true device */
        a.imported_ = std::move(taken);
        return a;
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
    uint64_t flags() const noexcept { return flags_; }
    bool read_only() const noexcept { return (flags_ & DLPACK_FLAG_BITMASK_READ_ONLY) != 0; }
    void set_read_only() noexcept { flags_ |= DLPACK_FLAG_BITMASK_READ_ONLY; }

private:
    Array(const DLTensor& like, uint64_t flags) : dtype_(like.dtype), extents_(like.shape, like.ndim), flags_(flags) {}
    DLDataType dtype_;
    DLDevice device_{};
    Extents extents_;
    uint64_t flags_;
    std::vector<std::byte> memory_;   /* our own memory, or empty */
    Taken imported_;                  /* a taken tensor held zero-copy, or empty */
    std::byte* data_ = nullptr;
};

/* The Python object: an Array and a free `meta` slot, constructed in place. */
struct Tensor {
    PyObject_HEAD
    Array array;
    Ref meta;
};

PyTypeObject* tensor_type = nullptr;

Tensor* as_tensor(void* self) noexcept { return static_cast<Tensor*>(self); }

/* A new Python object of `type` (Tensor or a subclass) holding `array`. */
PyObject* wrap(Array&& array, PyTypeObject* type = tensor_type) {
    auto* self = reinterpret_cast<Tensor*>(type->tp_alloc(type, 0));
    if (self == nullptr) throw PyErrorSet{};
    new (&self->array) Array(std::move(array));
    new (&self->meta) Ref();
    return reinterpret_cast<PyObject*>(self);
}

void tensor_dealloc(PyObject* self) {
    PyTypeObject* type = Py_TYPE(self);
    as_tensor(self)->array.~Array();
    as_tensor(self)->meta.~Ref();
    type->tp_free(self);
    Py_DECREF(type);   /* a heap type: each instance holds a reference */
}

/* make(code, bits, lanes, shape, data: bytes, flags=0, cls=Tensor): a row-major tensor of ours (of
 * class `cls`, a subclass of Tensor) holding `data`. */
PyObject* make(PyObject*, PyObject* args) {
    int code, bits, lanes;
    unsigned long long flags = 0;
    PyObject* shape;
    PyTypeObject* cls = tensor_type;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iiiO!y*|KO!", &code, &bits, &lanes, &PyTuple_Type, &shape, &data, &flags,
                          &PyType_Type, &cls))
        return nullptr;
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release_data(&data, PyBuffer_Release);
    return guarded<PyObject*>(nullptr, [&] {
        if (!PyType_IsSubtype(cls, tensor_type)) raise(PyExc_TypeError, "cls must be a subclass of Tensor");
        std::vector<int64_t> dims;
        for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); ++d)
            dims.push_back(checked(PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d))));
        DLTensor desc{};
        desc.data = data.buf;
        desc.device = {kDLCPU, 0};
        desc.ndim = static_cast<int32_t>(dims.size());
        desc.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
        desc.shape = dims.data();
        checked(dlpack_check_tensor(&desc, flags, 1));
        if (dlpack_ref_nbytes(dlpack_ref_element_count(desc.shape, desc.ndim), dlpack_ref_storage_bits(desc.dtype, flags))
                != static_cast<int64_t>(data.len))
            raise(PyExc_ValueError, "data has the wrong size for the shape and dtype");
        Array a = Array::copy_of(desc, flags);
        if (flags & DLPACK_FLAG_BITMASK_READ_ONLY) a.set_read_only();
        return wrap(std::move(a), cls);
    });
}

PyObject* tensor_data_ptr(PyObject* self, void*) { return PyLong_FromVoidPtr(as_tensor(self)->array.data()); }
PyObject* tensor_readonly(PyObject* self, void*) { return PyBool_FromLong(as_tensor(self)->array.read_only()); }
PyObject* tensor_get_meta(PyObject* self, void*) {
    PyObject* meta = as_tensor(self)->meta.get();
    return Py_NewRef(meta ? meta : Py_None);
}
int tensor_set_meta(PyObject* self, PyObject* value, void*) {
    as_tensor(self)->meta = Ref(Py_XNewRef(value));
    return 0;
}

/* --- glue: the producer protocol ------------------------------------------ */

std::string device_text(DLDevice d) {
    return "(" + std::to_string(d.device_type) + ", " + std::to_string(d.device_id) + ")";
}

/* The copy callback: a new array of ours, which owns the copy's memory. */
int copy_cb(void* ctx, const DLTensor* src, DLDevice target, PyObject*, int64_t, DLTensor* out, PyObject** owner) {
    return guarded(-1, [&] {
        if (target.device_type != kDLCPU)
            raise(PyExc_BufferError, "cpp_adopter cannot copy to device " + device_text(target) + "; it has CPU memory only");
        Ref copy(wrap(Array::copy_of(*src, as_tensor(ctx)->array.flags())));
        *out = as_tensor(copy.get())->array.dltensor();
        *owner = copy.release();
        return 0;
    });
}

/* The one description of a tensor: __dlpack__ and the exchange table both
 * export from it, so they cannot disagree. */
int describe(PyObject* self, dlpack_ref_producer* p) {
    const Array& a = as_tensor(self)->array;
    *p = {a.dltensor(), self, a.read_only(), a.flags(), self, copy_cb, nullptr /* CPU memory: nothing pending */};
    return 0;
}

PyObject* tensor_dlpack(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dlpack_ref_producer p;
    describe(self, &p);
    return dlpack_ref_producer_dlpack_fast(&p, args, nargs, kwnames);
}

PyObject* tensor_dlpack_device(PyObject* self, PyObject*) {
    return dlpack_ref_dlpack_device(as_tensor(self)->array.dltensor().device);
}

/* --- glue: the consumer protocol ------------------------------------------ */

/* A tensor of ours holding `taken` zero-copy (host-accessible memory only). */
PyObject* hold(Taken taken) {
    if (!dlpack_ref_device_host_accessible(static_cast<int32_t>(taken.tensor().device.device_type)))
        raise(PyExc_BufferError, "cpp_adopter holds host-accessible memory only");
    return wrap(Array::view_of(std::move(taken)));
}

/* The exchange table's wrap: consumes *taken in every case. */
PyObject* wrap_taken(DLPackRefTensor* taken) {
    Taken owned(taken);
    return guarded<PyObject*>(nullptr, [&] { return hold(std::move(owned)); });
}

/* __dlpack_c_exchange_api__ of Tensor, from the same describe and wrap; the
 * builder's host allocator and "no stream" (CPU memory only). The type's
 * pointer is stored in the module's init, before publishing. */
dlpack_ref_exchange_spec tensor_exchange = {nullptr, describe, wrap_taken, nullptr, nullptr};
DLPACK_REF_EXCHANGE_TABLE(tensor_api, tensor_exchange);

/* from_dlpack(x, /, *, device=None, copy=None): the header decides, we copy. */
PyObject* from_dlpack(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyObject *x, *device, *copy;
    if (dlpack_ref_consumer_args(args, nargs, kwnames, &x, &device, &copy) < 0) return nullptr;
    return guarded<PyObject*>(nullptr, [&] {
        Taken taken;
        DLDevice target;
        int must_copy;
        checked(dlpack_ref_consumer_take(x, device, copy, Py_None, taken.out(), &target, &must_copy));
        if (!must_copy) return hold(std::move(taken));
        if (target.device_type != kDLCPU) raise(PyExc_BufferError, "cpp_adopter cannot copy to device " + device_text(target));
        return wrap(Array::copy_of(taken.tensor(), taken.flags()));
    });
}

/* --- the module ------------------------------------------------------------ */

PyMethodDef tensor_methods[] = {
    {"__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tensor_dlpack)),
     METH_FASTCALL | METH_KEYWORDS, nullptr},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef tensor_getset[] = {
    {"data_ptr", tensor_data_ptr, nullptr, nullptr, nullptr},
    {"readonly", tensor_readonly, nullptr, nullptr, nullptr},
    {"meta", tensor_get_meta, tensor_set_meta, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(tensor_dealloc)},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {0, nullptr}};

PyType_Spec tensor_spec = {"cpp_adopter.Tensor", sizeof(Tensor), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION, tensor_slots};

PyMethodDef module_methods[] = {
    {"from_dlpack", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(from_dlpack)),
     METH_FASTCALL | METH_KEYWORDS, nullptr},
    {"make", make, METH_VARARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "cpp_adopter", nullptr, -1, module_methods,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_cpp_adopter() {
    Ref module(PyModule_Create(&module_def));
    if (!module.get()) return nullptr;
#ifdef Py_GIL_DISABLED
    PyUnstable_Module_SetGIL(module.get(), Py_MOD_GIL_NOT_USED);
#endif
    tensor_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&tensor_spec));
    tensor_exchange.type = tensor_type;
    if (tensor_type == nullptr || dlpack_ref_publish_exchange_api(tensor_type, &tensor_api) < 0
            || PyModule_AddObjectRef(module.get(), "Tensor", reinterpret_cast<PyObject*>(tensor_type)) < 0
            || PyModule_AddObjectRef(module.get(), "CopyForbiddenError", dlpack_ref_copy_forbidden_error()) < 0)
        return nullptr;
    return module.release();
}
