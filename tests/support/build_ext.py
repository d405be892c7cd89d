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

import dlpack_ref

SOURCE = Path(__file__).resolve().parent.parent / "cython_api_ext" / "api_demo.pyx"


def build_api_demo(build: Path):
    """The compiled api_demo module, built in folder `build` (skips the test
    when Cython or a C compiler is missing)."""
    pytest.importorskip("Cython")
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]})")
    pyx = build / "api_demo.pyx"
    shutil.copy(SOURCE, pyx)
    include = dlpack_ref.get_include()
    c_file = build / "api_demo.c"
    subprocess.run([sys.executable, "-m", "cython", "-3", "-I", include, str(pyx), "-o", str(c_file)],
                   check=True, capture_output=True, text=True)
    so = build / ("api_demo" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([*cc, "-shared", "-fPIC", "-O1", "-I", sysconfig.get_paths()["include"], "-I", include,
                    str(c_file), "-o", str(so)], check=True, capture_output=True, text=True)
    spec = importlib.util.spec_from_file_location("api_demo", so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
