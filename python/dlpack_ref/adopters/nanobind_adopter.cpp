/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal array library bound with nanobind that adopts DLPack by
 * vendoring dlpack.h, dlpack_ref.h and dlpack_ref_tables.h: the array of
 * cpu_array.hpp (shared with cpp_adopter.cpp and pybind11_adopter.cpp) as a
 * nanobind class, with that file's DLPack glue. dlpack-ref is not imported.
 * Same Python API as c_adopter.c, so adopter_hook.py serves it too. Built by
 * CMakeLists.txt beside it (nanobind's own build functions; the command:
 * docs/vendoring.md).
 *
 * __dlpack__ and from_dlpack are bound the nanobind way (`.def`, nb::kw_only):
 * nanobind's vectorcall dispatch passes the arguments as they came, and the
 * header checks them (pybind11_adopter.cpp sets the header's fastcall
 * entries instead; either way works with either library). */
#include <nanobind/nanobind.h>

#define ADOPTER "nanobind_adopter"   /* the module name, in messages */
namespace nb = nanobind;

namespace {
/* A set Python error travels as nb::python_error. */
using PythonError = nb::python_error;
}  // namespace

#include "cpu_array.hpp"

namespace {

/* --- the Python objects --------------------------------------------------- */

/* What a Tensor object holds (inside the Python object, where nanobind keeps
 * instances): an Array and a free `meta` slot. */
struct Tensor {
    Array array;
    nb::object meta = nb::none();
};

PyTypeObject* tensor_type = nullptr;

Array& array_of(PyObject* self) { return nb::inst_ptr<Tensor>(self)->array; }

PyObject* wrap(Array&& array) { return nb::cast(Tensor{std::move(array)}, nb::rv_policy::move).release().ptr(); }

/* --- the protocol, bound the nanobind way ---------------------------------- */

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None):
 * `self` typed nb::handle_t<Tensor> (nanobind checks the type and hands over
 * the handle, the capsules' owner); the header checks the rest and exports. */
nb::object tensor_dlpack(nb::handle_t<Tensor> self, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                         nb::handle copy) {
    dlpack_ref_producer p;
    checked(describe(self.ptr(), &p));
    return nb::steal(checked(dlpack_ref_producer_export(&p, stream.ptr(), max_version.ptr(), dl_device.ptr(),
                                                        copy.ptr())));
}

/* from_dlpack(x, /, *, device=None, copy=None) */
nb::object from_dlpack(nb::handle x, nb::handle device, nb::handle copy) {
    return nb::steal(wrap(Array::from_dlpack(x.ptr(), device.ptr(), copy.ptr())));
}

}  // namespace

NB_MODULE(nanobind_adopter, m) {
    /* make(code, bits, lanes, shape, data, flags=0, cls=Tensor) calls cls(...),
       so the constructor is make's body. */
    auto tensor = nb::class_<Tensor>(m, "Tensor")
        .def("__init__",
             [](Tensor* self, int code, int bits, int lanes, const nb::tuple& shape, const nb::bytes& data,
                unsigned long long flags) {
                 std::vector<int64_t> dims;
                 for (nb::handle extent : shape) dims.push_back(nb::cast<int64_t>(extent));
                 new (self) Tensor{Array::from_bytes(code, bits, lanes, std::move(dims), data.c_str(), data.size(),
                                                     flags)};
             },
             nb::arg("code"), nb::arg("bits"), nb::arg("lanes"), nb::arg("shape"), nb::arg("data"),
             nb::arg("flags") = 0)
        .def("__dlpack__", tensor_dlpack, nb::kw_only(), nb::arg("stream") = nb::none(),
             nb::arg("max_version") = nb::none(), nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none())
        .def("__dlpack_device__",
             [](const Tensor& self) { return nb::steal(checked(dlpack_ref_dlpack_device(self.array.device()))); })
        .def_prop_ro("data_ptr", [](const Tensor& self) { return reinterpret_cast<uintptr_t>(self.array.data()); })
        .def_prop_ro("readonly", [](const Tensor& self) { return self.array.read_only(); })
        .def_rw("meta", &Tensor::meta);
    tensor_type = reinterpret_cast<PyTypeObject*>(tensor.ptr());
    checked(publish_exchange_table(tensor_type));

    m.def("from_dlpack", from_dlpack, nb::arg() /* positional-only: no name */, nb::kw_only(),
          nb::arg("device") = nb::none(), nb::arg("copy") = nb::none());
    m.def(
        "make",
        [](int code, int bits, int lanes, const nb::tuple& shape, const nb::bytes& data, unsigned long long flags,
           const nb::type_object& cls) {
            if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls.ptr()), tensor_type))
                throw nb::type_error("cls must be a subclass of Tensor");
            return cls(code, bits, lanes, shape, data, flags);
        },
        nb::arg("code"), nb::arg("bits"), nb::arg("lanes"), nb::arg("shape"), nb::arg("data"), nb::arg("flags") = 0,
        nb::arg("cls") = tensor);
    m.attr("CopyForbiddenError") = nb::handle(checked(dlpack_ref_copy_forbidden_error()));
    /* the version of dlpack-ref whose files this module vendors (a real library gives its own) */
    m.attr("__version__") = DLPACK_REF_VERSION;
}
