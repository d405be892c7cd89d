# Dtypes: which DLDataTypes the core holds (every DLPack 1.3 type: the
# universal check is the policy), element sizes, buffer-protocol formats
# both ways (the lookups are generated from python/dlpack_ref/_dtypes.py into
# dlpack_ref_tables.h), and the DLDataType of any dtype object, cached.

from dlpack_ref._dtypes import from_triple as _dtype_from_triple, as_dtype as _as_dtype, result_type as _result_type
from dlpack_ref._dtypes import DType as _DType


cdef inline bint _is_packed(DLDataType dt, uint64_t flags) noexcept nogil:
    return dlpack_ref_storage_bits(dt, flags) < 8


cdef inline const char* _buffer_format(DLDataType dt) noexcept nogil:
    """The PEP 3118 format of dt, NULL when it has none."""
    cdef const char* fmt = dlpack_ref_dtype_format(dt.code, dt.bits, dt.lanes)
    return fmt if fmt != NULL and fmt[0] != 0 else NULL


cdef DLDataType _dtype_of_format(const char* fmt, Py_ssize_t itemsize) except *:
    """The DLDataType of a buffer's format and item size (native byte order only)."""
    cdef DLDataType dt
    cdef uint32_t key
    if fmt != NULL and fmt[0] != 0 and fmt[0] != b"@" and fmt[0] != b"=" and fmt[0] != b"<" and fmt[0] != b">" \
            and fmt[0] != b"!":
        # A format with no byte-order prefix (NumPy's for every native
        # array) is looked up as it is: no Python string is made.
        key = dlpack_ref_dtype_of_format(fmt, itemsize)
        if key != 0:
            return _dldatatype_of_key(key)
    raw = (<bytes>fmt).decode("ascii", "replace") if fmt != NULL else "B"
    s = raw
    if s[:1] in ("@", "=", "<", ">", "!"):
        if s[0] in (">", "!") and _BYTEORDER == "little" or s[0] == "<" and _BYTEORDER == "big":
            raise BufferError(f"buffer format {raw!r} is not in native byte order, which DLPack cannot describe")
        s = s[1:]
    key = dlpack_ref_dtype_of_format(s.encode("ascii", "replace"), itemsize)
    if key == 0:
        raise BufferError(
            f"buffer format {raw!r} with item size {itemsize} has no DLPack data type")
    return _dldatatype_of_key(key)


cdef inline DLDataType _dldatatype_of_key(uint32_t key) noexcept:
    cdef DLDataType dt
    dt.code = <uint8_t>(key >> 24)
    dt.bits = <uint8_t>((key >> 16) & 0xFF)
    dt.lanes = <uint16_t>(key & 0xFFFF)
    return dt


cdef object _BYTEORDER = __import__("sys").byteorder



# --- the DLDataType of a dtype object (cached) -----------------------------

cdef dict _dldtype_cache = {}

cdef DLDataType _dldtype(object dtype) except *:
    """The DLDataType of anything as_dtype accepts (cached per hashable key)."""
    cdef DLDataType dt
    if type(dtype) is _DType:
        # Read as it is: hashing a DType for the cache runs its Python __hash__.
        dt.code = <uint8_t>dtype.code
        dt.bits = <uint8_t>dtype.bits
        dt.lanes = <uint16_t>dtype.lanes
        return dt
    try:
        triple = _dldtype_cache.get(dtype)
    except TypeError:
        triple = None
    if triple is None:
        triple = _as_dtype(dtype).__dlpack_data_type__()
        try:
            _dldtype_cache[dtype] = triple
        except TypeError:
            pass
    dt.code = <uint8_t>triple[0]
    dt.bits = <uint8_t>triple[1]
    dt.lanes = <uint16_t>triple[2]
    return dt


cdef dict _dtype_names = {}

cdef bytes _dtype_name_bytes(DLDataType dt):
    """The dtype's name for the kernels' messages (cached)."""
    cdef uint32_t key = (<uint32_t>dt.code << 24) | (<uint32_t>dt.bits << 16) | dt.lanes
    name = _dtype_names.get(key)
    if name is None:
        name = _dtype_from_triple(dt.code, dt.bits, dt.lanes).name.encode()
        _dtype_names[key] = name
    return name
