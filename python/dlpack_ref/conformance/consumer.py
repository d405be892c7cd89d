"""Consumer checks: what any ``from_dlpack`` must do with good and bad input.

Every case hands the consumer a capsule or a producer built with
:mod:`dlpack_ref.testing` (so every field, and the deleter count, is under
control), and is judged by its own small function. The runner
(:mod:`.runner`) runs each case in a child process, so that a crash is
reported with its signal instead of ending the run.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import struct
from typing import Any, Callable

from dlpack_ref.testing import (
    FLAG_IS_COPIED, FLAG_READ_ONLY, NAME_USED_VERSIONED, CapsuleFactory, ForeignProducer, capsule_name, read_capsule,
)

from .model import Consumer, Result, Rule, Status, exc_name, short

BOGUS_DEVICE_POINTER = 0xDEAD0000


# --- the catalogue: each case runs in the child and returns an outcome dict ---------

F64 = (2, 64, 1)


def _f64(values) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def _attempt(c: Consumer, obj, *, read_values=True, **kwargs) -> dict:
    try:
        r = c.take(obj, **kwargs)
    except Exception as e:
        # a TypeError of the consumer's own signature refusing the keyword,
        # not one of the producer (whose messages name __dlpack__) passed along
        refused_keyword = (isinstance(e, TypeError) and kwargs and "keyword" in str(e)
                           and "__dlpack__" not in str(e))
        return {"outcome": "keyword" if refused_keyword else "raised", "exc_type": exc_name(e),
                "exc_message": short(e), "exc_mro": [k.__name__ for k in type(e).__mro__]}
    out = {"outcome": "ok", "type": type(r).__name__}
    try:
        dev = r.__dlpack_device__()
        out["device"] = [int(dev[0]), int(dev[1])]
    except Exception:
        out["device"] = None
    if read_values:
        for key, fn in (("values", c.values), ("ptr", c.pointer), ("readonly", c.is_readonly)):
            try:
                out[key] = fn(r)
            except Exception as e:
                out[key + "_error"] = f"{exc_name(e)}: {short(e, 150)}"
    out["_result"] = r  # dropped by the runner before counting deleters
    return out


class _KeepingProducer(ForeignProducer):
    """A ForeignProducer that remembers the capsule it handed out (to read
    its name after the import). Capsules follow what the consumer asks for
    (versioned for max_version >= (1, 0)) unless ``versioned=`` is given."""

    capsule = None
    name_before = None

    def __init__(self, factory, *, elements=(), **kwargs):
        super().__init__(factory, **kwargs)
        # float64 values of a 1-D tensor written along its strides (the
        # factory's fill runs forward from the first element only)
        self.elements = elements

    def __dlpack__(self, **kwargs):
        self.capsule = super().__dlpack__(**kwargs)
        self.name_before = capsule_name(self.capsule)
        if self.elements:
            info = read_capsule(self.capsule)
            first, step = info["data"] + info["byte_offset"], info["strides"][0] * 8
            for i, value in enumerate(self.elements):
                ctypes.c_double.from_address(first + i * step).value = value
        return self.capsule


def _calls(p) -> list:
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in call.items()} for call in p.calls]


def _plain(**make):
    def run(c, f):
        kwargs = dict(make)
        p = _KeepingProducer(f, device=kwargs.pop("device", (1, 0)), **kwargs)
        out = _attempt(c, p, read_values=kwargs.get("data", "alloc") == "alloc")
        out["calls"] = _calls(p)
        if p.capsule is not None:
            name = capsule_name(p.capsule)
            out["name_after"] = name.decode() if name else None
            out["name_before"] = p.name_before.decode() if p.name_before else None
        return out
    run.setup = {"producer": make, "keep": True}
    return run


def _via_producer(read_values=True, call_kwargs=None, **producer_kwargs):
    def run(c, f):
        kwargs = call_kwargs(c) if callable(call_kwargs) else (call_kwargs or {})
        if kwargs is None:
            return {"outcome": "keyword", "exc_type": None, "exc_message": None}
        p = ForeignProducer(f, **producer_kwargs)
        out = _attempt(c, p, read_values=read_values, **kwargs)
        out["call_kwargs"] = {k: v for k, v in kwargs.items() if k == "copy"}
        out["calls"] = _calls(p)
        out["source_ptr"] = f.last_data
        return out
    run.setup = {"producer": producer_kwargs, "call": call_kwargs, "read_values": read_values}
    return run


def _in_place_or_why(**producer_kwargs):
    """The import, and when the consumer copied, whether it can import in
    place at all: ``from_dlpack(x, copy=False)`` of the same producer (a
    consumer that cannot share host memory refuses it, as the standard
    says, and then copying is its only way)."""
    first = _via_producer(**producer_kwargs)

    def run(c, f):
        out = first(c, f)
        if out.get("outcome") == "ok" and out.get("ptr") != out.get("source_ptr"):
            # a factory of its own: this case counts the first import's deleter only
            out["copy_false"] = _via_producer(read_values=False, call_kwargs={"copy": False},
                                              **producer_kwargs)(c, CapsuleFactory())
            out["copy_false"].pop("_result", None)
        return out
    run.setup = first.setup
    return run


def _cpu_device_kwargs(c: Consumer):
    return None if c.cpu_device is None else {"device": c.cpu_device}


def _twice(c, f):
    p = _KeepingProducer(f, shape=(3,), dtype=F64, fill=_f64([1, 2, 3]))
    first = _attempt(c, p)
    cap = p.capsule
    name = capsule_name(cap) if cap is not None else None
    second = _attempt(c, ForeignProducer(f, returns=cap)) if cap is not None else {"outcome": "none"}
    second.pop("_result", None)
    return {"outcome": first["outcome"], "name_after": name.decode() if name else None, "second": second,
            "exc_type": second.get("exc_type"), "exc_message": second.get("exc_message"),
            "_result": first.get("_result")}


_twice.setup = {"producer": {"shape": (3,), "dtype": F64, "fill": _f64([1, 2, 3])}, "keep": True, "twice": True}


# --- judging: one function per kind of case --------------------------------------
# Each takes the case, its outcome and the problems found so far (the deleter
# count) and returns a status (None: pass unless there are problems) and notes.


def _refused(out) -> bool:
    return out.get("outcome") != "ok"


def _is_buffererror(out) -> bool:
    return "BufferError" in out.get("exc_mro", [])


def _values_problems(case, out, problems) -> None:
    if case.want is not None and "values" in out and out["values"] != case.want:
        problems.append(f"values {out['values']!r}, expected {case.want!r}")
    if "values_error" in out:
        problems.append(f"values unreadable ({out['values_error']})")


def _accepts(case, out, problems):
    if _refused(out):
        return Status.FAIL, ["refused"]
    _values_problems(case, out, problems)
    notes = ["accepted" if problems else "accepted with the right values"]
    if out.get("deleters_during"):
        notes.append("data copied and released at once")
    return None, notes


def _cannot_share(out) -> bool:
    """A refusal of copy=False with the standard's errors for a copy that
    would be needed: ValueError (from_dlpack) or BufferError (__dlpack__)."""
    mro = out.get("exc_mro", [])
    return _refused(out) and ("ValueError" in mro or "BufferError" in mro)


def _accepts_in_place(case, out, problems):
    if _refused(out):
        if out.get("call_kwargs") == {"copy": False} and _cannot_share(out):
            return Status.NOT_SUPPORTED, [f"copy=False refused with {out.get('exc_type')}: the consumer cannot "
                                          "import this memory in place, and says so as the standard asks"]
        return Status.FAIL, ["refused"]
    _values_problems(case, out, problems)
    if out.get("ptr") != out.get("source_ptr"):
        no_copy = out.get("copy_false")
        if no_copy is not None and _cannot_share(no_copy):
            why = (f"copied: the consumer cannot import this memory in place (copy=False refused with "
                   f"{no_copy.get('exc_type')}: {no_copy.get('exc_message')})")
            return (Status.FAIL if problems else Status.NOT_SUPPORTED), [why]
        problems.append(f"copied (pointer {out.get('ptr')} != source {out.get('source_ptr')})")
        return None, []
    if out.get("deleters_during"):
        problems.append("deleter ran while the result still used the data")
    return None, ["in place"]


def _copies(case, out, problems):
    if _refused(out):
        if _is_buffererror(out):
            return Status.NOT_SUPPORTED, ["copy=True refused with BufferError"]
        return Status.FAIL, ["refused"]
    _values_problems(case, out, problems)
    if out.get("ptr") == out.get("source_ptr"):
        problems.append("copy=True imported in place (same pointer)")
        return None, []
    calls = out.get("calls") or [{}]
    return None, [f"copied; last __dlpack__ call {calls[-1]}"]


def _asks_max_version(case, out, problems):
    if _refused(out):
        return Status.FAIL, ["refused"]
    first = (out.get("calls") or [{}])[0]
    if not first.get("max_version") or first["max_version"][0] < 1:
        problems.append(f"first __dlpack__ call had {first}, no max_version >= (1, 0)")
        return None, []
    return None, [f"__dlpack__ called with {first}"]


def _falls_back_to_legacy(case, out, problems):
    if _refused(out):
        return Status.FAIL, ["refused"]
    _values_problems(case, out, problems)
    calls = out.get("calls", [])
    if not calls or "max_version" in calls[-1]:
        problems.append("no call without max_version after the TypeError")
    return None, [f"__dlpack__ calls {calls}"]


def _renames(case, out, problems):
    if _refused(out):
        return Status.FAIL, ["refused"]
    want = "used_" + (out.get("name_before") or "?")
    if out.get("name_after") != want:
        problems.append(f"capsule named {out.get('name_after')!r} after import, expected {want!r}")
        return None, []
    return None, [f"renamed {want!r}"]


def _refuses_second_import(case, out, problems):
    second = out.get("second", {})
    if _refused(out):
        problems.append("the first import failed")
    if second.get("outcome") == "ok":
        problems.append("the same capsule was imported twice")
        return None, []
    return None, [f"second import refused with {second.get('exc_type')}"]


def _keeps_read_only(case, out, problems):
    if _refused(out):
        if _is_buffererror(out):
            return None, ["refused with BufferError"]
        return Status.FAIL, ["refused"]
    _values_problems(case, out, problems)
    ro = out.get("readonly")
    if ro is None:
        return Status.NOT_SUPPORTED, ["cannot tell whether the result is read-only"]
    if ro is False:
        problems.append("imported READ_ONLY data as a writable array")
        return None, []
    return None, ["read-only array"]


def _accepts_or_refuses(case, out, problems):
    if _refused(out):
        return None, [f"refused with {out.get('exc_type')}"]
    _values_problems(case, out, problems)
    return None, ["accepted"]


def _refuses(case, out, problems):
    if not _refused(out):
        problems.append(f"accepted (result {out.get('type')} on {out.get('device')})")
        return None, []
    return None, [f"refused with {out.get('exc_type')}"]


def _refuses_with_buffererror(case, out, problems):
    if _refused(out) and not _is_buffererror(out):
        problems.append(f"refused with {out.get('exc_type')}, not BufferError")
        return None, []
    return _refuses(case, out, problems)


def _refuses_copy(case, out, problems):
    """copy=False and a tensor flagged IS_COPIED: the standard's two errors
    for a forbidden copy (BufferError from __dlpack__, ValueError from
    from_dlpack) are both right."""
    if not _refused(out):
        problems.append(f"accepted a tensor flagged IS_COPIED for copy=False (result {out.get('type')})")
        return None, []
    mro = out.get("exc_mro", [])
    if "BufferError" not in mro and "ValueError" not in mro:
        problems.append(f"refused with {out.get('exc_type')}, not BufferError or ValueError")
        return None, []
    return None, [f"refused with {out.get('exc_type')}"]


def _refuses_device(case, out, problems):
    if not _refused(out) and out.get("device") and out["device"][0] != 1:
        return None, [f"kept as a device array on {tuple(out['device'])}, not read"]
    return _refuses_with_buffererror(case, out, problems)


@dataclasses.dataclass(frozen=True)
class Case:
    rule: Rule
    run: Callable  # (Consumer, CapsuleFactory) -> outcome dict
    judge: Callable  # (Case, outcome, problems) -> (Status | None, notes)
    want: Any = None
    deleters: int = 1
    needs_versioned: bool = False
    asks_producer: bool = False  # the point is how from_dlpack calls __dlpack__
    about_dtype: bool = False  # the point is the element type, which a byte buffer does not have


def _case(cid, text, source, where, run, judge, want=None, deleters=1, needs_versioned=False,
          asks_producer=False, about_dtype=False):
    return Case(Rule("consumer." + cid, text, source, where), run, judge, want, deleters, needs_versioned,
                asks_producer, about_dtype)


_V123 = [1.0, 2.0, 3.0]
CASES: list[Case] = [
    _case("zero_copy_import", "a valid versioned capsule is imported in place with its values", "array-api",
          "from_dlpack", _in_place_or_why(shape=(3,), dtype=F64, fill=_f64(_V123)), _accepts_in_place, _V123),
    _case("max_version_passed", "from_dlpack calls __dlpack__(max_version=(1, m)) to ask for a versioned capsule",
          "array-api", "from_dlpack: 'consumers ... must pass max_version'",
          _via_producer(shape=(3,), dtype=F64, fill=_f64(_V123)), _asks_max_version, asks_producer=True),
    _case("legacy_fallback", "a producer rejecting max_version (TypeError) is asked again without it",
          "python", "Python spec: fallback for pre-1.0 producers",
          _via_producer(legacy_only=True, shape=(3,), dtype=F64, fill=_f64(_V123)), _falls_back_to_legacy, _V123,
          asks_producer=True),
    _case("capsule_renamed", "a consumed capsule is renamed 'used_dltensor_versioned' / 'used_dltensor'",
          "python", "Python spec: capsule renaming", _plain(shape=(3,), dtype=F64, fill=_f64(_V123)), _renames),
    _case("consumed_twice", "a capsule is consumed once; handing it over again is refused", "python",
          "Python spec: a capsule is consumed exactly once", _twice, _refuses_second_import),
    _case("byte_offset", "byte_offset is honoured (data + byte_offset is the first element)", "header",
          "DLTensor.byte_offset", _plain(shape=(3,), dtype=F64, byte_offset=8, fill=_f64(_V123)), _accepts, _V123),
    _case("negative_strides", "a negative stride (a reversed view) is honoured: the values are read backwards "
          "from the first element, or the tensor is refused", "header", "DLTensor.strides (in elements, signed)",
          _plain(shape=(3,), dtype=F64, strides=(-1,), elements=_V123), _accepts_or_refuses, _V123),
    _case("null_strides_v1_1", "NULL strides in a version 1.1 capsule mean row-major", "header",
          "DLTensor.strides (NULL = row-major before 1.2)",
          _plain(shape=(2, 2), dtype=F64, version=(1, 1), strides="null", fill=_f64([1, 2, 3, 4]),
                 versioned=True), _accepts, [[1.0, 2.0], [3.0, 4.0]], needs_versioned=True),
    _case("null_strides_legacy", "NULL strides in a legacy capsule (of a pre-1.0 producer) mean row-major",
          "header", "DLTensor.strides (NULL = row-major before 1.2)",
          _plain(shape=(2, 2), dtype=F64, legacy_only=True, strides="null", fill=_f64([1, 2, 3, 4])),
          _accepts, [[1.0, 2.0], [3.0, 4.0]]),
    _case("legacy_answer", "a legacy 'dltensor' capsule answering a max_version request (from a producer "
          "without DLPack 1.x) is imported", "python",
          "Python spec: __dlpack__ max_version (a producer may return a capsule of an older version)",
          _plain(shape=(3,), dtype=F64, versioned=False, fill=_f64(_V123)), _accepts, _V123, needs_versioned=True),
    _case("null_strides_v1_3", "NULL strides in a version 1.3 capsule (forbidden since 1.2) are refused or "
          "read as row-major", "header", "DLTensor.strides (non-NULL required since 1.2)",
          _plain(shape=(2, 2), dtype=F64, strides="null", fill=_f64([1, 2, 3, 4]), versioned=True),
          _accepts_or_refuses, [[1.0, 2.0], [3.0, 4.0]], needs_versioned=True),
    _case("minor_version_newer", "a capsule of version 1.99 (newer minor) is usable or refused cleanly",
          "header", "DLPackVersion: minor changes keep the ABI",
          _plain(shape=(3,), dtype=F64, version=(1, 99), fill=_f64(_V123), versioned=True), _accepts_or_refuses,
          _V123, needs_versioned=True),
    _case("read_only", "READ_ONLY data gives a read-only array or is refused (never a writable one)",
          "header", "DLPACK_FLAG_BITMASK_READ_ONLY",
          _plain(shape=(3,), dtype=F64, flags=FLAG_READ_ONLY, fill=_f64(_V123), versioned=True), _keeps_read_only,
          _V123, needs_versioned=True),
    _case("null_deleter", "a NULL deleter is allowed (nothing to call)", "header",
          "DLManagedTensorVersioned.deleter 'can be NULL'",
          _plain(shape=(3,), dtype=F64, deleter=False, fill=_f64(_V123)), _accepts, _V123, deleters=0),
    _case("size_zero_null_data", "a size-0 tensor with NULL data is accepted", "header", "DLTensor.data",
          _plain(shape=(0, 3), dtype=F64, data=None), _accepts_or_refuses),
    _case("copy_true", "from_dlpack(x, copy=True) returns a copy (another pointer, same values), also from "
          "a pre-1.0 producer that cannot copy", "array-api", "from_dlpack, copy: 'must always copy'",
          _via_producer(legacy_only=True, call_kwargs={"copy": True}, shape=(3,), dtype=F64,
                        fill=_f64(_V123)), _copies, _V123),
    _case("copy_false", "from_dlpack(x, copy=False) imports in place", "array-api", "from_dlpack, copy",
          _via_producer(call_kwargs={"copy": False}, shape=(3,), dtype=F64, fill=_f64(_V123)),
          _accepts_in_place, _V123),
    _case("copy_false_is_copied", "from_dlpack(x, copy=False) refuses (BufferError or ValueError) a tensor "
          "flagged IS_COPIED, which a producer that copied anyway returns, and calls its deleter once",
          "array-api", "from_dlpack, copy: 'must never copy'; header, DLPACK_FLAG_BITMASK_IS_COPIED",
          _via_producer(read_values=False, call_kwargs={"copy": False}, shape=(3,), dtype=F64,
                        flags=FLAG_IS_COPIED, fill=_f64(_V123), versioned=True),
          _refuses_copy, needs_versioned=True),
    _case("device_cpu", "from_dlpack(x, device=<CPU>) of CPU data imports in place", "array-api",
          "from_dlpack, device", _via_producer(call_kwargs=_cpu_device_kwargs, shape=(3,), dtype=F64,
                                               fill=_f64(_V123)), _accepts_in_place, _V123),
    _case("producer_buffererror", "a BufferError from __dlpack__ reaches the caller as BufferError",
          "array-api", "from_dlpack, Raises", _via_producer(raises=BufferError("cannot export (test)")),
          _refuses_with_buffererror, deleters=0, asks_producer=True),
    _case("producer_returns_non_capsule", "__dlpack__ returning a non-capsule is refused, no crash",
          "python", "Python spec: __dlpack__ returns a PyCapsule", _via_producer(returns=42), _refuses,
          deleters=0),
    # the malformed capsules
    _case("bad_name", "a capsule with another name is refused", "python", "Python spec: capsule names",
          _plain(name=b"not_a_dltensor"), _refuses),
    _case("used_name", "a capsule already named 'used_dltensor_versioned' is refused", "python",
          "Python spec: capsule renaming", _plain(name=NAME_USED_VERSIONED), _refuses),
    _case("major_version_2", "version.major 2 is refused and the deleter called", "header",
          "DLPackVersion: 'the consumer must call the deleter'", _plain(version=(2, 0), versioned=True),
          _refuses, needs_versioned=True),
    _case("ndim_negative", "ndim -1 is refused", "header", "DLTensor.ndim", _plain(ndim=-1), _refuses),
    _case("shape_negative", "a negative extent is refused", "header", "DLTensor.shape",
          _plain(shape=(2, -3)), _refuses),
    _case("shape_null", "a NULL shape with ndim > 0 is refused", "header", "DLTensor.shape",
          _plain(shape_null=True), _refuses),
    _case("data_null", "NULL data for a non-empty tensor is refused, never dereferenced", "header",
          "DLTensor.data", _plain(data=None), _refuses),
    _case("extent_overflow", "a shape whose size overflows int64 is refused", "header", "DLTensor.shape",
          _plain(shape=(2 ** 62, 8)), _refuses),
    _case("dtype_unknown_code", "an unknown dtype code (99) is refused with BufferError", "array-api",
          "from_dlpack, Raises: BufferError (incompatible dtype)", _plain(dtype=(99, 32, 1)), _refuses_with_buffererror,
          about_dtype=True),
    _case("dtype_bad_bits", "float with 24 bits is refused with BufferError", "array-api",
          "from_dlpack, Raises: BufferError (incompatible dtype)", _plain(dtype=(2, 24, 1)), _refuses_with_buffererror,
          about_dtype=True),
    _case("dtype_lanes", "float32 with lanes=4 is refused with BufferError (or read as a vector type)",
          "array-api", "from_dlpack, Raises: BufferError (incompatible dtype)", _plain(dtype=(2, 32, 4)),
          _refuses_with_buffererror, about_dtype=True),
    _case("device_opencl", "an OpenCL tensor (bogus pointer) is refused with BufferError, never read",
          "array-api", "from_dlpack, Raises: BufferError (incompatible device)",
          _plain(device=(4, 0), data=BOGUS_DEVICE_POINTER), _refuses_device),
    _case("device_cuda_unreachable", "a CUDA tensor (bogus pointer) the consumer cannot reach is refused "
          "with BufferError (or kept as a device array), never read", "array-api",
          "from_dlpack, Raises: BufferError (incompatible device)",
          _plain(device=(2, 0), data=BOGUS_DEVICE_POINTER), _refuses_device),
]
RULES = {case.rule.id: case.rule for case in CASES}


def _request(kwargs: dict) -> str:
    return "__dlpack__(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def run_case(c: Consumer, case: Case) -> Result:
    """Run one case (in the child the runner made), count the deleters after
    every object of it is gone, and judge it."""
    if case.asks_producer and c.capsule_request is not None:
        return Result(case.rule, Status.NOT_SUPPORTED, "from_dlpack takes a capsule, not an object with "
                      f"__dlpack__, so it never calls __dlpack__ (its users call {_request(c.capsule_request)})",
                      subject=c.name)
    if case.about_dtype and c.shapeless:
        return Result(case.rule, Status.NOT_SUPPORTED, "the results are byte buffers without a dtype: any "
                      "element type is bytes to this consumer", subject=c.name)
    if case.want is not None:
        case = dataclasses.replace(case, want=c.expected(case.want, "float64"))
    f = CapsuleFactory()
    try:
        out = case.run(c, f)
    except Exception as e:
        return Result(case.rule, Status.ERROR, "the case could not run", exc_name(e), short(e), subject=c.name)
    out["made"] = f.last_id != 0
    out["deleters_during"] = f.deleter_calls
    out.pop("_result", None)
    gc.collect()
    out["deleters"] = f.deleter_calls
    status, detail = judge(case, out)
    return Result(case.rule, status, detail, out.get("exc_type"), out.get("exc_message"), subject=c.name)


def judge(case: Case, out: dict) -> tuple[Status, str]:
    """The status and detail of one outcome: the checks every case shares,
    then the case's own judge."""
    if case.needs_versioned:
        first = (out.get("calls") or [{}])[0]
        if not first.get("max_version") or first["max_version"][0] < 1:
            return (Status.NOT_SUPPORTED, "the consumer asks only for legacy capsules (no max_version), "
                    "so it cannot be handed this versioned one")
    if out.get("outcome") == "keyword":
        return Status.NOT_SUPPORTED, "keyword not accepted"
    problems: list[str] = []
    want_deleters = case.deleters if out.get("made", True) else 0
    if out.get("deleters") != want_deleters:
        problems.append(f"deleter ran {out.get('deleters')} times, expected {want_deleters}")
    status, notes = case.judge(case, out, problems)
    if status is None:
        status = Status.FAIL if problems else Status.PASS
    return status, "; ".join(problems + notes)
