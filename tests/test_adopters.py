"""The example adopters of the vendored protocol, shipped in the package
(dlpack_ref/adopters/): each is built from the INSTALLED copy with the
commands docs/vendoring.md prints (support.adopter_recipe), with nothing of
dlpack-ref on the include paths but the folder of dlpack_ref.get_include(),
runs with dlpack-ref not importable, exchanges zero-copy both ways with NumPy
(and PyTorch, JAX when installed), and gets dlpack_ref's own pass set from the
conformance checker through the shipped hook (adopter_hook.py), as a user's
check module would call it.

The five adopters: plain C (c_adopter.c), C++17 on the CPython API
(cpp_adopter.cpp), Cython (cython_adopter.pyx), pybind11
(pybind11_adopter.cpp) and nanobind (nanobind_adopter.cpp, through its
CMakeLists.txt), each publishing its own exchange table through the header's
builder. Built with the sanitizer lane's flags when it runs
(support.build_ext.sanitizer_flags), every warning an error where the code is
ours alone, and free-threading-ready: the 3.13t lane runs them with the GIL
off, 8 threads at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import dlpack_ref
import dlpack_ref.adopters
from support.adopter_recipe import ADOPTERS, DOCS, build_adopter, built_module, check_module
from support.build_ext import compile_c_extension, sanitizer_flags

# What each recipe needs besides a compiler, and the flags the tests add to
# its CFLAGS / CXXFLAGS: every warning an error (Python's headers as system
# headers, so that their own warnings are not the adopter's), but for the C
# Cython generates and nanobind's own sources, which are not warning-free.
_PYTHON_H = f"-isystem {sysconfig.get_paths()['include']}"
_STRICT_C = f"-std=c99 -Wall -Wextra -Werror {_PYTHON_H}"
_STRICT_CXX = f"-Wall -Wextra -Werror {_PYTHON_H}"
NEEDS = {
    "c_adopter": ((), _STRICT_C),
    "cpp_adopter": ((), _STRICT_CXX),
    "cython_adopter": (("Cython",), f"-Wall -Wextra {_PYTHON_H}"),
    "pybind11_adopter": (("pybind11",), _STRICT_CXX),
    "nanobind_adopter": (("nanobind", "cmake"), "-Wall -Wextra"),
}


@pytest.fixture(scope="module", params=ADOPTERS)
def adopter(request, tmp_path_factory) -> tuple[str, Path]:
    """(module name, the folder holding the adopter module built by its
    documented recipe, and its documented check module, which calls the
    shipped hook)."""
    name = request.param
    modules, flags = NEEDS[name]
    for module in modules:
        pytest.importorskip(module)
    folder = tmp_path_factory.mktemp(name)
    sanitize = " ".join(sanitizer_flags())
    done = build_adopter(name, folder, cflags=f"{flags} {sanitize}", cxxflags=f"{flags} {sanitize}",
                         ldflags=sanitize)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert built_module(name, folder).is_file(), sorted(p.name for p in folder.iterdir())
    # Where -Werror is not passed (Cython's C, nanobind's own sources), the
    # shipped sources themselves must still build without a warning.
    ours = [line for line in (done.stdout + done.stderr).splitlines()
            if "warning:" in line and "dlpack_ref/adopters/" in line]
    assert not ours, ours
    (folder / f"{name}_check.py").write_text(check_module(name))
    return name, folder


def test_the_recipes_build_the_installed_sources_against_the_vendored_files_only():
    """The recipes compile the installed sources (what `dlpack-ref-config
    --adopters` prints) against the installed include folder, which holds the
    files a vendoring library copies (the whole protocol or one side of it) and nothing else."""
    package = Path(dlpack_ref.__file__).resolve().parent
    out = subprocess.run([sys.executable, "-m", "dlpack_ref._configtool", "--adopters", "--includedir"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    adopters, include = (Path(line) for line in out.stdout.splitlines())
    assert adopters == package / "adopters" == Path(dlpack_ref.adopters.get_dir())
    # The include folder is beside the compiled core (an editable install keeps the sources elsewhere).
    assert include == Path(dlpack_ref.get_include()) == Path(dlpack_ref._dlpack_ref.__file__).parent / "include"
    assert {p.name for p in include.iterdir()} == {"dlpack.h", "dlpack_ref.h", "dlpack_ref_consumer.h",
                                                   "dlpack_ref_producer.h", "dlpack_ref_tables.h", "dlpack.pxd",
                                                   "dlpack_ref_api.pxd"}
    shipped = {p.name for p in adopters.iterdir() if p.name != "__pycache__"}
    assert shipped == {"__init__.py", "adopter_hook.py", "CMakeLists.txt", "c_adopter.c", "cpp_adopter.cpp",
                       "cpu_array.hpp", "cython_adopter.pyx", "pybind11_adopter.cpp", "nanobind_adopter.cpp"}


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
    assert "producer.exchange_api" in passed and "producer.exchange_api_matches_dlpack" in passed
    assert passed == reference_pass_set, (sorted(reference_pass_set - passed), sorted(passed - reference_pass_set))


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
    # The adopter's own memory is 256-byte aligned: JAX imports memory that
    # is not 64-byte aligned only as a copy (and refuses it with copy=False).
    import numpy as np
    for n in (1, 3, 1000):
        own = c.make(2, 32, 1, (n,), np.arange(n, dtype=np.float32).tobytes())
        assert own.data_ptr % 256 == 0, own.data_ptr
        assert jnp.from_dlpack(own, copy=False).unsafe_buffer_pointer() == own.data_ptr
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


# --- the one Python API of the five (docs/vendoring.md) -------------------------------------

# make(code, bits, lanes, shape, data, flags=0, cls=Tensor), as the page gives it: every
# call here, keywords included, goes to each of the five adopters. "Sub" stands for a
# subclass of the adopter's Tensor. (positional, keywords, read-only, of class Sub)
_DATA = bytes(range(24))
MAKE_CALLS = [
    ((2, 32, 1, (2, 3), _DATA), {}, False, False),
    ((2, 32, 1, (2, 3), _DATA, 1), {}, True, False),
    ((2, 32, 1, (2, 3), _DATA), {"flags": 1}, True, False),
    ((2, 32, 1, (2, 3), _DATA, 0, "Sub"), {}, False, True),
    ((2, 32, 1, (2, 3), _DATA, 0), {"cls": "Sub"}, False, True),
    ((2, 32, 1, (2, 3), _DATA), {"cls": "Sub", "flags": 1}, True, True),
    ((2, 32), {"lanes": 1, "shape": (2, 3), "data": _DATA}, False, False),
    ((), {"code": 2, "bits": 32, "lanes": 1, "shape": (2, 3), "data": _DATA, "flags": 1, "cls": "Sub"}, True, True),
]
# Calls every adopter refuses with TypeError, whatever its binding's words.
MAKE_REFUSED = [
    ((2, 32, 1, (2, 3), _DATA), {"flag": 1}),              # no such keyword
    ((2, 32, 1, (2, 3), _DATA, 1), {"flags": 1}),          # flags twice
    ((2, 32, 1, (2, 3), _DATA), {"cls": int}),             # not a subclass of Tensor
    ((2, 32, 1), {"shape": (2, 3)}),                       # data missing
]


def test_make_takes_the_documented_arguments_by_position_and_keyword(adopter):
    import numpy as np

    c = _imported(adopter)

    class Sub(c.Tensor):
        pass

    expected = np.frombuffer(_DATA, np.float32).reshape(2, 3)
    for args, kwargs, readonly, sub in MAKE_CALLS:
        args = tuple(Sub if a == "Sub" else a for a in args)
        kwargs = {k: Sub if v == "Sub" else v for k, v in kwargs.items()}
        t = c.make(*args, **kwargs)
        assert type(t) is (Sub if sub else c.Tensor), (args, kwargs, type(t))
        assert t.readonly is readonly, (args, kwargs)
        back = np.from_dlpack(t)
        assert back.ctypes.data == t.data_ptr and (back == expected).all(), (args, kwargs)
    for args, kwargs in MAKE_REFUSED:
        with pytest.raises(TypeError):
            c.make(*args, **kwargs)


def test_the_adopter_reports_the_version_of_the_dlpack_ref_it_vendors(adopter):
    """`__version__` is DLPACK_REF_VERSION of the vendored tables, and the
    documented check module hands it to the checker's report."""
    name, folder = adopter
    assert _imported(adopter).__version__ == dlpack_ref.__version__
    out = subprocess.run([sys.executable, "-m", "dlpack_ref", "check", "--library", f"{name}_check",
                          "--format", "json", "--rules", "producer.versioned_capsule"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(folder)}, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout)["libraries"][0]["version"] == dlpack_ref.__version__


# --- the adopter's own exchange table (the header's builder) -----------------------------

def _imported(adopter):
    """The adopter module imported in this process (dlpack_ref is its consumer here)."""
    import importlib.util
    import sysconfig

    name, folder = adopter
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, folder / (name + sysconfig.get_config_var("EXT_SUFFIX")))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _table(module):
    from dlpack_ref.testing import exchange_api_of

    api = exchange_api_of(module.Tensor)
    assert api is not None
    return api


def _float32(module, n=6, *, readonly=False):
    import numpy as np

    return module.make(2, 32, 1, (n,), np.arange(n, dtype=np.float32).tobytes(), 1 if readonly else 0)


def test_the_adopter_publishes_a_1_3_table_with_every_function(adopter):
    from dlpack_ref.testing import NAME_EXCHANGE_API, capsule_name

    c = _imported(adopter)
    assert capsule_name(c.Tensor.__dict__["__dlpack_c_exchange_api__"]) == NAME_EXCHANGE_API
    api = _table(c)
    assert (api.header.version.major, api.header.version.minor, bool(api.header.prev_api)) == (1, 3, False)
    assert all(getattr(api, f) for f, _ in type(api)._fields_[1:])
    assert dlpack_ref.exchange_api_version(c.Tensor) == (1, 3)


def test_dlpack_ref_imports_an_adopter_tensor_through_its_table_zero_copy(adopter):
    import gc

    c = _imported(adopter)

    class NoDevice(c.Tensor):
        # The table path never asks __dlpack_device__; the __dlpack__ path must.
        def __dlpack_device__(self):
            raise AssertionError("__dlpack__ path taken")

    import numpy as np
    t = c.make(2, 32, 1, (2, 3), np.arange(6, dtype=np.float32).tobytes(), 0, NoDevice)
    assert dlpack_ref.exchange_api_version(NoDevice) == (1, 3)
    refs = sys.getrefcount(t)
    a = dlpack_ref.from_dlpack(t)
    assert a.data_ptr == t.data_ptr and a.tolist() == [[0, 1, 2], [3, 4, 5]] and not a.readonly
    assert sys.getrefcount(t) == refs + 1   # the table's export keeps t alive
    del a
    gc.collect()
    assert sys.getrefcount(t) == refs       # its deleter ran exactly once
    ro = c.make(2, 32, 1, (2,), np.zeros(2, np.float32).tobytes(), 1, NoDevice)
    assert dlpack_ref.from_dlpack(ro).readonly


def test_the_tables_export_is_versioned_where_dunder_dlpack_is_legacy(adopter):
    from dlpack_ref.testing import FROM_PY_T, DELETER_T, DLManagedTensorVersioned

    import ctypes
    c = _imported(adopter)
    ro = _float32(c, readonly=True)
    with pytest.raises(BufferError, match="legacy"):
        ro.__dlpack__()
    assert dlpack_ref.inspect(ro.__dlpack__(max_version=(1, 3)))["flags"] == 1
    out = ctypes.c_void_p()
    assert FROM_PY_T(_table(c).managed_tensor_from_py_object_no_sync)(id(ro), ctypes.byref(out)) == 0
    m = DLManagedTensorVersioned.from_address(out.value)
    assert (m.version.major, m.version.minor, m.flags) == (1, 3, 1)
    assert m.dl_tensor.data + m.dl_tensor.byte_offset == ro.data_ptr and m.manager_ctx == id(ro)
    DELETER_T(m.deleter)(out.value)


def test_a_subclass_overriding_dunder_dlpack_is_exported_by_its_override(adopter):
    c = _imported(adopter)
    calls = []

    class Refusing(c.Tensor):
        def __dlpack__(self, **kwargs):
            calls.append(kwargs)
            raise BufferError("refused by the override")

    import numpy as np
    t = c.make(2, 32, 1, (2,), np.zeros(2, np.float32).tobytes(), 0, Refusing)
    assert dlpack_ref.exchange_api_version(Refusing) is None
    with pytest.raises(BufferError, match="refused by the override"):
        dlpack_ref.from_dlpack(t)
    with pytest.raises(BufferError, match="refused by the override"):
        c.from_dlpack(t)
    assert len(calls) == 2 and all(k.get("max_version") == (1, 3) for k in calls)


def test_the_tables_functions_refuse_other_objects_with_type_error(adopter):
    from dlpack_ref.testing import FROM_PY_T, VIEW_T, DLTensor

    import ctypes
    c = _imported(adopter)
    api = _table(c)
    not_ours = [1, 2]
    # The message names the type by its tp_name, which nanobind sets to the
    # bare class name (the module is in __module__ only).
    name = "Tensor" if adopter[0] == "nanobind_adopter" else f"{adopter[0]}.Tensor"
    with pytest.raises(TypeError, match=f"exchange API of {name} exports {name} objects, not list"):
        FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(not_ours), ctypes.byref(ctypes.c_void_p()))
    with pytest.raises(TypeError, match=f"exchange API of {name} views {name} objects, not list"):
        VIEW_T(api.dltensor_from_py_object_no_sync)(id(not_ours), ctypes.byref(DLTensor()))


def test_the_tables_view_borrows_the_tensors_own_metadata(adopter):
    from dlpack_ref.testing import VIEW_T, DLTensor

    import ctypes
    import numpy as np
    c = _imported(adopter)
    t = c.from_dlpack(np.arange(12.0)[::3])
    refs = sys.getrefcount(t)
    view = DLTensor()
    assert VIEW_T(_table(c).dltensor_from_py_object_no_sync)(id(t), ctypes.byref(view)) == 0
    assert (view.data + view.byte_offset, view.ndim) == (t.data_ptr, 1)
    if adopter[0] == "pybind11_adopter":
        # pybind11 keeps the C++ object outside the Python object: the view
        # borrows from there, the same memory on every call.
        again = DLTensor()
        assert VIEW_T(_table(c).dltensor_from_py_object_no_sync)(id(t), ctypes.byref(again)) == 0
        assert (again.shape, again.strides) == (view.shape, view.strides)
    else:
        assert id(t) <= view.shape < view.strides < id(t) + sys.getsizeof(t)   # inside the object: no allocation
    assert tuple((ctypes.c_int64 * 1).from_address(view.strides)) == (3,) and sys.getrefcount(t) == refs


def _allocate(api, shape, dtype=(2, 32, 1), device=(1, 0), with_set_error=True):
    from dlpack_ref.testing import ALLOCATOR_T, SET_ERROR_T, DLTensor

    import ctypes
    shape_c = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    proto = DLTensor(data=None, ndim=len(shape), shape=ctypes.addressof(shape_c), strides=None)
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = dtype
    proto.device.device_type, proto.device.device_id = device
    out = ctypes.c_void_p(0)
    errors = []
    set_error = SET_ERROR_T(lambda ctx, kind, msg: errors.append((ctx, kind, msg))) if with_set_error else SET_ERROR_T()
    rc = ALLOCATOR_T(api.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(out), 77, set_error)
    return rc, out.value, errors


def test_allocate_fill_and_wrap_as_torch_and_tvm_do(adopter):
    """A kernel library's output: the allocator makes the tensor, the library
    fills it, managed_tensor_to_py_object_no_sync hands it over as a Tensor."""
    from dlpack_ref.testing import TO_PY_T, DLManagedTensorVersioned

    import ctypes
    import numpy as np
    c = _imported(adopter)
    api = _table(c)
    rc, address, errors = _allocate(api, (2, 3))
    assert (rc, errors) == (0, [])
    m = DLManagedTensorVersioned.from_address(address)
    t = m.dl_tensor
    assert (m.version.major, m.version.minor, m.flags, t.ndim, t.byte_offset) == (1, 3, 0, 2, 0)
    assert tuple((ctypes.c_int64 * 2).from_address(t.shape)) == (2, 3)
    assert tuple((ctypes.c_int64 * 2).from_address(t.strides)) == (3, 1)
    assert t.data % 256 == 0
    ctypes.memmove(t.data, np.arange(6, dtype=np.float32).tobytes(), 24)
    data = t.data
    obj = ctypes.c_void_p()
    assert TO_PY_T(api.managed_tensor_to_py_object_no_sync)(address, ctypes.byref(obj)) == 0
    x = ctypes.cast(obj, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.c_void_p(obj.value))
    assert type(x) is c.Tensor and x.data_ptr == data
    assert np.from_dlpack(x).tolist() == [[0, 1, 2], [3, 4, 5]]
    rc, address, _ = _allocate(api, (5,), dtype=(17, 4, 1))   # float4_e2m1fn: one element per byte
    m = DLManagedTensorVersioned.from_address(address)
    assert rc == 0 and m.flags == 4
    from dlpack_ref.testing import DELETER_T
    DELETER_T(m.deleter)(address)


@pytest.mark.parametrize("shape, dtype, device, kind, words", [
    ((4,), (2, 12, 1), (1, 0), b"BufferError", b"unsupported DLDataType(code=2, bits=12, lanes=1)"),
    ((4,), (2, 32, 1), (4, 0), b"BufferError", b"cannot allocate memory on device (4, 0)"),
    ((2, -1), (2, 32, 1), (1, 0), b"ValueError", b"negative dimension -1"),
])
def test_the_allocator_reports_through_set_error_not_python(adopter, shape, dtype, device, kind, words):
    c = _imported(adopter)
    rc, address, errors = _allocate(_table(c), shape, dtype, device)
    assert rc == -1 and address is None and len(errors) == 1
    assert errors[0][:2] == (77, kind) and words in errors[0][2]
    rc, address, _ = _allocate(_table(c), shape, dtype, device, with_set_error=False)   # SetError NULL
    assert rc == -1 and address is None


def test_to_py_object_checks_the_tensor_and_deletes_a_refused_one_once(adopter, factory):
    from dlpack_ref.testing import NAME_USED_VERSIONED, NAME_VERSIONED, TO_PY_T, c_api

    import ctypes
    import gc
    c = _imported(adopter)
    get = c_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
    rename = c_api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)

    def take(cap):
        address = get(cap, NAME_VERSIONED)
        rename(cap, NAME_USED_VERSIONED)
        return address

    to_py = TO_PY_T(_table(c).managed_tensor_to_py_object_no_sync)
    for make, error, words in [(dict(shape=(2,), dtype=(2, 12, 1)), BufferError, "unsupported DLDataType"),
                               (dict(shape=(2,), dtype=(2, 32, 1), device=(4, 0)), BufferError,
                                "holds host-accessible memory only")]:
        calls = factory.deleter_calls
        with pytest.raises(error, match=words):
            to_py(take(factory.make(**make)), ctypes.byref(ctypes.c_void_p()))
        gc.collect()
        assert factory.deleter_calls == calls + 1
    cap = factory.make(shape=(3,), dtype=(2, 32, 1), flags=1)
    obj = ctypes.c_void_p()
    assert to_py(take(cap), ctypes.byref(obj)) == 0
    x = ctypes.cast(obj, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.c_void_p(obj.value))
    assert x.data_ptr == factory.last_data and x.readonly and factory.deleter_calls == 2
    del x
    gc.collect()
    assert factory.deleter_calls == 3


def test_current_work_stream_is_null(adopter):
    from dlpack_ref.testing import STREAM_T

    import ctypes
    c = _imported(adopter)
    for device in [(1, 0), (2, 0)]:
        stream = ctypes.c_void_p(5)
        assert STREAM_T(_table(c).current_work_stream)(*device, ctypes.byref(stream)) == 0 and stream.value is None


def test_the_adopter_consumes_its_own_tensors_through_its_table(adopter):
    c = _imported(adopter)

    class NoDevice(c.Tensor):
        def __dlpack_device__(self):
            raise AssertionError("__dlpack__ path taken")

    import numpy as np
    t = c.make(2, 32, 1, (3,), np.arange(3, dtype=np.float32).tobytes(), 0, NoDevice)
    refs = sys.getrefcount(t)
    u = c.from_dlpack(t)
    assert u.data_ptr == t.data_ptr and sys.getrefcount(t) == refs + 1
    del u
    assert sys.getrefcount(t) == refs


def test_the_memoized_table_lookup_sees_a_later_change_to_the_type(adopter):
    """The consumer keeps the last type's table while the type's version tag
    is unchanged; a __dlpack__ override added later is honoured at once."""
    import numpy as np
    c = _imported(adopter)

    class Sub(c.Tensor):
        def __dlpack_device__(self):   # the table path never asks it
            raise AssertionError("__dlpack__ path taken")

    t = c.make(2, 32, 1, (2,), np.zeros(2, np.float32).tobytes(), 0, Sub)
    assert c.from_dlpack(t).data_ptr == t.data_ptr
    assert c.from_dlpack(t).data_ptr == t.data_ptr   # from the memo

    def refuse(self, **kwargs):
        raise BufferError("late override")

    Sub.__dlpack__ = refuse
    with pytest.raises(BufferError, match="late override"):
        c.from_dlpack(t)
    del Sub.__dlpack__
    assert c.from_dlpack(t).data_ptr == t.data_ptr


# The nanobind adopter binds __dlpack__ and from_dlpack the nanobind way:
# nanobind parses their arguments and words every mismatch so. (The pybind11
# one uses the header's fastcall entries, as the C and C++ ones do.)
BINDING_LIBRARY_WORDS = {"nanobind_adopter": "incompatible function arguments"}


def _refused_arguments(adopter, function: str, python_words: str) -> str:
    """The TypeError message (a pattern) of a call to `function` with wrong
    arguments: Python's (or Cython's) words, or the binding library's."""
    theirs = BINDING_LIBRARY_WORDS.get(adopter[0])
    return rf"{function}\(\): {theirs}" if theirs else rf"{function}\(\) {python_words}"


def test_the_vectorcall_entries_parse_their_arguments_as_python_does(adopter):
    import numpy as np
    c = _imported(adopter)
    t = _float32(c)
    key = "".join(["max_", "version"])   # a keyword that is not the interned string
    assert dlpack_ref.inspect(t.__dlpack__(**{key: (1, 3)}))["version"] == (1, 3)
    # The Cython adopter's def signature is parsed by Cython (as fast as the
    # header's vectorcall entry), in Cython's words for a positional argument.
    no_positional = "takes exactly 0 positional arguments" if adopter[0] == "cython_adopter" else \
        "takes no positional arguments"
    with pytest.raises(TypeError, match=_refused_arguments(adopter, "__dlpack__", rf"{no_positional} \(1 given\)")):
        t.__dlpack__(None)
    with pytest.raises(TypeError, match=_refused_arguments(adopter, "__dlpack__",
                                                           "got an unexpected keyword argument 'streams'")):
        t.__dlpack__(streams=None)
    with pytest.raises(TypeError, match=_refused_arguments(adopter, "from_dlpack",
                                                           r"takes exactly 1 positional argument \(2 given\)")):
        c.from_dlpack(np.zeros(2), None)
    with pytest.raises(TypeError, match=_refused_arguments(adopter, "from_dlpack",
                                                           r"takes exactly 1 positional argument \(0 given\)")):
        c.from_dlpack()
    with pytest.raises(TypeError, match=_refused_arguments(adopter, "from_dlpack",
                                                           "got an unexpected keyword argument 'devices'")):
        c.from_dlpack(np.zeros(2), devices=None)
    x = np.arange(3.0)
    with pytest.raises(TypeError):   # positional-only, in every binding
        c.from_dlpack(x=x)
    u = c.from_dlpack(x, **{"".join(["co", "py"]): True})
    assert u.data_ptr != x.ctypes.data and np.from_dlpack(u).tolist() == [0.0, 1.0, 2.0]


def test_the_import_refuses_non_producers_and_a_request_checks_the_device(adopter):
    import numpy as np
    c = _imported(adopter)

    class NoDevice:
        def __init__(self):
            self.x = np.zeros(2)

        def __dlpack__(self, **kwargs):
            return self.x.__dlpack__(**kwargs)

    class WrongDevice(NoDevice):
        def __dlpack_device__(self):
            return (2, 0)

    class Legacy(WrongDevice):
        def __dlpack__(self):
            return self.x.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="from_dlpack expects an object with __dlpack__ and __dlpack_device__"):
        c.from_dlpack(NoDevice())
    with pytest.raises(TypeError, match="not int"):
        c.from_dlpack(42)
    with pytest.raises(BufferError, match=r"says \(2, 0\) but its capsule's tensor is on \(1, 0\)"):
        c.from_dlpack(WrongDevice(), copy=True)     # the request was built on the announced device
    wrong = WrongDevice()
    assert c.from_dlpack(wrong).data_ptr == wrong.x.ctypes.data   # the plain request: the tensor's device
    legacy = Legacy()
    assert c.from_dlpack(legacy).data_ptr == legacy.x.ctypes.data


@pytest.mark.parametrize("cxx", [False, True], ids=["c99", "cxx17"])
def test_the_minimal_adopter_of_the_docs_compiles_and_exchanges(cxx, tmp_path):
    """docs/vendoring.md's minimal C adopter, exactly as printed, built from
    the vendored headers alone (-Wall -Wextra -Werror) and used."""
    import re

    docs = DOCS.read_text()
    section = docs[docs.index("## A minimal adopter in C"):docs.index("## An adopter in C++ on the CPython API")]
    source = re.search(r"```c\n(.*?)```", section, re.S).group(1)
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    for header in ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h"):
        shutil.copy(Path(dlpack_ref.get_include(), header), vendor / header)
    (tmp_path / ("minimal.cpp" if cxx else "minimal.c")).write_text(source)
    compile_c_extension(tmp_path / ("minimal.cpp" if cxx else "minimal.c"), tmp_path, c_include=[vendor], cxx=cxx)
    out = _run_blocked(("minimal", tmp_path), """
import numpy as np
x = np.arange(6.0).reshape(2, 3)[:, ::-1]
t = c.from_dlpack(x)
back = np.from_dlpack(t)
assert back.ctypes.data == x.ctypes.data and back.strides == x.strides and (back == x).all()
assert type(c.Tensor.__dict__["__dlpack_c_exchange_api__"]).__name__ == "PyCapsule"
u = c.from_dlpack(t)   # through its own table
assert np.from_dlpack(u).ctypes.data == x.ctypes.data
copied = np.from_dlpack(c.from_dlpack(x, copy=True))   # NumPy makes the copy itself
assert copied.ctypes.data != x.ctypes.data and (copied == x).all()
try:
    t.__dlpack__(max_version=(1, 3), copy=True)
except BufferError as e:
    assert "cannot be copied" in str(e), e
else:
    raise AssertionError("a copy was made")
print("ok")
""")
    assert out.strip() == "ok"


@pytest.mark.parametrize("section, source", [("## An adopter on pybind11", "pybind11_adopter.cpp"),
                                             ("## An adopter on nanobind", "nanobind_adopter.cpp")])
def test_the_docs_excerpts_are_the_shipped_code(section, source):
    """Each code block of the page's pybind11 and nanobind sections is a
    passage of the shipped source, line for line."""
    import re

    docs = DOCS.read_text()
    start = docs.index(section)
    text = docs[start:docs.index("\n## ", start + 1)]
    shipped = [line.rstrip() for line in Path(dlpack_ref.adopters.get_dir(), source).read_text().splitlines()]
    excerpts = re.findall(r"```cpp\n(.*?)```", text, re.S)
    assert len(excerpts) >= 3
    for excerpt in excerpts:
        lines = excerpt.rstrip("\n").splitlines()
        assert any(shipped[i:i + len(lines)] == lines for i in range(len(shipped))), excerpt
