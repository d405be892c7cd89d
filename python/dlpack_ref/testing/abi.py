"""The DLPack 1.3 ABI as :mod:`ctypes` sees it: the structs, the flag bits,
the capsule names, the exchange-API function types and private prototypes of
the Python C API.

This is the one ctypes mirror of ``include/dlpack.h`` in the project: the
capsule factory, the independent reader, the conformance checker, its
reproductions (which carry these definitions as they are) and the tests
all use these names. The structs are written from the header, not from
the core, so that checks built on them do not inherit a mistake of the core
(tests/test_abi.py compares them with the C layout). The constants (flag
bits, capsule names, the ndim limit) are spelled once, in src/dlpack.pxd, and
read from the core: a wrong one would break every exchange with NumPy and
PyTorch in tests/test_interop.py.
"""

from __future__ import annotations

import ctypes

from .. import _dlpack_ref as _core

__all__ = [
    "DLPackVersion", "DLDevice", "DLDataType", "DLTensor", "DLManagedTensor", "DLManagedTensorVersioned",
    "DLPackExchangeAPIHeader", "DLPackExchangeAPI",
    "FLAG_READ_ONLY", "FLAG_IS_COPIED", "FLAG_IS_SUBBYTE_TYPE_PADDED",
    "NAME_VERSIONED", "NAME_LEGACY", "NAME_USED_VERSIONED", "NAME_USED_LEGACY", "NAME_EXCHANGE_API",
    "DLPACK_VERSION", "MAX_NDIM", "INT64_MAX",
    "DELETER_T", "SET_ERROR_T", "ALLOCATOR_T", "FROM_PY_T", "TO_PY_T", "VIEW_T", "STREAM_T",
    "c_api", "exchange_api_of", "PyCapsule_New", "PyCapsule_GetName", "PyCapsule_SetName", "PyCapsule_GetPointer",
    "PyCapsule_IsValid", "PyCapsule_GetContext", "PyCapsule_SetContext", "Py_DecRef", "PyErr_Occurred",
]

# The constants are spelled once, in src/dlpack.pxd (and dlpack.h); the
# core hands them to Python code. Constants only: no rule is taken from it.
FLAG_READ_ONLY = _core.FLAGS["DLPACK_FLAG_BITMASK_READ_ONLY"]
FLAG_IS_COPIED = _core.FLAGS["DLPACK_FLAG_BITMASK_IS_COPIED"]
FLAG_IS_SUBBYTE_TYPE_PADDED = _core.FLAGS["DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED"]

NAME_VERSIONED = _core.CAPSULE_NAMES["versioned"].encode()
NAME_LEGACY = _core.CAPSULE_NAMES["legacy"].encode()
NAME_USED_VERSIONED = _core.CAPSULE_NAMES["used_versioned"].encode()
NAME_USED_LEGACY = _core.CAPSULE_NAMES["used_legacy"].encode()
NAME_EXCHANGE_API = _core.CAPSULE_NAMES["exchange_api"].encode()

#: (major, minor) of the DLPack ABI of dlpack.h.
DLPACK_VERSION = _core.DLPACK_VERSION
#: The most dimensions a DLPack tensor may have in dlpack-ref (docs/guarantees.md).
MAX_NDIM = _core.MAX_NDIM
INT64_MAX = (1 << 63) - 1


class DLPackVersion(ctypes.Structure):
    """``DLPackVersion``: ``major``, ``minor`` (uint32)."""
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    """``DLDevice``: ``device_type`` (the enum, as int32), ``device_id``."""
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """``DLDataType``: ``code`` (uint8), ``bits`` (uint8), ``lanes`` (uint16)."""
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """``DLTensor``. ``shape`` and ``strides`` are raw addresses (c_void_p)
    so that NULL and arbitrary values can be written."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """Legacy ``DLManagedTensor`` (capsule name ``dltensor``). ``deleter`` is
    the raw function address (0 for NULL)."""
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    """``DLManagedTensorVersioned`` (capsule name ``dltensor_versioned``).
    ``deleter`` is the raw function address (0 for NULL)."""
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLPackExchangeAPIHeader(ctypes.Structure):
    """``DLPackExchangeAPIHeader``: ``version`` and ``prev_api`` (a pointer
    to the header of an older table, NULL at the end of the chain)."""


DLPackExchangeAPIHeader._fields_ = [
    ("version", DLPackVersion),
    ("prev_api", ctypes.POINTER(DLPackExchangeAPIHeader)),
]


class DLPackExchangeAPI(ctypes.Structure):
    """``DLPackExchangeAPI`` (behind a ``dlpack_exchange_api`` capsule); the
    function pointers are raw addresses (0 for NULL): call them through the
    ``*_T`` function types below."""
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


# --- function types ------------------------------------------------------------
# The header passes Python objects as void* (py_object, out_py_object), so they
# are c_void_p here: pass id(obj) while holding obj. The allocator "needs no
# Python API of its own" and reports through SetError, so it is called like C
# (CFUNCTYPE releases the GIL for the call); the other four set a Python
# exception on failure and run with the GIL held (PYFUNCTYPE keeps it and
# raises the exception they set).

DELETER_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
SET_ERROR_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
ALLOCATOR_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(ctypes.c_void_p),
                               ctypes.c_void_p, SET_ERROR_T)
FROM_PY_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
TO_PY_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
VIEW_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DLTensor))
STREAM_T = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))


def c_api(name: str, restype, *argtypes):
    """A prototype of the Python C API function ``name`` of its own (setting
    argtypes on ``ctypes.pythonapi``'s shared function objects would change
    them for every other module), called with the GIL held.

    Parameters
    ----------
    name : str
        The C function, e.g. ``"PyCapsule_GetName"``.
    restype, *argtypes
        ctypes types of the result and the arguments.

    Returns
    -------
    ctypes function
    """
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


# The Python C API as the mirror's users call it. Every PyObject* is a
# c_void_p (pass id(obj) while holding obj): a capsule destructor runs while
# its capsule is being deallocated, and a py_object argument would take a new
# reference to a dying object. A capsule name is a char* (bytes, a char
# buffer, or None for NULL) that must outlive the capsule.
PyCapsule_New = c_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
PyCapsule_GetName = c_api("PyCapsule_GetName", ctypes.c_void_p, ctypes.c_void_p)
PyCapsule_SetName = c_api("PyCapsule_SetName", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
PyCapsule_GetPointer = c_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
PyCapsule_IsValid = c_api("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
PyCapsule_GetContext = c_api("PyCapsule_GetContext", ctypes.c_void_p, ctypes.c_void_p)
PyCapsule_SetContext = c_api("PyCapsule_SetContext", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
Py_DecRef = c_api("Py_DecRef", None, ctypes.c_void_p)
PyErr_Occurred = c_api("PyErr_Occurred", ctypes.c_void_p)


def exchange_api_of(cls) -> DLPackExchangeAPI | None:
    """The exchange-API table a type publishes as ``__dlpack_c_exchange_api__``.

    Parameters
    ----------
    cls : type
        The array type (the attribute is looked up on the type, as the header says).

    Returns
    -------
    DLPackExchangeAPI or None
        None when the type has no such attribute.

    Raises
    ------
    TypeError
        When the attribute is not a capsule named ``dlpack_exchange_api``.
    """
    cap = getattr(cls, "__dlpack_c_exchange_api__", None)
    if cap is None:
        return None
    if type(cap).__name__ != "PyCapsule" or not PyCapsule_IsValid(id(cap), NAME_EXCHANGE_API):
        raise TypeError(f"__dlpack_c_exchange_api__ of {cls.__name__} is {cap!r}, "
                        "not a capsule named 'dlpack_exchange_api'")
    return DLPackExchangeAPI.from_address(PyCapsule_GetPointer(id(cap), NAME_EXCHANGE_API))
