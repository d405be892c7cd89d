"""The vendored header under the limited API (abi3): a minimal adopter,
tests/support/limited_demo.c, built with Py_LIMITED_API at 3.11's
stable ABI (where vectorcall is missing and a method call goes through a
tuple and a dict) exports to NumPy and imports from it with its memory
shared, and reads NumPy's memory as a Py_buffer; the deleter of each
export runs exactly once."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import dlpack_ref
from support.build_ext import compile_c_extension

SOURCE = Path(__file__).resolve().parent / "support" / "limited_demo.c"

# CPython's own Python.h refuses the limited API on a free-threaded build and
# with Py_TRACE_REFS: there is no abi3 module to build there.
pytestmark = pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
                                or bool(sysconfig.get_config_var("Py_TRACE_REFS")),
                                reason="CPython has no limited API on a free-threaded or Py_TRACE_REFS build")


@pytest.fixture(scope="module")
def limited_demo(tmp_path_factory):
    """The folder of the module, compiled once (C99, -Werror)."""
    folder = tmp_path_factory.mktemp("limited")
    vendor = folder / "vendor"
    vendor.mkdir()
    for header in ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h"):
        shutil.copy(Path(dlpack_ref.get_include(), header), vendor / header)
    shutil.copy(SOURCE, vendor / "limited_demo_body.c")
    (folder / "limited_demo.c").write_text('#define Py_LIMITED_API 0x030B0000\n#include "limited_demo_body.c"\n')
    compile_c_extension(folder / "limited_demo.c", folder, c_include=[vendor])
    return folder


def test_an_abi3_adopter_exports_to_and_imports_from_numpy(limited_demo):
    pytest.importorskip("numpy")
    code = """
import sys
import numpy as np
import limited_demo as m

arr = np.arange(6.0)
base = sys.getrefcount(arr)

class Wrapped:
    def __dlpack__(self, **kwargs):
        return m.export(arr, **kwargs)
    def __dlpack_device__(self):
        return (1, 0)

out = np.from_dlpack(Wrapped())
assert out.ctypes.data == arr.ctypes.data, "the export copied"
assert out.tolist() == arr.tolist()
assert sys.getrefcount(arr) == base + 1, "the export does not hold its owner once"
del out
assert sys.getrefcount(arr) == base, "the export's deleter did not drop its owner exactly once"

address, versioned = m.take(arr)
assert address == arr.ctypes.data, "the import copied"
assert versioned == 1, "NumPy was not asked for a versioned capsule (max_version lost on the way)"
assert sys.getrefcount(arr) == base, "NumPy's deleter did not run exactly once"

address, versioned = m.take(Wrapped())
assert address == arr.ctypes.data and versioned == 1
assert sys.getrefcount(arr) == base, "the round trip through both sides leaked or over-released"

address, length = m.view(arr)
assert (address, length) == (arr.ctypes.data, arr.nbytes), "the buffer is not over NumPy's memory"
assert sys.getrefcount(arr) == base, "releasing the buffer did not run NumPy's deleter exactly once"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=limited_demo, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(limited_demo)}, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout == "ok\n"


def test_an_abi3_adopter_exchanges_with_dlpack_ref_zero_copy(limited_demo):
    """The same module with dlpack-ref's Array on the other side, without
    NumPy (which has no wheel for every PyPy): this is the exchange CI runs
    on PyPy. Reference counts are read in C (PyPy has no sys.getrefcount),
    after gc.collect(): PyPy releases a capsule when its collector runs, and
    that release must still run the deleter exactly once."""
    code = """
import array, gc
import dlpack_ref
import limited_demo as m

buf = array.array("d", [0.5, 1.5, 2.5, 3.5])
address = buf.buffer_info()[0]
gc.collect()
base = m.refcount(buf)

class Wrapped:
    def __dlpack__(self, **kwargs):
        return m.export(buf, **kwargs)
    def __dlpack_device__(self):
        return (1, 0)

out = dlpack_ref.from_dlpack(Wrapped())
assert out.data_ptr == address, "dlpack-ref's import copied"
assert m.take(out) == (address, 1), "dlpack-ref's export copied, or was not versioned"
assert out.tolist() == [0.5, 1.5, 2.5, 3.5]
gc.collect()
assert m.refcount(buf) == base + 1, "the export does not hold its owner once"
del out
gc.collect()
assert m.refcount(buf) == base, "the export's deleter did not drop its owner exactly once"

arr = dlpack_ref.asarray([1.0, 2.0, 3.0])
gc.collect()
arr_base = m.refcount(arr)
address, versioned = m.take(arr)
assert versioned == 1, "dlpack-ref was not asked for a versioned capsule"
assert address == arr.data_ptr, "the import copied"
gc.collect()
assert m.refcount(arr) == arr_base, "dlpack-ref's deleter did not run exactly once"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=limited_demo, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(limited_demo)}, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout == "ok\n"
