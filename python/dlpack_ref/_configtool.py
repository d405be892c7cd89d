"""``dlpack-ref-config``: where an installed dlpack-ref keeps what other builds
need, for build systems that cannot import Python (as ``numpy-config`` and
``tvm-ffi-config`` do for theirs).

    dlpack-ref-config --includedir     # dlpack.h, dlpack_ref.h, dlpack_ref_tables.h, the .pxd files
    dlpack-ref-config --cmakedir       # dlpack_refConfig.cmake, for find_package
    dlpack-ref-config --cflags         # -I<includedir>
    dlpack-ref-config --cython-include # the folder above the package (cython -I)
    dlpack-ref-config --adopters       # the example adopters' sources and checker hook

Also runs as ``python -m dlpack_ref._configtool``.
"""

from __future__ import annotations

import argparse
import os
import sys

import dlpack_ref
import dlpack_ref.adopters


def cmake_dir() -> str:
    """Folder holding ``dlpack_refConfig.cmake``: pass it as ``dlpack_ref_DIR``
    (or put its prefix on ``CMAKE_PREFIX_PATH``) to ``find_package(dlpack_ref)``."""
    return os.path.join(_installed_dir(), "share", "cmake", "dlpack_ref")


def _installed_dir() -> str:
    """The package folder the build installed its files into (beside the
    compiled core; an editable install keeps the Python sources elsewhere)."""
    return os.path.dirname(os.path.abspath(dlpack_ref._dlpack_ref.__file__))


def _cython_include_dir() -> str:
    return os.path.dirname(_installed_dir())


def main(argv=None) -> int:
    """Print the folders asked for, one per line, in the order asked.

    Parameters
    ----------
    argv : list of str, optional
        The arguments; ``sys.argv[1:]`` when None.

    Returns
    -------
    int
        0, or 2 (argparse's usage error) when no option is given.
    """
    parser = argparse.ArgumentParser(
        prog="dlpack-ref-config",
        description="Print where the installed dlpack-ref keeps its headers, Cython "
                    "declarations and CMake package files.")
    parser.add_argument("--version", action="version", version=dlpack_ref.__version__)
    answers = {
        "includedir": dlpack_ref.get_include,
        "cmakedir": cmake_dir,
        "cflags": lambda: "-I" + dlpack_ref.get_include(),
        "cython_include": _cython_include_dir,
        "adopters": dlpack_ref.adopters.get_dir,
    }
    helps = {
        "includedir": "folder with dlpack.h, dlpack_ref.h, dlpack_ref_tables.h and their Cython declarations "
                      "dlpack.pxd and dlpack_ref_api.pxd (C -I, cython -I)",
        "cmakedir": "folder with dlpack_refConfig.cmake (pass as -Ddlpack_ref_DIR=...)",
        "cflags": "compiler flags for C code that includes dlpack.h",
        "cython_include": "folder above the dlpack_ref package: `cython -I` it when the "
                          "compiling interpreter does not have dlpack-ref on sys.path",
        "adopters": "folder with the example adopters (C, C++, Cython, pybind11, nanobind), "
                    "their build file and their conformance hook",
    }
    for name in answers:
        parser.add_argument("--" + name.replace("_", "-"), dest="asked", action="append_const",
                            const=name, help=helps[name])
    args = parser.parse_args(argv)
    if not args.asked:
        parser.error("give at least one of " + ", ".join("--" + n.replace("_", "-") for n in answers))
    for name in args.asked:
        print(answers[name]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
