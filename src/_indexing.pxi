# Indexing: basic indexing (integers, slices of any step, Ellipsis, None)
# as views, the one-integer-per-axis fast path, and iteration.


cdef Array _basic_index(Array a, object key):
    """Integers, slices (any step), Ellipsis and None: always a view."""
    if _is_packed(a._dtype, a._flags):
        raise TypeError(f"indexing packed sub-byte {a.dtype} data is not supported; copy it to a padded Array first")
    if type(key) is not tuple:
        key = (key,)
    cdef int n_real = 0
    cdef bint seen_ellipsis = False
    for k in key:
        if k is Ellipsis:
            if seen_ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            seen_ellipsis = True
        elif k is not None:
            n_real += 1
    if n_real > a._ndim:
        raise IndexError(f"too many indices for an Array of ndim {a._ndim}: {n_real} given")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (a._ndim - n_real))
        else:
            expanded.append(k)
    if not seen_ellipsis:
        expanded.extend([slice(None)] * (a._ndim - n_real))
    out_shape = []
    out_strides = []
    cdef int64_t offset = 0
    cdef int axis = 0
    cdef int64_t size, stride, idx, length
    # In a non-empty Array every element's offset fits int64 (checked when it
    # was made), so offsets and strides of its views do too; an empty one
    # addresses no element, so none is computed (its extents and strides may
    # be anything the product rule allows).
    cdef bint empty = _size_of(a) == 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        size = a._shape[axis]
        stride = a._strides[axis]
        if isinstance(k, slice):
            # Python ints: a step or bound of any size is clamped as NumPy does.
            start, stop, step = (<slice>k).indices(size)
            length = len(range(start, stop, step))
            if length > 0 and not empty:
                offset += <int64_t>start * stride
            out_shape.append(length)
            # One element or none: the stride never addresses memory; it is
            # NumPy's stride * step when that fits int64, else the axis's own.
            if length <= 1:
                out_strides.append(stride * step if -INT64_MAX <= stride * step <= INT64_MAX else stride)
            elif empty:
                out_strides.append(<int64_t>(<uint64_t>stride * <uint64_t><int64_t>step))
            else:
                out_strides.append(stride * <int64_t>step)
        elif isinstance(k, bool) or not hasattr(k, "__index__"):
            raise IndexError(
                f"only integers, slices, Ellipsis and None are valid indices (basic indexing), not {type(k).__name__}")
        else:
            index = k.__index__()  # a Python int: any size is compared, none overflows
            if index < -size or index >= size:
                raise IndexError(f"index {index} is out of bounds for axis {axis} with size {size}")
            idx = index
            if idx < 0:
                idx += size
            if not empty:
                offset += idx * stride
        axis += 1
    if len(out_shape) > DLPACK_REF_MAX_NDIM:
        raise IndexError(
            f"the index {key!r} makes an Array of {len(out_shape)} dimensions; the maximum is "
            f"{DLPACK_REF_MAX_NDIM}")
    cdef Array v = _view(a, len(out_shape))
    cdef int i
    for i in range(v._ndim):
        v._shape[i] = out_shape[i]
        v._strides[i] = out_strides[i]
    v._data = a._data + offset * (dlpack_ref_storage_bits(a._dtype, a._flags) // 8)
    return v


cdef Array _integer_index(Array a, tuple key):
    """a[i, j, ...] with one int per axis: a 0-d view, without the general
    indexing walk. Other keys of that length go to _basic_index."""
    cdef int i
    cdef int64_t offset = 0
    cdef int64_t size, idx
    for k in key:
        if type(k) is not int:
            return _basic_index(a, key)
    if _is_packed(a._dtype, a._flags):
        return _basic_index(a, key)
    for i in range(a._ndim):
        k = key[i]
        size = a._shape[i]
        if not -size <= k < size:
            raise IndexError(f"index {k} is out of bounds for axis {i} with size {size}")
        idx = k
        if idx < 0:
            idx += size
        offset += idx * a._strides[i]
    cdef Array v = _view(a, 0)
    v._data = a._data + offset * (dlpack_ref_storage_bits(a._dtype, a._flags) // 8)
    return v


def _rows(Array a, int64_t n):
    """a[0], a[1], ...: what NumPy's iteration yields (0-d Arrays for a 1-d a,
    where NumPy yields its scalars)."""
    cdef int64_t i
    for i in range(n):
        yield a[i]
