# Python values in: a scalar or a nested list/tuple read by the C kernels
# (src/dlref_values.h) into a new host Array, leaves of other libraries read
# one by one, and the helpers of dlpack_ref._format (bytes as an Array, the
# minifloat table).


cdef Array _from_python(object obj, DLDataType dt, bint infer=False):
    """A new host Array of a Python scalar or nested list/tuple, written in C
    (dtype inferred when infer: bool, int64, float64 or complex128)."""
    cdef int64_t shape[DLPACK_REF_MAX_NDIM]
    cdef int kind = DLREF_KIND_NONE
    cdef int nd = dlref_seq_shape(obj, shape)
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    dlref_seq_check(obj, 0, nd, shape, &kind)
    cdef list found
    if kind == DLREF_KIND_OTHER:
        # Leaves of other libraries: read one by one (the rare path).
        found = []
        obj = _other_leaves(obj, nd, found)
        if infer:
            dt = _dldtype(_result_type(found))
            infer = False
    if infer:
        dt.lanes = 1
        if kind == DLREF_KIND_OF_BOOL:
            dt.code = kDLBool; dt.bits = 8
        elif kind == DLREF_KIND_OF_INT:
            dt.code = kDLInt; dt.bits = 64
        elif kind == DLREF_KIND_OF_COMPLEX:
            dt.code = kDLComplex; dt.bits = 128
        else:
            dt.code = kDLFloat; dt.bits = 64
    cdef int out_nd = nd
    if dt.lanes > 1:
        if nd == 0 or shape[nd - 1] != dt.lanes:
            raise ValueError(
                f"a {_dtype_from_triple(dt.code, dt.bits, dt.lanes)} element is a sequence of {dt.lanes} "
                f"values (one per lane); got a sequence of shape {tuple([shape[i] for i in range(nd)])}")
        out_nd = nd - 1
    cdef Array a = _empty_dims(shape, out_nd, dt, cpu)
    name = _dtype_name_bytes(dt)
    dlref_seq_fill(obj, nd, a._data, _type_id(dt), name)
    return a


cdef object _DT_BOOL = _as_dtype("bool")
cdef object _DT_INT64 = _as_dtype("int64")
cdef object _DT_FLOAT64 = _as_dtype("float64")
cdef object _DT_COMPLEX128 = _as_dtype("complex128")


cdef object _other_leaves(object o, int levels, list found):
    """o (a nested sequence `levels` deep, or a leaf) with every leaf that
    carries a dtype -- a NumPy or ml_dtypes scalar, a 0-d array of any
    library -- replaced by its Python value, and the dtype of each leaf
    appended to `found`: its own for those, the default one for Python
    scalars and for other numbers (__index__: int64, __float__: float64,
    __complex__: complex128), as NumPy reads them (docs/semantics.md)."""
    if levels:
        return [_other_leaves(item, levels - 1, found) for item in o]
    if isinstance(o, bool):
        found.append(_DT_BOOL)
    elif isinstance(o, int):
        found.append(_DT_INT64)
    elif isinstance(o, float):
        found.append(_DT_FLOAT64)
    elif isinstance(o, complex):
        found.append(_DT_COMPLEX128)
    else:
        dtype = getattr(o, "dtype", None)
        if dtype is not None and getattr(o, "shape", None) == ():
            found.append(_as_dtype(dtype))
            return o.tolist()
        kind = dlref_other_leaf_kind(o)
        found.append(_DT_INT64 if kind == DLREF_KIND_OF_INT else
                     _DT_FLOAT64 if kind == DLREF_KIND_OF_FLOAT else _DT_COMPLEX128)
    return o


def _from_values(obj, dtype=None):
    """A new host Array of a Python scalar or a nested list/tuple (for
    asarray): shape and dtype found in one walk, values written in C."""
    cdef DLDataType dt
    if dtype is None:
        return _from_python(obj, dt, True)
    return _from_python(obj, _dldtype(dtype))


def _from_bytes(const unsigned char[::1] data not None, dtype, int64_t count, bint padded=True):
    """A 1-d host Array of ``count`` elements whose storage is ``data``
    (sub-byte types one code per byte when ``padded``, else packed)."""
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Array a = _empty((count,), _dldtype(dtype), cpu, padded)
    cdef int64_t n = _nbytes_of(a)
    if data.shape[0] != n:
        raise ValueError(f"{count} elements of {a.dtype} take {n} bytes, got {data.shape[0]}")
    if n:
        memcpy(a._data, &data[0], <size_t>n)
    return a


def _minifloat_params():
    """name -> (exponent bits, mantissa bits, bias, style) of the float8/6/4
    types, from the kernels' table."""
    return {(<bytes>dlref_minifloats[i].name).decode(): (
        dlref_minifloats[i].exp_bits, dlref_minifloats[i].man_bits, dlref_minifloats[i].bias,
        (<bytes>dlref_style_names[dlref_minifloats[i].style]).decode()) for i in range(11)}
