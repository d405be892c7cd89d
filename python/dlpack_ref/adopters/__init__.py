# SPDX-License-Identifier: Apache-2.0
"""Example adopters of the vendored protocol, shipped as sources to copy.

Five small array libraries that adopt DLPack v1 by vendoring
``dlpack_ref.h`` (docs/vendoring.md), one per way of writing an extension:
plain C (``c_adopter.c``), C++17 on the CPython API (``cpp_adopter.cpp``),
Cython (``cython_adopter.pyx``), pybind11 (``pybind11_adopter.cpp``) and
nanobind (``nanobind_adopter.cpp``, built by ``CMakeLists.txt``); the three
C++ ones share their array type (``cpu_array.hpp``). Each has the same
Python API, so one factory hook of the conformance checker
(``adopter_hook.py``) serves them all. The adopters import nothing of
dlpack-ref; the hook runs inside the checker, which does.

``dlpack-ref-config --adopters`` prints the folder, as :func:`get_dir`
returns it.
"""

from __future__ import annotations

import os


def get_dir() -> str:
    """Folder holding the example adopters' sources, their build file and
    their conformance hook.

    Returns
    -------
    str
        The absolute path of the installed ``dlpack_ref/adopters`` folder.
    """
    return os.path.dirname(os.path.abspath(__file__))
