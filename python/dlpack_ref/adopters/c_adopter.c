/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal array library in plain C that adopts DLPack by vendoring
 * dlpack.h, dlpack_ref.h and dlpack_ref_tables.h: its own memory, its own
 * type, and glue that forwards __dlpack__, __dlpack_device__ and
 * from_dlpack to the header. Built with only the headers of
 * `dlpack-ref-config --includedir` on the include path (the command:
 * docs/vendoring.md); dlpack-ref is not imported. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include "dlpack_ref.h"

#define ADOPTER "c_adopter"   /* the module name, in messages */
/* Our memory's alignment, dlpack-ref's own: JAX imports host memory
 * zero-copy only when it is 64-byte aligned, and copies it otherwise. */
#define ALIGNMENT 256

typedef struct {
    PyObject_VAR_HEAD
    DLTensor t;
    uint64_t flags;            /* READ_ONLY, IS_SUBBYTE_TYPE_PADDED */
    void* own;                 /* our memory (ALIGNMENT-aligned), or NULL */
    DLPackRefTensor imported;  /* a taken tensor held zero-copy, or empty */
    PyObject* meta;            /* anything the user attaches */
    int64_t dims[1];           /* shape then strides, 2 * ndim, allocated with the object */
} Tensor;

static PyTypeObject TensorType;

/* A new, zeroed tensor of `type` (Tensor or a subclass) with room for
 * `ndim` extents and strides (one small allocation: no fixed 64-dim arrays). */
static Tensor* tensor_new_of(PyTypeObject* type, int32_t ndim) {
    Tensor* self = (Tensor*)type->tp_alloc(type, ndim);
    if (self == NULL) return NULL;
    self->t.ndim = ndim;
    self->t.shape = self->dims;
    self->t.strides = self->dims + ndim;
    return self;
}

static void tensor_dealloc(Tensor* self) {
    dlpack_ref_release(&self->imported);
    free(self->own);
    Py_XDECREF(self->meta);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

static Tensor* tensor_new(int32_t ndim) { return tensor_new_of(&TensorType, ndim); }

static int64_t nbytes_of(const DLTensor* t, uint64_t flags) {
    return dlpack_ref_nbytes(dlpack_ref_element_count(t->shape, t->ndim), dlpack_ref_storage_bits(t->dtype, flags));
}

/* A row-major copy of `src` in new memory of ours, on the CPU, as a `type`. */
static Tensor* copy_to_host(PyTypeObject* type, const DLTensor* src, uint64_t flags) {
    int64_t bits = dlpack_ref_storage_bits(src->dtype, flags), n = nbytes_of(src, flags), i, k;
    const char* base = (const char*)src->data + src->byte_offset;
    Tensor* c;
    int d;
    if (!dlpack_ref_device_host_accessible((int32_t)src->device.device_type)) {
        PyErr_SetString(PyExc_BufferError, ADOPTER " copies host-accessible memory only");
        return NULL;
    }
    if ((c = tensor_new_of(type, src->ndim)) == NULL) return NULL;
    c->t.dtype = src->dtype;
    c->t.device.device_type = kDLCPU;
    c->flags = flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    memcpy(c->t.shape, src->shape, (size_t)src->ndim * sizeof(int64_t));
    for (d = src->ndim - 1, k = 1; d >= 0; --d) { c->t.strides[d] = k; k *= src->shape[d] > 0 ? src->shape[d] : 1; }
    if (posix_memalign(&c->own, ALIGNMENT, (size_t)(n ? n : 1)) != 0) { Py_DECREF(c); return (Tensor*)PyErr_NoMemory(); }
    c->t.data = c->own;
    if (src->strides == NULL || memcmp(src->strides, c->t.strides, (size_t)src->ndim * sizeof(int64_t)) == 0) {
        memcpy(c->own, base, (size_t)n);
        return c;
    }
    if (bits % 8) { Py_DECREF(c); PyErr_SetString(PyExc_BufferError, "strided sub-byte copy"); return NULL; }
    for (i = 0; i < dlpack_ref_element_count(src->shape, src->ndim); ++i) {   /* element by element */
        int64_t rest = i, off = 0;
        for (d = src->ndim - 1; d >= 0; --d) { off += (rest % src->shape[d]) * src->strides[d]; rest /= src->shape[d]; }
        memcpy((char*)c->own + i * (bits / 8), base + off * (bits / 8), (size_t)(bits / 8));
    }
    return c;
}

static int copy_cb(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* stream, DLTensor* out,
                   PyObject** owner) {
    Tensor* c;
    (void)stream;
    if (target.device_type != kDLCPU) {
        PyErr_Format(PyExc_BufferError, ADOPTER " cannot copy to device (%d, %d); it has CPU memory only",
                     (int)target.device_type, (int)target.device_id);
        return -1;
    }
    if ((c = copy_to_host(&TensorType, src, ((Tensor*)ctx)->flags)) == NULL) return -1;
    *out = c->t;
    *owner = (PyObject*)c;
    return 0;
}

/* The one description of a tensor: __dlpack__ and the exchange table both
 * export from it, so they cannot disagree. */
static int describe(PyObject* obj, dlpack_ref_producer* p) {
    Tensor* self = (Tensor*)obj;
    p->tensor = self->t;
    p->owner = obj;
    p->read_only = (self->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    p->flags = self->flags;
    p->ctx = self;
    p->copy = copy_cb;
    p->order = NULL;   /* CPU memory: nothing is ever pending */
    return 0;
}

static PyObject* tensor_dlpack(Tensor* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dlpack_ref_producer p;
    describe((PyObject*)self, &p);
    return dlpack_ref_producer_dlpack_fast(&p, args, nargs, kwnames);
}

static PyObject* tensor_dlpack_device(Tensor* self, PyObject* unused) {
    (void)unused;
    return dlpack_ref_dlpack_device(self->t.device);
}

static PyObject* tensor_data_ptr(Tensor* self, void* unused) {
    (void)unused;
    return PyLong_FromVoidPtr((char*)self->t.data + self->t.byte_offset);
}

static PyObject* tensor_readonly(Tensor* self, void* unused) {
    (void)unused;
    return PyBool_FromLong((self->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
}

static PyObject* tensor_get_meta(Tensor* self, void* unused) {
    (void)unused;
    return Py_NewRef(self->meta ? self->meta : Py_None);
}

static int tensor_set_meta(Tensor* self, PyObject* v, void* unused) {
    (void)unused;
    Py_XINCREF(v);
    Py_XSETREF(self->meta, v);
    return 0;
}

/* A tensor of ours holding the taken tensor `t` zero-copy; consumes `t`
 * (released on failure). from_dlpack and the exchange table both use it. */
static PyObject* wrap(DLPackRefTensor* t) {
    Tensor* r;
    const DLTensor* src = t->dl_tensor;
    if (!dlpack_ref_device_host_accessible((int32_t)src->device.device_type)) {
        dlpack_ref_release(t);
        PyErr_SetString(PyExc_BufferError, ADOPTER " holds host-accessible memory only");
        return NULL;
    }
    if ((r = tensor_new(src->ndim)) == NULL) { dlpack_ref_release(t); return NULL; }
    r->imported = *t;
    r->t.data = src->data;
    r->t.device = src->device;
    r->t.dtype = src->dtype;
    r->t.byte_offset = src->byte_offset;
    memcpy(r->t.shape, src->shape, (size_t)src->ndim * sizeof(int64_t));
    if (src->strides != NULL) {
        memcpy(r->t.strides, src->strides, (size_t)src->ndim * sizeof(int64_t));
    } else {
        int d; int64_t k = 1;
        for (d = src->ndim - 1; d >= 0; --d) { r->t.strides[d] = k; k *= r->t.shape[d] > 0 ? r->t.shape[d] : 1; }
    }
    r->flags = t->flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
    return (PyObject*)r;
}

/* __dlpack_c_exchange_api__ of Tensor, from the same describe and wrap;
 * the builder's host allocator and "no stream" (CPU memory only). */
static dlpack_ref_exchange_spec tensor_spec = {&TensorType, describe, wrap, NULL, NULL};
DLPACK_REF_EXCHANGE_TABLE(tensor_api, tensor_spec);

/* from_dlpack(x, /, *, device=None, copy=None): the header decides, we copy. */
static PyObject* from_dlpack(PyObject* mod, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyObject *x, *device, *copy;
    DLPackRefTensor t;
    DLDevice target;
    int must_copy;
    Tensor* r;
    (void)mod;
    if (dlpack_ref_consumer_args(args, nargs, kwnames, &x, &device, &copy) < 0) return NULL;
    if (dlpack_ref_consumer_take(x, device, copy, Py_None, &t, &target, &must_copy) < 0) return NULL;
    if (!must_copy) return wrap(&t);
    r = target.device_type == kDLCPU ? copy_to_host(&TensorType, t.dl_tensor, t.flags) : NULL;
    if (r == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_BufferError, ADOPTER " cannot copy to device (%d, %d)", (int)target.device_type,
                     (int)target.device_id);
    dlpack_ref_release(&t);
    return (PyObject*)r;
}

/* make(code, bits, lanes, shape, data: bytes, flags=0, cls=Tensor): a row-major tensor of ours (of
 * class `cls`, a subclass of Tensor) holding `data`; every argument may be given by keyword. */
static PyObject* make(PyObject* mod, PyObject* args, PyObject* kwargs) {
    static char* keywords[] = {"code", "bits", "lanes", "shape", "data", "flags", "cls", NULL};
    int code, bits, lanes, d;
    unsigned long long flags = 0;
    PyObject* shape;
    Py_buffer data;
    DLTensor desc;
    int64_t dims[DLPACK_REF_MAX_NDIM];
    Tensor* r;
    PyTypeObject* cls = &TensorType;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiiO!y*|KO!:make", keywords, &code, &bits, &lanes, &PyTuple_Type,
                                     &shape, &data, &flags, &PyType_Type, &cls))
        return NULL;
    if (!PyType_IsSubtype(cls, &TensorType)) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_TypeError, "cls must be a subclass of Tensor");
        return NULL;
    }
    memset(&desc, 0, sizeof desc);
    desc.ndim = (int32_t)PyTuple_GET_SIZE(shape);
    desc.dtype.code = (uint8_t)code; desc.dtype.bits = (uint8_t)bits; desc.dtype.lanes = (uint16_t)lanes;
    desc.device.device_type = kDLCPU;
    desc.shape = dims;
    desc.data = data.buf;
    for (d = 0; d < desc.ndim && d < DLPACK_REF_MAX_NDIM; ++d) dims[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
    if (PyErr_Occurred() || dlpack_check_tensor(&desc, flags, 1) < 0) { PyBuffer_Release(&data); return NULL; }
    if (nbytes_of(&desc, flags) != (int64_t)data.len) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "data has the wrong size for the shape and dtype");
        return NULL;
    }
    r = copy_to_host(cls, &desc, flags);
    PyBuffer_Release(&data);
    if (r != NULL) r->flags |= flags & DLPACK_FLAG_BITMASK_READ_ONLY;
    return (PyObject*)r;
}

static PyMethodDef tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tensor_getset[] = {
    {"data_ptr", (getter)tensor_data_ptr, NULL, NULL, NULL},
    {"readonly", (getter)tensor_readonly, NULL, NULL, NULL},
    {"meta", (getter)tensor_get_meta, (setter)tensor_set_meta, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef module_methods[] = {
    {"from_dlpack", (PyCFunction)(void (*)(void))from_dlpack, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"make", (PyCFunction)(void (*)(void))make, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, ADOPTER, NULL, -1, module_methods,
                                        NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_c_adopter(void) {
    PyObject* m;
    TensorType.tp_name = ADOPTER ".Tensor";
    TensorType.tp_basicsize = offsetof(Tensor, dims);
    TensorType.tp_itemsize = 2 * sizeof(int64_t);
    TensorType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
    TensorType.tp_dealloc = (destructor)tensor_dealloc;
    TensorType.tp_methods = tensor_methods;
    TensorType.tp_getset = tensor_getset;
    if (PyType_Ready(&TensorType) < 0 || dlpack_ref_publish_exchange_api(&TensorType, &tensor_api) < 0
            || (m = PyModule_Create(&module_def)) == NULL)
        return NULL;
#ifdef Py_GIL_DISABLED
    PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    Py_INCREF(&TensorType);
    PyModule_AddObject(m, "Tensor", (PyObject*)&TensorType);
    PyModule_AddObject(m, "CopyForbiddenError", Py_NewRef(dlpack_ref_copy_forbidden_error()));
    /* The version of dlpack-ref whose files this module vendors (a real
       library gives its own). */
    PyModule_AddStringConstant(m, "__version__", DLPACK_REF_VERSION);
    return m;
}
