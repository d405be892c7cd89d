"""The C exchange API (DLPack 1.3): a type's ``__dlpack_c_exchange_api__``
table, called through ctypes, and its equivalence with ``__dlpack__``."""

from __future__ import annotations

import contextlib
import ctypes

import dlpack_ref as dr
from dlpack_ref.harness.observe import exc_name, same_values, short
from dlpack_ref.harness.subject import NotSupported, data_pointer, export_any, first_element
from dlpack_ref.testing.abi import (
    ALLOCATOR_T, DELETER_T, DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor, FROM_PY_T, NAME_VERSIONED,
    PyCapsule_New, PyErr_Occurred, Py_DecRef, SET_ERROR_T, STREAM_T, TO_PY_T, VIEW_T, exchange_api_of,
)
from dlpack_ref.testing.reader import read_capsule, read_values

from ..breaking.producers import Wrapped, publishing, wrapping
from ..producer_cases import readable, shaped
from ..support import CheckFailed, must_succeed
from ..table import breaks, rule


def call_deleter(address: int) -> None:
    """The deleter of the DLManagedTensorVersioned at ``address``, if it has one."""
    m = DLManagedTensorVersioned.from_address(address)
    if m.deleter:
        DELETER_T(m.deleter)(address)


@contextlib.contextmanager
def freed_on_failure(out: ctypes.c_void_p):
    """A table call that fails may still have handed out a tensor through
    ``out`` (the contract leaves it to the caller): its deleter runs once,
    here, so that a failing table is reported without a leak."""
    try:
        yield
    except BaseException:
        if out.value:
            call_deleter(out.value)
            out.value = None
        raise


def table_call(what: str, fn) -> None:
    """A call into an exchange table that must work: an exception it sets
    (ctypes raises it) or a nonzero status without one fails the check."""
    status = must_succeed(what, fn)
    if status != 0:
        raise CheckFailed(f"{what} returned {status} without setting an exception")


def table_of(x) -> DLPackExchangeAPI:
    """The exchange table of x's type, version major 1."""
    try:
        api = exchange_api_of(type(x))
    except TypeError as e:
        raise CheckFailed(str(e)) from e
    if api is None:
        raise NotSupported(f"{type(x).__name__} has no __dlpack_c_exchange_api__")
    version = (api.header.version.major, api.header.version.minor)
    if version[0] != 1:
        raise NotSupported(f"table version {version}; this checker reads major 1")
    return api


def allocator_works(api: DLPackExchangeAPI) -> str:
    """The pass note of a table's managed_tensor_allocator, asked for a float32 (2, 3) CPU tensor."""
    errors = []
    shape = (ctypes.c_int64 * 2)(2, 3)
    proto = DLTensor()
    proto.device.device_type, proto.ndim, proto.shape = 1, 2, ctypes.addressof(shape)
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
    alloc = ctypes.c_void_p()
    set_error = SET_ERROR_T(lambda ctx, kind, msg: errors.append((kind, msg)))
    try:
        rc = ALLOCATOR_T(api.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(alloc), None, set_error)
        # PyErr_Occurred is called through PYFUNCTYPE, which raises an
        # exception the C call left set (the allocator is called like C)
        PyErr_Occurred()
    except Exception as e:
        # ctypes' SystemError names the stray exception as its cause
        raise CheckFailed("managed_tensor_allocator (required) set a Python exception instead of "
                          "working or calling SetError", e.__cause__ or e) from e
    if rc != 0 or not alloc.value:
        raise CheckFailed(f"managed_tensor_allocator failed (rc={rc}, errors={errors})")
    m = DLManagedTensorVersioned.from_address(alloc.value)
    got = (m.dl_tensor.ndim, tuple(ctypes.cast(m.dl_tensor.shape, ctypes.POINTER(ctypes.c_int64))[:2]),
           (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits))
    call_deleter(alloc.value)
    if got != (2, (2, 3), (2, 32)):
        raise CheckFailed(f"managed_tensor_allocator made (ndim, shape, dtype)={got}")
    return "allocator ok"


@rule(side="producer", source="exchange-api", where="DLPackExchangeAPI, DLPackExchangeAPIHeader")
def exchange_api(p) -> str:
    """type(x).__dlpack_c_exchange_api__, when present: a 'dlpack_exchange_api' capsule, version major 1, every
    required function non-NULL, and a round trip through it keeps the data pointer and values"""
    x, shape = shaped(p, "float64", (2, 3))
    api = table_of(x)
    version = (api.header.version.major, api.header.version.minor)
    missing = [f for f, _ in DLPackExchangeAPI._fields_[1:]
               if f != "dltensor_from_py_object_no_sync" and not getattr(api, f)]
    if missing:
        raise CheckFailed(f"NULL function pointers in a version {version} table: {', '.join(missing)}")
    p.twice("comparing the table's export with __dlpack__")
    plain = export_any(x)
    want_ptr, want_values = first_element(read_capsule(plain)), readable("the export", plain)
    out = ctypes.c_void_p()
    with freed_on_failure(out):
        table_call("managed_tensor_from_py_object_no_sync",
                   lambda: FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(x), ctypes.byref(out)))
    m = DLManagedTensorVersioned.from_address(out.value)
    t = m.dl_tensor
    got = (m.version.major, t.data + t.byte_offset, t.ndim)
    if got != (1, want_ptr, len(shape)):
        call_deleter(out.value)
        raise CheckFailed(f"from_py_object gave (major, data, ndim)={got}, expected (1, {want_ptr:#x}, "
                          f"{len(shape)})")
    obj = ctypes.c_void_p()
    table_call("managed_tensor_to_py_object_no_sync",
               lambda: TO_PY_T(api.managed_tensor_to_py_object_no_sync)(out.value, ctypes.byref(obj)))
    back = ctypes.cast(obj, ctypes.py_object).value
    Py_DecRef(obj.value)
    if data_pointer(back) != want_ptr or not same_values(read_values(export_any(back)), want_values):
        raise CheckFailed(f"to_py_object gave a {type(back).__name__} with other data or values")
    notes = [f"version {version}", f"round trip to {type(back).__name__} in place"]
    del back
    if api.dltensor_from_py_object_no_sync:
        view = DLTensor()
        table_call("dltensor_from_py_object_no_sync",
                   lambda: VIEW_T(api.dltensor_from_py_object_no_sync)(id(x), ctypes.byref(view)))
        if view.data + view.byte_offset != want_ptr:
            raise CheckFailed("dltensor_from_py_object_no_sync: another data pointer")
        notes.append("DLTensor view in place")
    stream = ctypes.c_void_p(1)
    table_call("current_work_stream(kDLCPU, 0)",
               lambda: STREAM_T(api.current_work_stream)(1, 0, ctypes.byref(stream)))
    if stream.value == 1:
        raise CheckFailed("current_work_stream(kDLCPU, 0) returned without storing a stream: "
                          "*out_current_stream still holds the 0x1 the checker put there, expected NULL")
    if stream.value:
        raise CheckFailed(f"current_work_stream(kDLCPU, 0) gave {stream.value:#x}, expected NULL")
    notes.append(allocator_works(api))
    return "; ".join(notes)


def stores_no_stream(device_type, device_id, out):
    """A current_work_stream that succeeds without storing a stream."""
    return 0  # success, *out left as it was


@breaks(exchange_api, shows="returned without storing a stream",
        subject=lambda cls: wrapping(publishing(cls, current_work_stream=STREAM_T(stores_no_stream))))
class StreamlessTable(Wrapped):
    """Its type's exchange table: current_work_stream succeeds without storing a stream."""


def export_outcome(export) -> tuple[str, object]:
    """("values", the values read) or ("refused", the exception's type name)."""
    try:
        capsule = export()
    except Exception as e:
        return "refused", exc_name(e)
    try:
        return "values", read_values(capsule)
    except Exception as e:
        return "unreadable", f"{exc_name(e)}: {short(e, 80)}"


def export_through_table(api: DLPackExchangeAPI, x):
    """What managed_tensor_from_py_object_no_sync gives for x, in a capsule
    (its deleter runs when the capsule goes)."""
    out = ctypes.c_void_p()
    with freed_on_failure(out):
        status = FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(x), ctypes.byref(out))
        if status != 0 and out.value:
            raise SystemError(f"managed_tensor_from_py_object_no_sync returned {status} without setting an "
                              "exception, and handed out a tensor")
    if status != 0 or not out.value:
        # Not the header's failure (that sets an exception, which ctypes raised).
        raise SystemError(f"managed_tensor_from_py_object_no_sync returned {status} and tensor "
                          f"{out.value or 0:#x} without setting an exception")
    return PyCapsule_New(out.value, NAME_VERSIONED, None)


@rule(side="producer", source="exchange-api",
      where="DLPackExchangeAPI: 'exchanges tensors ... without going through __dlpack__'")
def exchange_api_matches_dlpack(p) -> str:
    """for every array and view, the exchange-API table's managed_tensor_from_py_object_no_sync and __dlpack__ give the
    same values or the same refusal (the table is a fast path, not another meaning)"""
    x, shape = shaped(p, "float64", (2, 3))
    cases = {f"float64 {shape}": x}
    table_of(x)
    p.twice("comparing the table's export with __dlpack__")
    cases.update(p.views() if p.views is not None else {})
    cases.update(p.unexportable() if p.unexportable is not None else {})
    notes, bad, unread = [], [], []
    for label, v in cases.items():
        if type(v) is not type(x) and exchange_api_of(type(v)) is None:
            continue
        plain = export_outcome(lambda: export_any(v))
        table = export_outcome(lambda: export_through_table(exchange_api_of(type(v)), v))
        blind = [what for kind, what in (plain, table) if kind == "unreadable"]
        if blind:  # the checker's reader failed, not the library: nothing to compare
            unread.append(f"{label}: not compared, the checker cannot read {blind[0]}")
        elif plain == table:
            notes.append(f"{label}: same {plain[0]}")
        else:
            bad.append(f"{label}: __dlpack__ {plain[0]} {plain[1]!r}, the table {table[0]} {table[1]!r}")
    if bad:
        raise CheckFailed("; ".join(bad))
    if unread and not notes:
        raise NotSupported("; ".join(unread))
    return "; ".join(notes + unread)


@breaks(exchange_api_matches_dlpack, shows="offset x[1:]: __dlpack__ refused 'BufferError', the table values [1.0, 2.0",
        subject=lambda cls: wrapping(publishing(cls)))
class ViewsThroughTableOnly(Wrapped):
    """__dlpack__ refuses views with BufferError (the table exports them)."""

    def __dlpack__(self, **kwargs):
        if isinstance(self._a.base, dr.Array):
            raise BufferError("views are exported through the C exchange API only")
        return self._a.__dlpack__(**kwargs)
