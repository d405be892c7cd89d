/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal array library bound with pybind11 that adopts DLPack by
 * vendoring dlpack.h, dlpack_ref.h and dlpack_ref_tables.h: the array of
 * cpu_array.hpp (shared with cpp_adopter.cpp and nanobind_adopter.cpp) as a
 * pybind11 class, with that file's DLPack glue. dlpack-ref is not imported.
 * Same Python API as c_adopter.c, so adopter_hook.py serves it too. Built
 * with pybind11's include folders and those of `dlpack-ref-config
 * --includedir` (the command: docs/vendoring.md).
 *
 * __dlpack__ and from_dlpack are the header's METH_FASTCALL | METH_KEYWORDS
 * entries, set on the class and the module as CPython methods: pybind11's
 * own dispatch (`.def("__dlpack__", f, py::kw_only(), py::arg("stream") =
 * py::none(), ...)`) gathers keyword arguments into a dict on every call,
 * which cost 3 to 6 times NumPy's export (docs/vendoring.md, "Speed"). */
#include <pybind11/pybind11.h>

#define ADOPTER "pybind11_adopter"   /* the module name, in messages */
namespace py = pybind11;

namespace {
/* A set Python error travels as py::error_already_set. */
using PythonError = py::error_already_set;
}  // namespace

#include "cpu_array.hpp"

namespace {

/* --- the Python objects --------------------------------------------------- */

/* What a Tensor object holds: an Array and a free `meta` slot. */
struct Tensor {
    Array array;
    py::object meta = py::none();
};

PyTypeObject* tensor_type = nullptr;

Array& array_of(PyObject* self) { return py::handle(self).cast<Tensor&>().array; }

PyObject* wrap(Array&& array) { return py::cast(Tensor{std::move(array)}).release().ptr(); }

/* A CPython method definition as a method of `cls` (a descriptor, as the
 * class body's functions are). */
void set_method(py::handle cls, PyMethodDef* def) {
    py::setattr(cls, def->ml_name,
                py::reinterpret_steal<py::object>(checked(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def))));
}

}  // namespace

PYBIND11_MODULE(pybind11_adopter, m, py::mod_gil_not_used()) {
    /* make(code, bits, lanes, shape, data, flags=0, cls=Tensor) calls cls(...),
       so the constructor is make's body. */
    auto tensor = py::class_<Tensor>(m, "Tensor")
        .def(py::init([](int code, int bits, int lanes, const py::tuple& shape, const py::buffer& data,
                         unsigned long long flags) {
                 std::vector<int64_t> dims;
                 for (py::handle extent : shape) dims.push_back(extent.cast<int64_t>());
                 py::buffer_info bytes = data.request();
                 return Tensor{Array::from_bytes(code, bits, lanes, std::move(dims), bytes.ptr,
                                                 static_cast<size_t>(bytes.size * bytes.itemsize), flags)};
             }),
             py::arg("code"), py::arg("bits"), py::arg("lanes"), py::arg("shape"), py::arg("data"),
             py::arg("flags") = 0)
        .def_property_readonly("data_ptr",
                               [](const Tensor& self) { return reinterpret_cast<uintptr_t>(self.array.data()); })
        .def_property_readonly("readonly", [](const Tensor& self) { return self.array.read_only(); })
        .def_readwrite("meta", &Tensor::meta);
    tensor_type = reinterpret_cast<PyTypeObject*>(tensor.ptr());
    set_method(tensor, &dlpack_fastcall_def);
    set_method(tensor, &dlpack_device_def);
    checked(publish_exchange_table(tensor_type));

    m.add_object("from_dlpack", py::reinterpret_steal<py::object>(
                                    checked(PyCFunction_NewEx(&from_dlpack_fastcall_def, nullptr, m.attr("__name__").ptr()))));
    m.def(
        "make",
        [](int code, int bits, int lanes, const py::tuple& shape, const py::buffer& data, unsigned long long flags,
           const py::type& cls) {
            if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls.ptr()), tensor_type))
                throw py::type_error("cls must be a subclass of Tensor");
            return cls(code, bits, lanes, shape, data, flags);
        },
        py::arg("code"), py::arg("bits"), py::arg("lanes"), py::arg("shape"), py::arg("data"), py::arg("flags") = 0,
        py::arg("cls") = tensor);
    m.attr("CopyForbiddenError") = py::handle(checked(dlpack_ref_copy_forbidden_error()));
    /* the version of dlpack-ref whose files this module vendors (a real library gives its own) */
    m.attr("__version__") = DLPACK_REF_VERSION;
}
