/* dlpack-ref kernels: Python values in and out. The shape and widest kind
   of a nested list or tuple, its leaves written into an Array's memory in
   blocks (through the conversion kernels' store), and an Array's elements
   as Python scalars and nested lists (tolist). Compiled only where Python.h
   is included first.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_VALUES_H
#define DLREF_VALUES_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include "dlref_coalesce.h"
#include "dlref_types.h"
#include "dlref_float_bits.h"
#include "dlref_convert.h"

#ifdef Py_PYTHON_H
/* DLREF_KIND_OTHER: some leaf is not a Python scalar (a NumPy scalar, a 0-d
   array, an object with __index__ or __float__); the caller reads the
   leaves again one by one (_values.pxi, _other_leaves). */
enum { DLREF_KIND_NONE, DLREF_KIND_OF_BOOL, DLREF_KIND_OF_INT, DLREF_KIND_OF_FLOAT, DLREF_KIND_OF_COMPLEX,
       DLREF_KIND_OTHER };

/* Subclasses of int, float and complex count as those: the ones that carry
   a dtype (np.float64, np.complex128) have exactly the default one. */
static int dlref_leaf_kind(PyObject* o) {
    if (PyBool_Check(o)) return DLREF_KIND_OF_BOOL;
    if (PyLong_Check(o)) return DLREF_KIND_OF_INT;
    if (PyFloat_Check(o)) return DLREF_KIND_OF_FLOAT;
    if (PyComplex_Check(o)) return DLREF_KIND_OF_COMPLEX;
    return DLREF_KIND_OTHER;
}

/* The kind of a leaf that is no Python scalar and carries no dtype: an
   integer (__index__), a real (__float__) or a complex (__complex__) of
   another library; -1 with TypeError for anything else. */
static int dlref_other_leaf_kind(PyObject* o) {
    if (!PyUnicode_Check(o) && !PyBytes_Check(o) && !PyObject_HasAttrString(o, "__len__")) {
        if (PyIndex_Check(o)) return DLREF_KIND_OF_INT;
        if (Py_TYPE(o)->tp_as_number && Py_TYPE(o)->tp_as_number->nb_float) return DLREF_KIND_OF_FLOAT;
        if (PyObject_HasAttrString(o, "__complex__")) return DLREF_KIND_OF_COMPLEX;
    }
    PyErr_Format(PyExc_TypeError,
                 "asarray cannot read an object of type %.100s: expected a DLPack object, a buffer, a Python scalar "
                 "or a nested sequence", Py_TYPE(o)->tp_name);
    return -1;
}

/* Shape of a nested list/tuple, read along first elements. -1 with
   ValueError when deeper than DLREF_MAX_NDIM (which a sequence containing
   itself always is). */
static int dlref_seq_shape(PyObject* obj, int64_t* shape) {
    int nd = 0;
    PyObject* o = obj;
    while (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (nd == DLREF_MAX_NDIM) {
            PyErr_Format(PyExc_ValueError,
                         "nested sequence is more than %d levels deep (the most dimensions an Array "
                         "has); does a list contain itself?", DLREF_MAX_NDIM);
            return -1;
        }
        shape[nd++] = n;
        if (n == 0) break;
        o = PySequence_Fast_GET_ITEM(o, 0);
    }
    return nd;
}

/* Check that every sub-sequence has the shape found, and the widest kind of
   the leaves (bool < int < float < complex). */
static int dlref_seq_check(PyObject* o, int depth, int ndim, const int64_t* shape, int* kind) {
    Py_ssize_t i, n;
    if (depth == ndim) {
        int k;
        if (PyList_Check(o) || PyTuple_Check(o)) {
            PyErr_Format(PyExc_ValueError,
                         "ragged nested sequence: a sequence at depth %d, where the first elements "
                         "have a scalar", depth);
            return -1;
        }
        k = dlref_leaf_kind(o);
        if (k < 0) return -1;
        if (k > *kind) *kind = k;
        return 0;
    }
    if (!(PyList_Check(o) || PyTuple_Check(o))) {
        PyErr_Format(PyExc_ValueError,
                     "ragged nested sequence: an object of type %.100s at depth %d, where the first elements have a "
                     "sequence of length %lld", Py_TYPE(o)->tp_name, depth, (long long)shape[depth]);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(o);
    if (n != shape[depth]) {
        /* The sub-shapes as the first elements give them, and with this length. */
        PyObject* expected = PyTuple_New(ndim - depth);
        PyObject* found = PyTuple_New(ndim - depth);
        int d;
        if (expected && found) {
            for (d = depth; d < ndim; ++d) {
                PyTuple_SET_ITEM(expected, d - depth, PyLong_FromLongLong(shape[d]));
                PyTuple_SET_ITEM(found, d - depth, PyLong_FromLongLong(d == depth ? (int64_t)n : shape[d]));
            }
            PyErr_Format(PyExc_ValueError, "ragged nested sequence: sub-shapes %R and %R differ (at depth %d)",
                         expected, found, depth);
        }
        Py_XDECREF(expected);
        Py_XDECREF(found);
        return -1;
    }
    for (i = 0; i < n; ++i)
        if (dlref_seq_check(PySequence_Fast_GET_ITEM(o, i), depth + 1, ndim, shape, kind) < 0) return -1;
    return 0;
}

typedef struct {
    char* data;          /* destination, C-contiguous */
    int tid;
    const char* name;    /* dtype name for messages */
    int64_t count;       /* leaves written */
    int64_t flushed;     /* leaves already stored from the buffer */
    int nbuf;
    double re[DLREF_BLOCK], im[DLREF_BLOCK];
} dlref_filler;

static int64_t dlref_leaf_offset(const dlref_filler* f, int64_t leaf) {
    if (f->tid < DLREF_N_NATIVE) return leaf * dlref_type_bytes[f->tid];
    if (f->tid == DLREF_T_F16 || f->tid == DLREF_T_BF16) return leaf * 2;
    if (f->tid == DLREF_T_C64) return leaf * 8;
    if (f->tid == DLREF_T_C128) return leaf * 16;
    if (f->tid == DLREF_T_BC32) return leaf * 4;
    if (f->tid == DLREF_T_F4X2) return leaf / 2;
    return leaf;
}

static int dlref_filler_flush(dlref_filler* f) {
    int64_t refused;
    if (!f->nbuf) return 0;
    refused = dlref_store(f->tid, f->data + dlref_leaf_offset(f, f->flushed),
                          f->tid == DLREF_T_C64 ? 8 : f->tid == DLREF_T_C128 ? 16 : f->tid == DLREF_T_BC32 ? 4 :
                          (f->tid == DLREF_T_F16 || f->tid == DLREF_T_BF16) ? 2 :
                          f->tid == DLREF_T_F32 ? 4 : f->tid == DLREF_T_F64 ? 8 : 1,
                          f->nbuf, f->re, dlref_is_complex_tid(f->tid) ? f->im : NULL);
    f->flushed += f->nbuf;
    f->nbuf = 0;
    if (refused) { PyErr_Format(PyExc_ValueError, "%s has no NaN", f->name); return -1; }
    return 0;
}

static int dlref_fill_int(dlref_filler* f, PyObject* o) {
    int overflow = 0;
    long long v = 0;
    unsigned long long u = 0;
    int t = f->tid, is_unsigned = t >= DLREF_T_U8 && t <= DLREF_T_U64;
    static const int bits[DLREF_N_NATIVE] = {8, 8, 16, 32, 64, 8, 16, 32, 64, 0, 0};
    char* d = f->data + dlref_leaf_offset(f, f->count);
    if (PyFloat_Check(o) || PyComplex_Check(o) || (!PyLong_Check(o) && !PyIndex_Check(o))) {
        PyErr_Format(PyExc_TypeError, "cannot store %R in an integer Array (%s) without losing it", o, f->name);
        return -1;
    }
    if (PyLong_Check(o)) { Py_INCREF(o); } else { o = PyNumber_Index(o); if (!o) return -1; }
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) { Py_DECREF(o); return -1; }
    if (overflow > 0 && t == DLREF_T_U64) {
        u = PyLong_AsUnsignedLongLong(o);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); }
        else { overflow = 0; v = 0; }
    } else {
        u = (unsigned long long)v;
    }
    {
        int b = bits[t];
        long long lo = is_unsigned ? 0 : (b == 64 ? INT64_MIN : -(1LL << (b - 1)));
        unsigned long long hi = is_unsigned ? (b == 64 ? UINT64_MAX : (1ULL << b) - 1) : (1ULL << (b - 1)) - 1;
        int bad = overflow != 0 || (is_unsigned ? (v < 0 || u > hi) : (v < lo || v > (long long)hi));
        if (bad) {
            if (is_unsigned)
                PyErr_Format(PyExc_OverflowError, "%S is out of range for %s [0, %llu]", o, f->name, hi);
            else
                PyErr_Format(PyExc_OverflowError, "%S is out of range for %s [%lld, %lld]", o, f->name, lo, (long long)hi);
            Py_DECREF(o);
            return -1;
        }
    }
    Py_DECREF(o);
    switch (t) {
    case DLREF_T_I8: case DLREF_T_U8: *(uint8_t*)d = (uint8_t)u; break;
    case DLREF_T_I16: case DLREF_T_U16: { uint16_t w = (uint16_t)u; memcpy(d, &w, 2); break; }
    case DLREF_T_I32: case DLREF_T_U32: { uint32_t w = (uint32_t)u; memcpy(d, &w, 4); break; }
    default: { uint64_t w = (uint64_t)u; memcpy(d, &w, 8); break; }
    }
    return 0;
}

/* A Python int as a double for a destination narrower than float64: rounded
   to odd (dlref_f32_odd_from_f64), so that the store's rounding is the only
   one. PyLong_AsDouble, to nearest, would be a first rounding of an int
   beyond 2**53 (NumPy's list intake rounds twice there; its int64 array
   casts do not). An int beyond the double range is OverflowError, as for
   float64. */
static int dlref_long_as_odd_double(PyObject* o, double* out) {
    int overflow = 0, above, below;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    double d;
    PyObject* back;
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) { *out = dlref_f64_odd_from_i64(v); return 0; }
    d = PyLong_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    *out = d;
    /* Nearest with an odd last bit is already the odd neighbour (exact or not). */
    if (dlref_f64_bits(d) & 1) return 0;
    back = PyLong_FromDouble(d);
    if (!back) return -1;
    above = PyObject_RichCompareBool(o, back, Py_GT);
    below = above ? 0 : PyObject_RichCompareBool(o, back, Py_LT);
    Py_DECREF(back);
    if (above < 0 || below < 0) return -1;
    if (above) *out = nextafter(d, INFINITY);
    else if (below) *out = nextafter(d, -INFINITY);
    return 0;
}

static int dlref_fill_leaf(dlref_filler* f, PyObject* o) {
    int t = f->tid;
    if (t == DLREF_T_BOOL) {
        int b = PyObject_IsTrue(o);
        if (b < 0) return -1;
        f->data[f->count++] = (char)b;
        return 0;
    }
    if (t <= DLREF_T_U64) {
        if (PyBool_Check(o)) { PyObject* as_int = PyLong_FromLong(o == Py_True); int r = dlref_fill_int(f, as_int); Py_DECREF(as_int); if (r < 0) return r; }
        else if (dlref_fill_int(f, o) < 0) return -1;
        f->count++;
        return 0;
    }
    {
        double re, im = 0.0;
        if (PyFloat_CheckExact(o)) re = PyFloat_AS_DOUBLE(o);
        else if (PyLong_Check(o) && (t == DLREF_T_F64 || t == DLREF_T_C128)) {
            re = PyLong_AsDouble(o); if (re == -1.0 && PyErr_Occurred()) return -1;
        }
        else if (PyLong_Check(o)) { if (dlref_long_as_odd_double(o, &re) < 0) return -1; }
        else if (PyComplex_Check(o)) {
            if (!dlref_is_complex_tid(t)) {
                PyErr_Format(PyExc_TypeError, "cannot store complex %R in a real Array (%s)", o, f->name);
                return -1;
            }
            re = PyComplex_RealAsDouble(o); im = PyComplex_ImagAsDouble(o);
        } else if (dlref_is_complex_tid(t) && !PyFloat_Check(o) && !PyIndex_Check(o)) {
            Py_complex c = PyComplex_AsCComplex(o);
            if (c.real == -1.0 && PyErr_Occurred()) return -1;
            re = c.real; im = c.imag;
        } else {
            re = PyFloat_AsDouble(o);
            if (re == -1.0 && PyErr_Occurred()) return -1;
        }
        f->re[f->nbuf] = re; f->im[f->nbuf] = im;
        f->nbuf++; f->count++;
        if (f->nbuf == DLREF_BLOCK) return dlref_filler_flush(f);
        return 0;
    }
}

static int dlref_seq_fill_rec(dlref_filler* f, PyObject* o, int depth, int ndim) {
    Py_ssize_t i, n;
    if (depth == ndim) return dlref_fill_leaf(f, o);
    n = PySequence_Fast_GET_SIZE(o);
    for (i = 0; i < n; ++i)
        if (dlref_seq_fill_rec(f, PySequence_Fast_GET_ITEM(o, i), depth + 1, ndim) < 0) return -1;
    return 0;
}

/* Write the leaves of a checked nested sequence (or a scalar, ndim 0) into
   `data` (C order, sub-byte types one code per byte, float4_e2m1fn_x2 two
   leaves per byte) as type `tid`. */
static int dlref_seq_fill(PyObject* obj, int ndim, char* data, int tid, const char* name) {
    dlref_filler f;
    dlref_mini_table_init();
    f.data = data; f.tid = tid; f.name = name; f.count = 0; f.flushed = 0; f.nbuf = 0;
    if (dlref_seq_fill_rec(&f, obj, 0, ndim) < 0) return -1;
    return dlref_filler_flush(&f);
}

/* One element as a Python scalar (a (low, high) tuple for float4_e2m1fn_x2). */
static PyObject* dlref_element_object(int t, const char* p) {
    double re, im = 0.0;
    switch (t) {
    case DLREF_T_BOOL: return PyBool_FromLong(*p != 0);
    case DLREF_T_I8: return PyLong_FromLong(*(const int8_t*)p);
    case DLREF_T_U8: return PyLong_FromLong(*(const uint8_t*)p);
    case DLREF_T_I16: { int16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
    case DLREF_T_U16: { uint16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
    case DLREF_T_I32: { int32_t v; memcpy(&v, p, 4); return PyLong_FromLong(v); }
    case DLREF_T_U32: { uint32_t v; memcpy(&v, p, 4); return PyLong_FromUnsignedLong(v); }
    case DLREF_T_I64: { int64_t v; memcpy(&v, p, 8); return PyLong_FromLongLong(v); }
    case DLREF_T_U64: { uint64_t v; memcpy(&v, p, 8); return PyLong_FromUnsignedLongLong(v); }
    case DLREF_T_F4X2: {
        const uint32_t* table = dlref_mini_table[DLREF_T_F4X2 - 1 - DLREF_T_MINI];
        uint8_t b = (uint8_t)*p;
        return Py_BuildValue("(dd)", (double)dlref_bits_f32(table[b & 0xF]), (double)dlref_bits_f32(table[b >> 4]));
    }
    default:
        dlref_load(t, p, 0, 1, &re, &im, 0);
        if (dlref_is_complex_tid(t)) return PyComplex_FromDoubles(re, im);
        return PyFloat_FromDouble(re);
    }
}

static PyObject* dlref_tolist_rec(const char* p, const int64_t* strides, const int64_t* shape,
                                  int depth, int ndim, int t) {
    Py_ssize_t i, n;
    PyObject* list;
    if (depth == ndim) return dlref_element_object(t, p);
    n = (Py_ssize_t)shape[depth];
    list = PyList_New(n);
    if (!list) return NULL;
    for (i = 0; i < n; ++i) {
        PyObject* item = dlref_tolist_rec(p + i * strides[depth], strides, shape, depth + 1, ndim, t);
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* Nested lists of Python scalars of a host array (byte strides); a scalar
   for ndim 0. Packed sub-byte data (bits < 8) is C-contiguous and unpacked
   first into `scratch` (one byte per element). */
static PyObject* dlref_tolist(const char* data, const int64_t* strides, const int64_t* shape, int ndim, int t) {
    dlref_mini_table_init();
    return dlref_tolist_rec(data, strides, shape, 0, ndim, t);
}

#endif /* Py_PYTHON_H */

#endif /* DLREF_VALUES_H */
