"""The core builds against the upstream dlpack.h as well as ours.

Libraries that vendor dlpack-ref keep their own copy of the upstream header; the
core must compile against it unchanged. This builds src/_dlpack_ref.pyx with the
header shipped inside cuda-core's wheel (or tvm-ffi's), loads the result in a
fresh interpreter beside the pure-Python package, and exchanges an array with it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _upstream_header_dir() -> Path:
    for pkg, rel in (("cuda.core", "_include"), ("tvm_ffi", "include/dlpack")):
        try:
            spec = importlib.util.find_spec(pkg)
        except ModuleNotFoundError:
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        d = Path(list(spec.submodule_search_locations)[0]) / rel
        if (d / "dlpack.h").is_file():
            return d
    pytest.skip("no installed wheel ships an upstream dlpack.h (cuda-core or apache-tvm-ffi)")


def test_core_builds_and_runs_against_upstream_header(tmp_path):
    pytest.importorskip("Cython", reason="Cython is needed to build the core")
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler")
    header_dir = _upstream_header_dir()
    assert (header_dir / "dlpack.h").read_bytes() != (ROOT / "include" / "dlpack.h").read_bytes()

    pkg = tmp_path / "dlpack_ref"
    shutil.copytree(ROOT / "python" / "dlpack_ref", pkg)
    c_file = tmp_path / "_dlpack_ref.c"
    subprocess.run(
        [sys.executable, "-m", "cython", "-3", "--module-name", "dlpack_ref._dlpack_ref",
         "-I", str(ROOT / "src"), str(ROOT / "src" / "_dlpack_ref.pyx"), "-o", str(c_file)],
        check=True, capture_output=True, text=True)
    # The dtype and device lookups are generated at build time, as CMake does.
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_tables.py"), str(tmp_path / "dlpack_ref_tables.h")],
                   check=True)
    ext = pkg / ("_dlpack_ref" + sysconfig.get_config_var("EXT_SUFFIX"))
    build = subprocess.run(
        [cc, "-shared", "-fPIC", "-O0", "-w", f"-I{sysconfig.get_paths()['include']}",
         f"-I{header_dir}", f"-I{ROOT / 'include'}", f"-I{tmp_path}", f"-I{ROOT / 'src'}",
         # The module's entry point, which includes the generated C, as CMake builds it.
         str(ROOT / "src" / "dlref_module.c"), "-o", str(ext)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]

    probe = (
        "import dlpack_ref as d, sys\n"
        "assert d.__file__.startswith(sys.argv[1]), d.__file__\n"
        "a = d.asarray([[1.0, 2.0], [3.0, 4.0]])\n"
        "b = d.from_dlpack(a.__dlpack__(max_version=(1, 3)))\n"
        "c = d.from_dlpack(a[:, ::-1].__dlpack__())\n"
        "assert b.data_ptr == a.data_ptr and b.tolist() == a.tolist()\n"
        "assert c.tolist() == [[2.0, 1.0], [4.0, 3.0]]\n"
        "assert d.exchange_api_version(d.Array) == (1, 3)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    # -S: no site-packages, so no installed dlpack_ref (an editable install's
    # finder included) comes before the one built here; it needs nothing else.
    run = subprocess.run([sys.executable, "-S", "-c", probe, str(tmp_path)], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip() == "ok"
