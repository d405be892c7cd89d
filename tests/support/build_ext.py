"""Build tests/cython_api_ext/api_demo.pyx, an extension on dlpack-ref's
vendorable Cython API, the way an adopting library would: cython and the C
compiler Python was built with, nothing but dlpack_ref.get_include() on the
include paths."""

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "cython_api_ext" / "api_demo.pyx"


def build_api_demo(build: Path):
    """The compiled api_demo module, built in folder `build` (skips the test
    when Cython or a C compiler is missing)."""
    import dlpack_ref

    pyx = build / "api_demo.pyx"
    shutil.copy(SOURCE, pyx)
    include = dlpack_ref.get_include()
    return compile_extension(pyx, build, cython_include=[include], c_include=[include])


def compile_extension(pyx: Path, build: Path, cython_include=(), c_include=()):
    """Compile the Cython module `pyx` in folder `build` with cython and the C
    compiler Python was built with, and import it; `cython_include` and
    `c_include` are the only include folders added (skips the test when
    Cython or a C compiler is missing)."""
    return _imported(pyx.stem, compile_cython_extension(pyx, build, cython_include, c_include))


def _imported(name: str, so: Path):
    """The built extension module ``so``, named ``name``, imported."""
    spec = importlib.util.spec_from_file_location(name, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sanitizer_flags() -> list[str]:
    """The compiler flags of the sanitizer lane (tools/sanitize.sh exports
    them as DLREF_SANITIZER_FLAGS while it runs the tests), so that the
    extensions the tests build are instrumented like the core; none
    elsewhere (an instrumented module needs libasan preloaded)."""
    return os.environ.get("DLREF_SANITIZER_FLAGS", "").split()


def compile_cython_extension(pyx: Path, build: Path, cython_include=(), c_include=()) -> Path:
    """Translate the Cython module `pyx` to C in folder `build` and compile
    it there as compile_c_extension does, minus -Werror (Cython's generated
    C is not warning-free); return the path of the built module, not
    imported (skips the test when Cython or a C compiler is missing)."""
    pytest.importorskip("Cython")
    c_file = build / (pyx.stem + ".c")
    out = subprocess.run([sys.executable, "-m", "cython", "-3", *(f"-I{d}" for d in cython_include), str(pyx),
                          "-o", str(c_file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return compile_c_extension(c_file, build, c_include, strict=False)


def compile_c_extension(source: Path, build: Path, c_include=(), cxx: bool = False, strict: bool = True) -> Path:
    """Compile the C (or, with ``cxx``, C++17) extension ``source`` into
    folder ``build`` with the compiler Python was built with (g++ for C++),
    ``-Wall -Wextra`` (``-Werror`` too and, for C, ``-std=c99`` when
    ``strict``), the sanitizer lane's flags when it runs, and ``c_include``
    as the only include folders besides Python's; return the path of the
    built module, not imported (skips the test when no compiler is
    found)."""
    cc = ["g++", "-std=c++17"] if cxx else (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no compiler ({cc[0]})")
    strictness = ["-Werror", *([] if cxx else ["-std=c99"])] if strict else []
    so = build / (source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    out = subprocess.run([*cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", *strictness, *sanitizer_flags(),
                          "-isystem", sysconfig.get_paths()["include"], *(f"-I{d}" for d in c_include),
                          str(source), "-o", str(so)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return so


def _module_init(name: str) -> str:
    """The module definition and init function of a C probe: it declares
    that it needs no GIL, since on a free-threaded CPython a module that
    does not turns the GIL back on for the whole test process, where every
    later test then runs with it."""
    return f"""
static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, methods, NULL, NULL, NULL, NULL}};
PyMODINIT_FUNC PyInit_{name}(void) {{
    PyObject* m = PyModule_Create(&def);
#ifdef Py_GIL_DISABLED
    if (m != NULL) PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    return m;
}}
"""


def load_c_probe(name: str, body: str, build: Path, c_include=()):
    """Compile, as compile_c_extension does, and import the C module
    ``name`` made of ``body`` (which defines its ``methods`` table) and its
    module definition, in folder ``build``."""
    source = build / f"{name}.c"
    source.write_text(body + _module_init(name))
    return _imported(name, compile_c_extension(source, build, c_include))
