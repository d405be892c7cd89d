/* A minimal adopter built against the limited API (abi3): it exports a
 * 1-D float64 buffer through the producer protocol and imports any DLPack
 * producer through the consumer protocol. The test defines Py_LIMITED_API
 * on the command line. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include "dlpack_ref.h"

/* export(x, /, **kwargs): __dlpack__ of the float64 memory of `x` (a
 * C-contiguous buffer), kept alive by x until the capsule's deleter runs. */
static PyObject* export_buffer(PyObject* mod, PyObject* args, PyObject* kwargs) {
    dlpack_ref_producer p;
    Py_buffer view;
    int64_t shape[1];
    PyObject *x, *capsule;
    (void)mod;
    if (PyTuple_Size(args) != 1) {
        PyErr_SetString(PyExc_TypeError, "export() takes one positional argument");
        return NULL;
    }
    x = PyTuple_GetItem(args, 0);
    if (PyObject_GetBuffer(x, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    memset(&p, 0, sizeof p);
    shape[0] = (int64_t)(view.len / 8);
    p.tensor.data = view.buf;
    p.tensor.device.device_type = kDLCPU;
    p.tensor.ndim = 1;
    p.tensor.dtype.code = kDLFloat;
    p.tensor.dtype.bits = 64;
    p.tensor.dtype.lanes = 1;
    p.tensor.shape = shape;
    p.owner = x;
    capsule = dlpack_ref_producer_dlpack(&p, NULL, kwargs);
    PyBuffer_Release(&view);
    return capsule;
}

/* take(x, /, *, device=None, copy=None): (address of the first element,
 * whether the capsule was versioned) of the tensor x gives, then released. */
static PyObject* take(PyObject* mod, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyObject *x, *device, *copy, *address;
    DLPackRefTensor taken;
    DLDevice target;
    int must_copy, versioned;
    (void)mod;
    if (dlpack_ref_consumer_args(args, nargs, kwnames, &x, &device, &copy) < 0
            || dlpack_ref_consumer_take(x, device, copy, Py_None, &taken, &target, &must_copy) < 0)
        return NULL;
    address = PyLong_FromVoidPtr((char*)taken.dl_tensor->data + taken.dl_tensor->byte_offset);
    versioned = taken.versioned;
    dlpack_ref_release(&taken);
    if (address == NULL) return NULL;
    return Py_BuildValue("(Ni)", address, versioned);
}

/* view(x): (address, length in bytes) of x's memory as a Py_buffer over
 * its tensor (dlpack_ref_get_buffer), then released. */
static PyObject* view(PyObject* mod, PyObject* x) {
    Py_buffer buffer;
    DLDevice device;
    PyObject* answer;
    (void)mod;
    if (dlpack_ref_get_buffer(x, &buffer, PyBUF_SIMPLE, DLPACK_REF_DTYPES_DLPACK, Py_None, &device, NULL) < 0)
        return NULL;
    answer = Py_BuildValue("(Nn)", PyLong_FromVoidPtr(buffer.buf), buffer.len);
    PyBuffer_Release(&buffer);
    return answer;
}

/* refcount(x): x's reference count as C sees it. PyPy has no
 * sys.getrefcount, but its C objects count references as CPython's do (from
 * a base of its own), so a difference between two calls counts the owners
 * the exports hold. */
static PyObject* refcount(PyObject* mod, PyObject* x) {
    (void)mod;
    return PyLong_FromSsize_t(Py_REFCNT(x));
}

static PyMethodDef methods[] = {
    {"refcount", refcount, METH_O, NULL},
    {"view", view, METH_O, NULL},
    {"export", (PyCFunction)(void (*)(void))export_buffer, METH_VARARGS | METH_KEYWORDS, NULL},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "limited_demo", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_limited_demo(void) { return PyModule_Create(&module); }
