"""What the installed distribution carries and declares: the licence, the
headers and Cython declarations, the metadata (classifiers, extras, version),
`cimport dlpack_ref.*` without an include path, dlpack-ref-config and the
CMake package files, and an sdist with the licence in it.

The wheel's contents are read from the installed distribution's RECORD,
which lists exactly what the wheel unpacked."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import dlpack_ref
from support.build_ext import compile_extension

ROOT = Path(__file__).resolve().parents[1]
DIST = importlib.metadata.distribution("dlpack-ref")


def _installed_files():
    return {str(f).replace(os.sep, "/") for f in DIST.files}


def test_the_wheel_carries_the_licence_headers_and_cython_declarations():
    files = _installed_files()
    licences = [f for f in files if f.endswith(".dist-info/licenses/LICENSE")]
    assert licences, sorted(files)
    text = DIST.locate_file(licences[0]).read_text()
    assert text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert {
        "dlpack_ref/include/dlpack.h", "dlpack_ref/include/dlpack.pxd", "dlpack_ref/include/dlpack_ref_api.pxd",
        "dlpack_ref/include/dlpack_ref.h", "dlpack_ref/include/dlpack_ref_tables.h", "dlpack_ref/dlpack.pxd", "dlpack_ref/dlpack_ref_api.pxd",
        "dlpack_ref/share/cmake/dlpack_ref/dlpack_refConfig.cmake",
        "dlpack_ref/share/cmake/dlpack_ref/dlpack_refConfigVersion.cmake",
    } <= files


def test_the_shipped_header_is_the_repository_header_with_its_spdx_line():
    shipped = Path(dlpack_ref.get_include(), "dlpack.h").read_text()
    assert shipped == (ROOT / "include" / "dlpack.h").read_text()
    assert shipped.splitlines()[0] == "/* SPDX-License-Identifier: Apache-2.0 */"
    protocol = Path(dlpack_ref.get_include(), "dlpack_ref.h").read_text()
    assert protocol == (ROOT / "include" / "dlpack_ref.h").read_text()
    assert protocol.splitlines()[0] == "/* SPDX-License-Identifier: Apache-2.0 */"


def test_the_package_copy_of_the_api_pxd_cimports_its_sibling_by_package_name():
    source = (ROOT / "src" / "dlpack_ref_api.pxd").read_text()
    # Beside the compiled core: where the build installs (an editable install included).
    installed = Path(dlpack_ref._dlpack_ref.__file__)
    package_copy = installed.with_name("dlpack_ref_api.pxd").read_text()
    assert "from dlpack cimport" in source
    assert "from dlpack cimport" not in package_copy
    assert package_copy == source.replace("from dlpack cimport", "from dlpack_ref.dlpack cimport")
    assert installed.with_name("dlpack.pxd").read_text() == (ROOT / "src" / "dlpack.pxd").read_text()


def test_metadata_licence_authors_and_classifiers():
    meta = DIST.metadata
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Author"] == "dlpack-ref developers"
    classifiers = set(meta.get_all("Classifier"))
    assert "Programming Language :: Cython" in classifiers
    assert any(c.startswith("Programming Language :: Python :: Free Threading :: ") for c in classifiers)
    # The Pythons claimed are exactly those CI runs a lane on, and
    # requires-python starts at the oldest of them.
    claimed = {tuple(map(int, m[1].split("."))) for c in classifiers
               if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c))}
    lanes = {tuple(map(int, v.split("."))) for v in re.findall(r'^\s+"(?:main-)?py(3\.\d+)', (ROOT / ".ci" / "run").read_text(), re.M)}
    assert claimed == lanes and (3, 14) in lanes and (3, 15) in lanes
    lowest = min(claimed)
    assert meta["Requires-Python"] == f">={lowest[0]}.{lowest[1]}"
    # PEP 639: the licence is an expression, never a classifier as well.
    assert not any(c.startswith("License ::") for c in classifiers)


def test_every_classifier_is_a_registered_trove_classifier():
    trove = pytest.importorskip("trove_classifiers")
    unknown = set(DIST.metadata.get_all("Classifier")) - set(trove.classifiers)
    assert not unknown


def _extras():
    extras = {}
    for requirement in DIST.requires or ():
        spec, _, marker = requirement.partition(";")
        found = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if found:
            extras.setdefault(found.group(1), []).append(spec.strip())
    return extras


def test_extras_have_no_exact_pins_and_test_needs_no_gpu_package():
    extras = _extras()
    assert {"cuda", "cuda12", "cuda13", "test", "interop", "docs"} <= set(extras)
    pinned = [(name, r) for name, reqs in extras.items() for r in reqs if "==" in r]
    assert not pinned
    gpu = [r for r in extras["test"] if r.startswith(("cuda-", "cupy", "torch", "jax"))]
    assert not gpu
    # The ABI comparison against cuda-core's upstream header stays in CI through interop.
    assert any(r.startswith("cuda-core") for r in extras["interop"])
    assert any(r.startswith("cuda-bindings") for r in extras["cuda"])
    assert [r for r in extras["cuda12"] if r.startswith("cuda-bindings")] == ["cuda-bindings<13,>=12.0"]


def test_version_comes_from_the_package_metadata():
    assert dlpack_ref.__version__ == DIST.version


# --- cimport from the installed package, no include path ----------------------

_CIMPORT_DEMO = """\
# cython: language_level=3, freethreading_compatible=True
from dlpack_ref.dlpack cimport DLTensor, kDLCPU
from dlpack_ref.dlpack_ref_api cimport DLPackRefTensor, dlpack_ref_import, dlpack_ref_release

def first_element_and_device(obj):
    cdef DLPackRefTensor t
    dlpack_ref_import(obj, &t)
    try:
        return (<double*>t.dl_tensor.data)[0], t.dl_tensor.device.device_type == kDLCPU
    finally:
        dlpack_ref_release(&t)
"""


def test_cimport_dlpack_ref_modules_needs_no_cython_include_path(tmp_path):
    pyx = tmp_path / "cimport_demo.pyx"
    pyx.write_text(_CIMPORT_DEMO)
    # The C compiler still needs the folder of dlpack.h, as NumPy's headers do.
    module = compile_extension(pyx, tmp_path, cython_include=(), c_include=[dlpack_ref.get_include()])
    assert module.first_element_and_device(dlpack_ref.asarray([2.5, 1.0])) == (2.5, True)


# --- dlpack-ref-config and find_package(dlpack_ref) ---------------------------

def _config(*args):
    return subprocess.run([sys.executable, "-m", "dlpack_ref._configtool", *args],
                          capture_output=True, text=True)


def test_config_tool_prints_the_folders_asked_for_in_order():
    out = _config("--cmakedir", "--includedir", "--cflags")
    assert out.returncode == 0, out.stderr
    cmakedir, includedir, cflags = out.stdout.splitlines()
    assert includedir == dlpack_ref.get_include() and cflags == "-I" + includedir
    assert Path(cmakedir, "dlpack_refConfig.cmake").is_file()
    assert Path(_config("--cython-include").stdout.strip(), "dlpack_ref", "dlpack.pxd").is_file()


def test_config_tool_without_an_option_is_a_usage_error():
    out = _config()
    assert out.returncode == 2 and "give at least one of --includedir" in out.stderr


_CMAKE_PROBE = """\
cmake_minimum_required(VERSION 3.26)
project(probe LANGUAGES NONE)
find_package(dlpack_ref ${WANTED} CONFIG REQUIRED)
get_target_property(dirs dlpack_ref::headers INTERFACE_INCLUDE_DIRECTORIES)
file(WRITE "${CMAKE_BINARY_DIR}/found.txt" "${dlpack_ref_VERSION}\\n${dirs}\\n${dlpack_ref_CYTHON_DIR}\\n")
"""


def _cmake_configure(tmp_path, wanted):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake on PATH")
    (tmp_path / "CMakeLists.txt").write_text(_CMAKE_PROBE)
    return subprocess.run([cmake, "-S", str(tmp_path), "-B", str(tmp_path / "build"), f"-DWANTED={wanted}",
                           f"-Ddlpack_ref_DIR={_config('--cmakedir').stdout.strip()}"],
                          capture_output=True, text=True)


def test_find_package_gives_the_header_target_and_version(tmp_path):
    out = _cmake_configure(tmp_path, DIST.version)
    assert out.returncode == 0, out.stdout + out.stderr
    version, dirs, cython_dir = (tmp_path / "build" / "found.txt").read_text().splitlines()
    assert version == DIST.version
    assert Path(dirs).resolve() == Path(dlpack_ref.get_include()).resolve()
    assert Path(cython_dir, "dlpack_ref", "dlpack_ref_api.pxd").is_file()


def test_find_package_refuses_another_major_version(tmp_path):
    out = _cmake_configure(tmp_path, "99.0")
    assert out.returncode != 0
    assert "dlpack_ref" in out.stderr and "99.0" in out.stderr


# --- the sdist --------------------------------------------------------------------

def test_the_sdist_carries_the_licence_and_everything_the_build_needs(tmp_path):
    pytest.importorskip("scikit_build_core")
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("not run from a source tree")
    out = subprocess.run(
        [sys.executable, "-c", "import sys, scikit_build_core.build as b; print(b.build_sdist(sys.argv[1]))",
         str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    with tarfile.open(tmp_path / out.stdout.strip().splitlines()[-1]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"LICENSE", "pyproject.toml", "CMakeLists.txt", "include/dlpack.h", "include/dlpack_ref.h",
            "src/dlpack.pxd", "src/dlpack_ref_api.pxd", "cmake/dlpack_refConfig.cmake"} <= names
