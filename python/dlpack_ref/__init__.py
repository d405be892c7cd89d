"""dlpack-ref: the reference implementation of DLPack v1 (ABI 1.3) for Python.

The exchange itself (``Array.__dlpack__``, ``from_dlpack``, the C exchange
API) is the Cython core ``dlpack_ref._dlpack_ref``; this package adds the
Python face: devices, dtypes, creation functions, CUDA and the conformance
checks. See docs/semantics.md for every rule.
"""


def _refuse_subinterpreters() -> None:
    """ImportError in any interpreter but the main one, before any module of
    the package is made. The compiled core refuses such interpreters itself
    too, before it makes any state, whichever way it is loaded (its entry
    point, src/dlref_module.c, with the same message), but CPython refuses an
    isolated one first, in its own words. PyPy has no subinterpreters."""
    import sys
    if sys.implementation.name == "pypy":
        return
    try:
        from _thread import _is_main_interpreter   # CPython 3.12+
    except ImportError:
        import _xxsubinterpreters as interpreters  # CPython 3.11
        main = interpreters.get_current() == interpreters.get_main()
    else:
        main = _is_main_interpreter()
    if not main:
        raise ImportError("dlpack_ref can be imported in the main interpreter only, not in a subinterpreter: "
                          "its compiled core keeps process-wide state")


_refuse_subinterpreters()

import os as _os  # noqa: E402

from . import _dlpack_ref as _core  # noqa: E402
from ._dlpack_ref import (  # noqa: E402
    CAPSULE_NAMES,
    DLPACK_VERSION,
    MAX_NDIM,
    Array,
    CopyForbiddenError,
    asarray,
    can_access,
    empty,
    exchange_api_version,
    from_dlpack,
    get_num_threads,
    inspect,
    set_num_threads,
    zeros,
)
from . import cuda  # noqa: E402  (the public CUDA API: loads neither cuda-python nor a driver)
from ._devices import C_ENUMERATORS, Device, DeviceType, as_device  # noqa: E402
from ._dtypes import DTYPES, DType, DTypeCode, as_dtype  # noqa: E402


try:
    # Written into the wheel by the build ([[tool.scikit-build.generate]] in
    # pyproject.toml): a plain attribute, so that no module __getattr__ slows
    # every attribute lookup of this module.
    from ._version import __version__
except ImportError:  # a source tree put on sys.path by hand
    __version__ = "0+unknown"


globals().update(DTYPES)


def get_include() -> str:
    """Folder holding the files a C, C++ or Cython library builds against or
    vendors (shipped in the wheel): ``dlpack.h`` (the DLPack 1.3 ABI),
    ``dlpack_ref.h`` (the vendorable protocol) with ``dlpack_ref_tables.h``
    (its generated dtype and device tables), and the Cython declarations of
    both headers, ``dlpack.pxd`` and ``dlpack_ref_api.pxd``."""
    # Beside the compiled core, where the build installs them (an editable
    # install keeps this file in the source tree, the build's files elsewhere).
    return _os.path.join(_os.path.dirname(_core.__file__), "include")


__all__ = [
    "Array", "CAPSULE_NAMES", "CopyForbiddenError", "DLPACK_VERSION", "MAX_NDIM", "DTYPES", "DType", "DTypeCode",
    "Device", "DeviceType", "C_ENUMERATORS", "as_device", "as_dtype", "asarray",
    "can_access", "empty", "exchange_api_version", "from_dlpack", "get_include",
    "get_num_threads", "inspect", "set_num_threads", "zeros", *DTYPES,
]
