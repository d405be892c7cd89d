"""A foreign exchange table that fails in every way a table can
(hostile_table.c), compiled with the C compiler Python was built with, and
a Python type that publishes it."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

import dlpack_ref
from dlpack_ref.testing import NAME_EXCHANGE_API, DLPackExchangeAPI, c_api

SOURCE = Path(__file__).resolve().parent / "hostile_table.c"

#: How each function fails (hostile_table.c), by name.
WORKS, SILENT_MINUS_ONE, ERROR_WITH_ZERO, ERROR_WITH_MINUS_ONE, SILENT_SEVEN, INTERRUPT_WITH_MINUS_ONE = range(6)
FAILURES = {"silent -1": SILENT_MINUS_ONE, "error with 0": ERROR_WITH_ZERO,
            "error with -1": ERROR_WITH_MINUS_ONE, "silent 7": SILENT_SEVEN}

_PyCapsule_New = c_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)


def build(folder: Path) -> ctypes.PyDLL:
    """The compiled table library (skips the test without a C compiler)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]})")
    so = folder / "hostile_table.so"
    subprocess.run([*cc, "-shared", "-fPIC", "-O1", "-Wall", "-I", sysconfig.get_paths()["include"],
                    "-I", dlpack_ref.get_include(), str(SOURCE), "-o", str(so)],
                   check=True, capture_output=True, text=True)
    lib = ctypes.PyDLL(str(so))
    lib.hostile_set.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 4
    lib.hostile_set.restype = None
    return lib


def table(lib: ctypes.PyDLL) -> DLPackExchangeAPI:
    api = DLPackExchangeAPI()
    api.header.version.major, api.header.version.minor = 1, 3
    for field, name in (("managed_tensor_allocator", "hostile_allocator"),
                        ("managed_tensor_from_py_object_no_sync", "hostile_from_py"),
                        ("managed_tensor_to_py_object_no_sync", "hostile_to_py"),
                        ("dltensor_from_py_object_no_sync", "hostile_view"),
                        ("current_work_stream", "hostile_stream")):
        setattr(api, field, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    return api


def publishing_type(api: DLPackExchangeAPI, dunder, device=(1, 0), name="Hostile"):
    """A producer type whose __dlpack_c_exchange_api__ is `api` (kept alive
    by the type) and whose __dlpack__ is `dunder`."""
    cap = _PyCapsule_New(ctypes.addressof(api), NAME_EXCHANGE_API, None)
    return type(name, (), {"__dlpack_c_exchange_api__": cap, "_table": api, "__dlpack__": dunder,
                           "__dlpack_device__": lambda self: device})


class FreshTable:
    """A descriptor handing out a new capsule, owning a new table, on every
    access of ``__dlpack_c_exchange_api__`` (hostile_table.c's
    hostile_fresh_table; its destructor poisons the table)."""

    def __init__(self, lib: ctypes.PyDLL):
        self.make = lib.hostile_fresh_table
        self.make.restype = ctypes.py_object
        self.make.argtypes = []

    def __get__(self, obj, owner=None):
        return self.make()


def fresh_counts(lib: ctypes.PyDLL) -> tuple[int, int, int]:
    """(capsules made, capsules released, tensors exported through them)."""
    lib.hostile_fresh_counts.restype = ctypes.py_object
    return lib.hostile_fresh_counts()


def fresh_table_type(lib: ctypes.PyDLL, source, device=(1, 0)):
    """A producer type whose ``__dlpack_c_exchange_api__`` is a FreshTable
    and whose ``__dlpack__`` / table export ``source`` (a NumPy array)."""
    return type("FreshProducer", (), {
        "__dlpack_c_exchange_api__": FreshTable(lib),
        "__dlpack__": lambda self, **kw: source.__dlpack__(**kw),
        "__dlpack_device__": lambda self: device})
