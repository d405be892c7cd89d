"""Build tests/cython_api_ext/api_demo.pyx, an extension on dlpack-ref's
vendorable Cython API, the way an adopting library would: cython and the C
compiler Python was built with, nothing but dlpack_ref.get_include() on the
include paths."""

import importlib.util
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
    pytest.importorskip("Cython")
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]})")
    c_file = build / (pyx.stem + ".c")
    subprocess.run([sys.executable, "-m", "cython", "-3", *(f"-I{d}" for d in cython_include), str(pyx),
                    "-o", str(c_file)], check=True, capture_output=True, text=True)
    so = build / (pyx.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([*cc, "-shared", "-fPIC", "-O1", "-I", sysconfig.get_paths()["include"],
                    *(f"-I{d}" for d in c_include), str(c_file), "-o", str(so)],
                   check=True, capture_output=True, text=True)
    spec = importlib.util.spec_from_file_location(pyx.stem, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_c_extension(source: Path, build: Path, c_include=(), cxx: bool = False) -> Path:
    """Compile the C (or, with ``cxx``, C++) extension ``source`` into folder
    ``build`` with the compiler Python was built with (g++ for C++) and
    ``c_include`` as the only include folders besides Python's; return the
    path of the built module, not imported (skips the test when no compiler
    is found)."""
    cc = ["g++", "-std=c++17"] if cxx else [*(sysconfig.get_config_var("CC") or "cc").split(), "-std=c99"]
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no compiler ({cc[0]})")
    so = build / (source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    out = subprocess.run([*cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
                          "-isystem", sysconfig.get_paths()["include"], *(f"-I{d}" for d in c_include),
                          str(source), "-o", str(so)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return so
