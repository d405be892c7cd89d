"""Example adopters of the vendored protocol (tests/adopters/): each is built
from the vendored files alone (dlpack.h, dlpack_ref.h, dlpack_ref_tables.h
copied into a fresh folder), runs with dlpack-ref not importable, exchanges
zero-copy both ways with NumPy (and PyTorch, JAX when installed), and gets
dlpack_ref's own pass set from the conformance checker (through the factory
hook, adapters.HOOK).

The three adopters: plain C (c_adopter.c), idiomatic C++17 (cpp_adopter.cpp)
and Cython (cython_adopter.pyx, which vendors dlpack.pxd and
dlpack_ref_api.pxd too). Built with the sanitizer lane's flags when it runs
(support.build_ext.sanitizer_flags), and free-threading-ready: the 3.13t
lane runs them with the GIL off."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack_ref
from support.build_ext import compile_c_extension, compile_cython_extension

HERE = Path(__file__).resolve().parent / "adopters"
VENDORED = ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h")
# A Cython adopter vendors the declarations of the two headers too.
VENDORED_CYTHON = ("dlpack.pxd", "dlpack_ref_api.pxd")
# Rules dlpack_ref passes that an adopter cannot pass until the header has
# its exchange-table builder (issue 18, item 1, last point).
AWAITING_TABLE_BUILDER = {"producer.exchange_api", "producer.exchange_api_matches_dlpack"}


ADOPTERS = [("c_adopter", "c_adopter.c"), ("cpp_adopter", "cpp_adopter.cpp"), ("cython_adopter", "cython_adopter.pyx")]


@pytest.fixture(scope="module", params=ADOPTERS, ids=[a[0] for a in ADOPTERS])
def adopter(request, tmp_path_factory) -> tuple[str, Path]:
    """(module name, the folder holding the built adopter module, its hook
    and nothing of dlpack-ref but the three vendored headers)."""
    name, source = request.param
    folder = tmp_path_factory.mktemp(name)
    vendor = folder / "vendor"
    vendor.mkdir()
    cython = source.endswith(".pyx")
    for file in VENDORED + (VENDORED_CYTHON if cython else ()):
        shutil.copy(Path(dlpack_ref.get_include(), file), vendor / file)
    if cython:
        # Translated from a copy in `folder`, so that nothing next to the
        # source (tests/, dlpack-ref's tree) is on Cython's include path.
        shutil.copy(HERE / source, folder / source)
        compile_cython_extension(folder / source, folder, cython_include=[vendor], c_include=[vendor])
    else:
        compile_c_extension(HERE / source, folder, c_include=[vendor], cxx=source.endswith(".cpp"))
    shutil.copy(HERE / "adopter_hook.py", folder / "adopter_hook.py")
    (folder / f"{name}_check.py").write_text(
        f"import adopter_hook, {name}\n\n"
        "def __dlpack_conformance__():\n"
        f"    return adopter_hook.conformance({name}, '{name}_check')\n")
    return name, folder


def _run_blocked(adopter, code: str) -> str:
    """Run `code` in a fresh interpreter in which dlpack_ref cannot be
    imported, with the adopter module imported as `c`."""
    name, folder = adopter
    prelude = f"import sys\nsys.modules['dlpack_ref'] = None\nimport {name} as c\n"
    out = subprocess.run([sys.executable, "-c", prelude + code], cwd=folder, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(folder)}, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


def test_the_adopter_exchanges_zero_copy_with_numpy_without_dlpack_ref(adopter):
    out = _run_blocked(adopter, """
import numpy as np
x = np.arange(12.0).reshape(3, 4)[:, ::-2]
t = c.from_dlpack(x)
assert t.data_ptr == x.ctypes.data, (t.data_ptr, x.ctypes.data)
back = np.from_dlpack(t)
assert back.ctypes.data == x.ctypes.data and back.strides == x.strides and (back == x).all()
own = c.make(2, 32, 1, (2, 3), np.arange(6, dtype=np.float32).tobytes())
n = np.from_dlpack(own)
assert n.ctypes.data == own.data_ptr and n.tolist() == [[0, 1, 2], [3, 4, 5]]
ro = c.make(2, 32, 1, (2,), np.zeros(2, np.float32).tobytes(), 1)
assert not np.from_dlpack(ro).flags.writeable
assert 'dlpack_ref' not in [m for m in sys.modules if sys.modules[m] is not None]
print("ok")
""")
    assert out.strip() == "ok"


def test_the_adopter_raises_the_contract_errors(adopter):
    out = _run_blocked(adopter, """
import numpy as np
t = c.make(2, 32, 1, (2,), np.zeros(2, np.float32).tobytes())
def err(f):
    try:
        f()
    except BaseException as e:
        return e
    raise AssertionError("no error")
e = err(lambda: t.__dlpack__(stream=1))
assert type(e) is ValueError and "stream=1" in str(e) and "only stream=None" in str(e), e
assert type(err(lambda: t.__dlpack__(max_version=[1, 3]))) is TypeError
assert type(err(lambda: t.__dlpack__(copy=1))) is TypeError
assert isinstance(err(lambda: t.__dlpack__(max_version=(1, 3), dl_device=(4, 0))), BufferError)
e = err(lambda: t.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False))
assert isinstance(e, BufferError) and isinstance(e, ValueError) and "cuda:0" in str(e), e
assert type(err(lambda: t.__dlpack__(bogus=1))) is TypeError
ro = c.make(2, 32, 1, (2,), np.zeros(2, np.float32).tobytes(), 1)
e = err(lambda: ro.__dlpack__())
assert type(e) is BufferError and "read-only" in str(e), e
e = err(lambda: c.from_dlpack(np.zeros(2), device=(2, 0), copy=False))
assert isinstance(e, c.CopyForbiddenError) and isinstance(e, ValueError), e
assert type(err(lambda: c.from_dlpack(42))) is TypeError
print("ok")
""")
    assert out.strip() == "ok"


def _pass_set(spec: str, pythonpath: str | None) -> set[str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-m", "dlpack_ref", "check", "--library", spec, "--format", "json"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    results = json.loads(out.stdout)["libraries"][0]["results"]
    assert results, f"no results for {spec}: {out.stderr[-2000:]}"
    return {r["check"] for r in results if r["status"] == "pass"}


@pytest.fixture(scope="module")
def reference_pass_set():
    return _pass_set("dlpack_ref", None)


@pytest.mark.slow
def test_the_adopter_passes_what_dlpack_ref_passes(adopter, reference_pass_set):
    name, folder = adopter
    passed = _pass_set(f"{name}_check", str(folder))
    expected = reference_pass_set - AWAITING_TABLE_BUILDER
    assert passed == expected, (sorted(expected - passed), sorted(passed - expected))


@pytest.mark.parametrize("library", ["torch", "jax"])
def test_the_adopter_exchanges_zero_copy_with(adopter, library):
    pytest.importorskip(library)
    out = _run_blocked(adopter, f"""
if {library!r} == "torch":
    import torch
    x = torch.arange(6.0).reshape(2, 3)
    ptr = x.data_ptr()
    t = c.from_dlpack(x)
    back = torch.from_dlpack(t)
    assert t.data_ptr == ptr and back.data_ptr() == ptr
else:
    import jax, jax.numpy as jnp
    x = jnp.arange(6.0, dtype=jnp.float32)
    ptr = x.unsafe_buffer_pointer()
    t = c.from_dlpack(x)
    assert t.data_ptr == ptr
    back = jnp.from_dlpack(t)
    assert back.unsafe_buffer_pointer() == ptr
print("ok")
""")
    assert out.strip() == "ok"


def test_the_adopter_exports_and_imports_from_8_threads_at_once(adopter):
    """8 threads (support.threads.run_threads) export one shared tensor, import
    NumPy's strided views and each other's capsules, copy through the copy
    callback and hit a refusal, all through the adopter at once; under a
    free-threaded CPython (the 3.13t lane) with the GIL off, which importing
    the adopter must not turn back on. Every capsule's deleter has run at the
    end: the shared tensor is back to the references it started with."""
    out = _run_blocked(adopter, f"""
import gc, os, sysconfig
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from support.threads import run_threads
import numpy as np
shared = c.make(2, 32, 1, (8,), np.arange(8, dtype=np.float32).tobytes())
read_only = c.make(2, 32, 1, (2,), bytes(8), 1)
source = np.arange(64.0).reshape(8, 8)
base = sys.getrefcount(shared)

def work(k):
    column = source[:, k]
    for _ in range(200):
        n = np.from_dlpack(shared)
        assert n.ctypes.data == shared.data_ptr and n[k] == k
        t = c.from_dlpack(column)
        assert t.data_ptr == column.ctypes.data and (np.from_dlpack(t) == column).all()
        mine = c.from_dlpack(shared)
        assert mine.data_ptr == shared.data_ptr
        copied = c.from_dlpack(shared.__dlpack__(max_version=(1, 3), copy=True))
        assert copied.data_ptr != shared.data_ptr and np.from_dlpack(copied)[k] == k
        try:
            read_only.__dlpack__()
        except BufferError:
            pass
        else:
            raise AssertionError("a read-only tensor exported as legacy")

run_threads(work)
del work
gc.collect()
assert sys.getrefcount(shared) == base, (sys.getrefcount(shared), base)
gil_disabled_build = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
if gil_disabled_build and os.environ.get("PYTHON_GIL") != "1":
    assert not sys._is_gil_enabled(), "importing the adopter turned the GIL on"
print("ok", "gil-off" if gil_disabled_build and not sys._is_gil_enabled() else "gil")
""")
    assert out.split()[0] == "ok", out
