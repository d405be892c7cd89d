"""A buffer exporter whose ``Py_buffer`` has every field under the test's control.

``memoryview`` and ``bytes`` only ever export consistent buffers; a foreign C
extension can hand a consumer anything. :class:`HostileBuffer` is a heap type
made with ``PyType_FromSpec`` through ctypes whose ``bf_getbuffer`` slot is a
ctypes callback: it writes the fields given to the constructor into the
consumer's ``Py_buffer`` as they are (NULL pointers, negative ndim, a format
that disagrees with the item size, suboffsets). It has no
``bf_releasebuffer``: a consumer refuses a buffer while its exception is
pending, and a Python callback cannot run then (its result is reported as
"returned a result with an exception set"). Each export holds one reference
to the exporter in ``Py_buffer.obj`` instead, which ``PyBuffer_Release``
drops, so ``sys.getrefcount`` back at its value before shows that every
buffer taken was released exactly once.

    buf = HostileBuffer(shape=(4,), itemsize=4, fmt=b"f", data=None)  # NULL buf
    dlpack_ref.asarray(buf)   # must raise, not read address 0

Fields not given default to a consistent, C-contiguous float32 buffer over
memory the object owns.
"""

from __future__ import annotations

import ctypes

__all__ = ["HostileBuffer", "PyBuffer"]

_NOT_GIVEN = object()


class PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (Include/pybuffer.h, stable since 3.3)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


class _TypeSlot(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _TypeSpec(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("basicsize", ctypes.c_int),
        ("itemsize", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("slots", ctypes.POINTER(_TypeSlot)),
    ]


_Py_bf_getbuffer = 1
_Py_TPFLAGS_BASETYPE = 1 << 10
_Py_TPFLAGS_HAVE_VERSION_TAG = 1 << 18

_GETBUFFER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int)

# Private prototypes: ctypes.pythonapi's function objects are shared with
# every other user in the process, so their argtypes are not changed here.
_api = ctypes.PyDLL(None)
_PyType_FromSpec = _api.PyType_FromSpec
_PyType_FromSpec.restype = ctypes.py_object
_PyType_FromSpec.argtypes = [ctypes.POINTER(_TypeSpec)]
_Py_IncRef = _api.Py_IncRef
_Py_IncRef.restype = None
_Py_IncRef.argtypes = [ctypes.c_void_p]


def _getbuffer(exporter, view, flags):
    spec = exporter._spec
    if spec.get("fail"):
        # -1 with no exception set: what a broken C exporter can do.
        return -1
    v = view.contents
    v.buf = spec["buf"]
    v.len = spec["len"]
    v.itemsize = spec["itemsize"]
    v.readonly = spec["readonly"]
    v.ndim = spec["ndim"]
    v.format = spec["format"]
    v.shape = spec["shape"]
    v.strides = spec["strides"]
    v.suboffsets = spec["suboffsets"]
    v.internal = None
    _Py_IncRef(id(exporter))
    v.obj = id(exporter)
    exporter.gets += 1
    return 0


_getbuffer_c = _GETBUFFER(_getbuffer)
_slots = (_TypeSlot * 2)(
    _TypeSlot(_Py_bf_getbuffer, ctypes.cast(_getbuffer_c, ctypes.c_void_p).value),
    _TypeSlot(0, None),
)
_type_spec = _TypeSpec(b"hostile_buffer._Exporter", 0, 0,
                       _Py_TPFLAGS_BASETYPE | _Py_TPFLAGS_HAVE_VERSION_TAG, _slots)
_Exporter = _PyType_FromSpec(ctypes.byref(_type_spec))


def _ssize_array(values):
    if values is None:
        return None, None
    array = (ctypes.c_ssize_t * max(len(values), 1))(*values)
    return array, ctypes.addressof(array)


class HostileBuffer(_Exporter):
    """An object exporting exactly the ``Py_buffer`` it is told to.

    Args:
        shape: extents written to ``shape`` (None for a NULL pointer).
        strides: byte strides (None for a NULL pointer; default C-contiguous).
        suboffsets: written to ``suboffsets`` (None for NULL).
        itemsize: the ``itemsize`` field.
        fmt: the ``format`` field, bytes (None for NULL, meaning ``"B"``).
        ndim: the ``ndim`` field (default ``len(shape)``).
        data: ``"alloc"`` for zeroed memory owned by this object (``nbytes``
            long, default large enough for shape and itemsize), an int
            address, or None for a NULL ``buf``.
        fill: bytes copied to the start of allocated memory.
        length: the ``len`` field (default the product of shape times itemsize).
        readonly: the ``readonly`` field.
        fail: make ``bf_getbuffer`` return -1 without setting an exception.

    Attributes:
        gets: successful ``bf_getbuffer`` calls.
        address: the address of the allocated memory (0 when not allocated).
    """

    def __init__(self, shape=(4,), *, strides=_NOT_GIVEN, suboffsets=None, itemsize=4, fmt=b"f",
                 ndim=None, data="alloc", fill=b"", nbytes=None, length=None, readonly=False,
                 fail=False):
        self.gets = 0
        self.address = 0
        count = 1
        for n in shape or ():
            count *= max(n, 0)
        if strides is _NOT_GIVEN:
            strides = None if shape is None else _c_strides(tuple(shape), itemsize)
        self._shape, shape_address = _ssize_array(None if shape is None else tuple(shape))
        self._strides, strides_address = _ssize_array(strides)
        self._suboffsets, suboffsets_address = _ssize_array(suboffsets)
        self._format = fmt
        if data == "alloc":
            size = count * max(itemsize, 1) if nbytes is None else nbytes
            self._memory = ctypes.create_string_buffer(max(size, len(fill), 1))
            ctypes.memmove(self._memory, fill, len(fill))
            self.address = buf = ctypes.addressof(self._memory)
        else:
            buf = data
        self._spec = {
            "buf": buf,
            "len": count * itemsize if length is None else length,
            "itemsize": itemsize,
            "readonly": int(readonly),
            "ndim": (len(shape) if shape is not None else 0) if ndim is None else ndim,
            "format": fmt,
            "shape": shape_address,
            "strides": strides_address,
            "suboffsets": suboffsets_address,
            "fail": fail,
        }


def _c_strides(shape, itemsize):
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))
