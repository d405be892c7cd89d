/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal array library in idiomatic C++17 that adopts DLPack by vendoring
 * dlpack.h, dlpack_ref.h and dlpack_ref_tables.h, bound by hand on the
 * CPython API (no pybind11 or nanobind): the array of cpu_array.hpp (memory
 * of its own, or a taken tensor held by an RAII guard that runs its deleter
 * exactly once), C++ exceptions inside, turned into Python
 * errors at the one boundary, and glue that forwards __dlpack__,
 * __dlpack_device__ and from_dlpack to the header. dlpack-ref is not
 * imported. Same Python API as c_adopter.c, so adopter_hook.py serves it
 * too. Built with the headers of `dlpack-ref-config --includedir` on the
 * include path (the command: docs/vendoring.md). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define ADOPTER "cpp_adopter"   /* the module name, in messages */

namespace {
/* Thrown once a Python exception is set; the error stays set meanwhile. */
struct PythonError {
    void restore() noexcept {}
};
}  // namespace

#include "cpu_array.hpp"

namespace {

/* --- the Python boundary: RAII references ---------------------------------- */

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

/* The Python object: an Array and a free `meta` slot, constructed in place. */
struct Tensor {
    PyObject_HEAD
    Array array;
    Ref meta;
};

PyTypeObject* tensor_type = nullptr;

Tensor* as_tensor(void* self) noexcept { return static_cast<Tensor*>(self); }

Array& array_of(PyObject* self) { return as_tensor(self)->array; }

/* A new Python object of `type` (Tensor or a subclass) holding `array`. */
PyObject* wrap_as(Array&& array, PyTypeObject* type) {
    auto* self = reinterpret_cast<Tensor*>(type->tp_alloc(type, 0));
    if (self == nullptr) throw_python_error();
    new (&self->array) Array(std::move(array));
    new (&self->meta) Ref();
    return reinterpret_cast<PyObject*>(self);
}

PyObject* wrap(Array&& array) { return wrap_as(std::move(array), tensor_type); }

void tensor_dealloc(PyObject* self) {
    PyTypeObject* type = Py_TYPE(self);
    as_tensor(self)->array.~Array();
    as_tensor(self)->meta.~Ref();
    type->tp_free(self);
    Py_DECREF(type);   /* a heap type: each instance holds a reference */
}

/* make(code, bits, lanes, shape, data: bytes, flags=0, cls=Tensor): a row-major tensor of ours (of
 * class `cls`, a subclass of Tensor) holding `data`; every argument may be given by keyword. */
PyObject* make(PyObject*, PyObject* args, PyObject* kwargs) {
    static const char* keywords[] = {"code", "bits", "lanes", "shape", "data", "flags", "cls", nullptr};
    int code, bits, lanes;
    unsigned long long flags = 0;
    PyObject* shape;
    PyTypeObject* cls = tensor_type;
    Py_buffer data;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiiO!y*|KO!:make", const_cast<char**>(keywords), &code, &bits,
                                     &lanes, &PyTuple_Type, &shape, &data, &flags, &PyType_Type, &cls))
        return nullptr;
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release_data(&data, PyBuffer_Release);
    return guarded<PyObject*>(nullptr, [&] {
        if (!PyType_IsSubtype(cls, tensor_type)) raise(PyExc_TypeError, "cls must be a subclass of Tensor");
        std::vector<int64_t> dims;
        for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); ++d)
            dims.push_back(checked(PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d))));
        return wrap_as(Array::from_bytes(code, bits, lanes, std::move(dims), data.buf, static_cast<size_t>(data.len),
                                         flags),
                       cls);
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

/* --- the module ------------------------------------------------------------ */

/* The DLPack glue is cpu_array.hpp's: __dlpack__, __dlpack_device__ and
 * from_dlpack as CPython method definitions, the exchange table. */
PyMethodDef tensor_methods[] = {
    dlpack_fastcall_def,
    dlpack_device_def,
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
    from_dlpack_fastcall_def,
    {"make", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(make)), METH_VARARGS | METH_KEYWORDS, nullptr},
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
    if (tensor_type == nullptr || publish_exchange_table(tensor_type) < 0
            || PyModule_AddObjectRef(module.get(), "Tensor", reinterpret_cast<PyObject*>(tensor_type)) < 0
            || PyModule_AddObjectRef(module.get(), "CopyForbiddenError", dlpack_ref_copy_forbidden_error()) < 0
            /* the version of dlpack-ref whose files this module vendors (a real library gives its own) */
            || PyModule_AddStringConstant(module.get(), "__version__", DLPACK_REF_VERSION) < 0)
        return nullptr;
    return module.release();
}
