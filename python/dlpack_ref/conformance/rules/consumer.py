"""Consumer rules: what any ``from_dlpack`` must do with good and bad input.

Every case hands the consumer (a :class:`~dlpack_ref.harness.subject.Consumer`)
a producer or capsule of :mod:`dlpack_ref.testing.factory`, so that every
field, and the deleter count, is under control; what the import gave is
collected in an outcome dict, the deleters are counted once every object of
the case is gone, and the case's own judge decides. A crash is the
runner's to report.
"""

from __future__ import annotations

import ctypes
import gc
import struct

from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.subject import NotSupported, export_any
from dlpack_ref.testing.abi import FLAG_IS_COPIED, FLAG_READ_ONLY, NAME_USED_VERSIONED
from dlpack_ref.testing.factory import CapsuleFactory, ForeignProducer
from dlpack_ref.testing.reader import capsule_name, read_capsule

from .table import rule
from .support import CheckFailed

BOGUS_DEVICE_POINTER = 0xDEAD0000
F64 = (2, 64, 1)
V123 = [1.0, 2.0, 3.0]


def f64(values) -> bytes:
    """float64 values as the bytes of a C array."""
    return struct.pack(f"<{len(values)}d", *values)


# --- what a case does: one import, its outcome as a dict ---------------------------

def attempt(c, obj, *, read_values=True, **kwargs) -> dict:
    """``from_dlpack(obj, **kwargs)`` of the consumer, and what it gave."""
    try:
        r = c.take(obj, **kwargs)
    except Exception as e:
        # a TypeError of the consumer's own signature refusing the keyword,
        # not one of the producer (whose messages name __dlpack__) passed along
        refused_keyword = (isinstance(e, TypeError) and kwargs and "keyword" in str(e)
                           and "__dlpack__" not in str(e))
        # the exception's name and message, not the exception: its traceback
        # would keep the case's capsule alive past the deleter count
        return {"outcome": "keyword" if refused_keyword else "raised", "exc": (exc_name(e), short(e)),
                "exc_mro": [k.__name__ for k in type(e).__mro__]}
    out = {"outcome": "ok", "type": type(r).__name__}
    try:
        dev = r.__dlpack_device__()
        out["device"] = [int(getattr(dev[0], "value", dev[0])), int(dev[1])]
    except Exception:
        out["device"] = None
    if read_values == "unless_on_a_device":
        # device memory at a bogus address: a result that says where it is
        # is not read; one that does not is asked for its values, which a
        # consumer that keeps device memory unread refuses (one that reads
        # it crashes, and the runner reports the crash)
        read_values = out["device"] is None
    if read_values:
        for key, fn in (("values", c.values), ("ptr", c.pointer), ("readonly", c.is_readonly)):
            try:
                out[key] = fn(r)
            except Exception as e:
                out[key + "_error"] = f"{exc_name(e)}: {short(e, 150)}"
    out["result"] = r  # dropped before the deleters are counted
    return out


class WatchedProducer(ForeignProducer):
    """A ForeignProducer that also counts the calls of its
    ``__dlpack_device__``: with ``calls`` (those of ``__dlpack__``), what
    the consumer looked at before it answered."""

    def __init__(self, factory, **kwargs):
        super().__init__(factory, **kwargs)
        self.device_calls = 0

    def __dlpack_device__(self):
        self.device_calls += 1
        return super().__dlpack_device__()


class KeepingProducer(WatchedProducer):
    """A WatchedProducer that remembers the capsule it handed out (to read
    its name after the import). Capsules follow what the consumer asks for
    (versioned for max_version >= (1, 0)) unless ``versioned=`` is given;
    ``elements``: float64 values of a 1-D tensor written along its strides."""

    capsule = None
    name_before = None

    def __init__(self, factory, *, elements=(), **kwargs):
        super().__init__(factory, **kwargs)
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


def recorded_calls(p) -> list[dict]:
    """The keywords of each ``__dlpack__`` call of a producer, tuples as lists."""
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in call.items()} for call in p.calls]


def looked(out: dict, p, device) -> dict:
    """``out`` with what the consumer asked of the producer ``p``: its
    ``__dlpack__`` calls, and whether it asked for the device of a case
    about a device (``device``, not the CPU), which is looking at it."""
    out["calls"] = recorded_calls(p)
    out["device_asked"] = bool(p.device_calls) and tuple(device) != (1, 0)
    return out


def import_made(c, f, *, device=(1, 0), read_values=None, **make) -> dict:
    """The import of one capsule made with ``make`` (plain: no keyword),
    with the capsule's name before and after; the result is read when its
    data was allocated, unless ``read_values`` says otherwise."""
    p = KeepingProducer(f, device=device, **make)
    out = looked(attempt(c, p, read_values=make.get("data", "alloc") == "alloc" if read_values is None
                         else read_values), p, device)
    if p.capsule is not None:
        name = capsule_name(p.capsule)
        out["name_after"] = name.decode() if name else None
        out["name_before"] = p.name_before.decode() if p.name_before else None
    return out


def import_asked(c, f, call: dict | None = None, read_values=True, **producer) -> dict:
    """The import of a ForeignProducer's array with the keywords ``call``
    (None: the consumer has no such keyword)."""
    if call is None:
        return {"outcome": "keyword"}
    p = WatchedProducer(f, **producer)
    out = looked(attempt(c, p, read_values=read_values, **call), p, producer.get("device", (1, 0)))
    out["call_kwargs"] = {k: v for k, v in call.items() if k == "copy"}
    out["keywords_given"] = bool(call)
    out["source_ptr"] = f.last_data
    return out


def import_or_why_copied(c, f, **producer) -> dict:
    """The import, and when the consumer copied, whether it can import in
    place at all: ``from_dlpack(x, copy=False)`` of the same producer (a
    consumer that cannot share host memory refuses it, as the standard
    says, and then copying is its only way)."""
    out = import_asked(c, f, {}, **producer)
    if out.get("outcome") == "ok" and "ptr" in out and out.get("ptr") != out.get("source_ptr"):
        # a factory of its own: this case counts the first import's deleter only
        out["copy_false"] = import_asked(c, CapsuleFactory(), {"copy": False}, read_values=False, **producer)
        out["copy_false"].pop("result", None)
    return out


def cpu_device_call(c) -> dict | None:
    """The keywords of an import onto the consumer's CPU device (None: it has no device keyword)."""
    return None if c.cpu_device is None else {"device": c.cpu_device}


# --- judging: each case's outcome against what the rule asks -------------------------
# A judge takes the outcome, the problems found so far (the deleter count)
# and the values expected, and returns a status (None: pass unless there
# are problems) and notes.

def refused(out) -> bool:
    return out.get("outcome") != "ok"


def is_buffererror(out) -> bool:
    return "BufferError" in out.get("exc_mro", [])


def values_problems(out, problems, want) -> None:
    """Wrong values are a problem; values that cannot be read are the
    checker's blindness, which :func:`judged` answers (not supported)."""
    if want is not None and "values" in out and out["values"] != want:
        problems.append(f"values {out['values']!r}, expected {want!r}")


def accepts(out, problems, want):
    if refused(out):
        return "fail", ["refused"]
    values_problems(out, problems, want)
    notes = ["accepted" if problems or "values" not in out else "accepted with the right values"]
    if out.get("deleters_during"):
        notes.append("data copied and released at once")
    return None, notes


def cannot_share(out) -> bool:
    """A refusal of copy=False with the standard's errors for a copy that
    would be needed: ValueError (from_dlpack) or BufferError (__dlpack__)."""
    mro = out.get("exc_mro", [])
    return refused(out) and ("ValueError" in mro or "BufferError" in mro)


def accepts_in_place(out, problems, want):
    if refused(out):
        if out.get("call_kwargs") == {"copy": False} and cannot_share(out):
            return "not supported", [f"copy=False refused with {out['exc'][0]}: the consumer cannot "
                                     "import this memory in place, and says so as the standard asks"]
        return "fail", ["refused"]
    values_problems(out, problems, want)
    if "ptr" not in out:
        return "not supported", [f"the result's data pointer cannot be read ({out.get('ptr_error')}), so "
                                 "whether it is in place cannot be told"]
    if out["ptr"] != out.get("source_ptr"):
        no_copy = out.get("copy_false")
        if no_copy is not None and cannot_share(no_copy):
            why = (f"copied: the consumer cannot import this memory in place (copy=False refused with "
                   f"{no_copy['exc'][0]}: {no_copy['exc'][1]})")
            return ("fail" if problems else "not supported"), [why]
        problems.append(f"copied (pointer {out['ptr']} != source {out.get('source_ptr')})")
        return None, []
    if out.get("deleters_during"):
        problems.append("deleter ran while the result still used the data")
    return None, ["in place"]


def copies(out, problems, want):
    if refused(out):
        if is_buffererror(out):
            return "not supported", ["copy=True refused with BufferError"]
        return "fail", ["refused"]
    values_problems(out, problems, want)
    if "ptr" not in out:
        return "not supported", [f"the result's data pointer cannot be read ({out.get('ptr_error')}), so "
                                 "whether it is a copy cannot be told"]
    if out["ptr"] == out.get("source_ptr"):
        problems.append("copy=True imported in place (same pointer)")
        return None, []
    calls = out.get("calls") or [{}]
    return None, [f"copied; last __dlpack__ call {calls[-1]}"]


def asks_max_version(out, problems, want):
    # the first call is the point, whatever the consumer did with its answer
    first = (out.get("calls") or [{}])[0]
    if not first.get("max_version") or first["max_version"][0] < 1:
        problems.append(f"first __dlpack__ call had {first}, no max_version >= (1, 0)")
        return None, []
    return None, [f"__dlpack__ called with {first}"]


def falls_back_to_legacy(out, problems, want):
    if refused(out):
        return "fail", ["refused"]
    values_problems(out, problems, want)
    calls = out.get("calls", [])
    if not calls or "max_version" in calls[-1]:
        problems.append("no call without max_version after the TypeError")
    return None, [f"__dlpack__ calls {calls}"]


def renames(out, problems, want):
    if refused(out):
        return "fail", ["refused"]
    expected = "used_" + (out.get("name_before") or "?")
    if out.get("name_after") != expected:
        problems.append(f"capsule named {out.get('name_after')!r} after import, expected {expected!r}")
        return None, []
    return None, [f"renamed {expected!r}"]


def refuses_second_import(out, problems, want):
    second = out.get("second", {})
    if refused(out):
        problems.append("the first import failed")
    if second.get("outcome") == "ok":
        problems.append("the same capsule was imported twice")
        return None, []
    if "exc" in second:
        return None, [f"second import refused with {second['exc'][0]}"]
    return None, ["no second import: the producer kept no capsule to hand over again"
                  if second.get("outcome") == "none" else f"second import: {second.get('outcome')}"]


def keeps_read_only(out, problems, want):
    if refused(out):
        if is_buffererror(out):
            return None, ["refused with BufferError"]
        return "fail", ["refused"]
    values_problems(out, problems, want)
    ro = out.get("readonly")
    if ro is None:
        return "not supported", ["cannot tell whether the result is read-only"]
    if ro is False:
        problems.append("imported READ_ONLY data as a writable array")
        return None, []
    return None, ["read-only array"]


def accepts_or_refuses(out, problems, want):
    if refused(out):
        return None, [f"refused with {out['exc'][0]}"]
    values_problems(out, problems, want)
    return None, ["accepted"]


def device_text(device) -> str:
    """A device read back from an export (``[1, 0]``) in the header's words."""
    if not isinstance(device, (list, tuple)) or len(device) != 2:
        return "an unknown device"
    return f"device_type {device[0]}, device_id {device[1]}"


def refuses(out, problems, want):
    if not refused(out):
        problems.append(f"accepted (result {out.get('type')} on {device_text(out.get('device'))})")
        return None, []
    return None, [f"refused with {out['exc'][0]}"]


def refuses_with_buffererror(out, problems, want):
    if refused(out) and not is_buffererror(out):
        problems.append(f"refused with {out['exc'][0]}, not BufferError")
        return None, []
    return refuses(out, problems, want)


def refuses_copy(out, problems, want):
    """copy=False and a tensor flagged IS_COPIED: the standard's two errors
    for a forbidden copy (BufferError from __dlpack__, ValueError from
    from_dlpack) are both right."""
    if not refused(out):
        problems.append(f"accepted a tensor flagged IS_COPIED for copy=False (result {out.get('type')})")
        return None, []
    mro = out.get("exc_mro", [])
    if "BufferError" not in mro and "ValueError" not in mro:
        problems.append(f"refused with {out['exc'][0]}, not BufferError or ValueError")
        return None, []
    return None, [f"refused with {out['exc'][0]}"]


def kept_unread(out) -> bool:
    """The result holds the device memory's own address and refuses to be
    read with BufferError: a consumer that hands device memory on (to a
    device-aware library, as a message buffer) without reading it."""
    return (out.get("ptr") == BOGUS_DEVICE_POINTER and "values" not in out
            and str(out.get("values_error", "")).startswith("BufferError"))


def refuses_device(out, problems, want):
    if not refused(out) and out.get("device") and out["device"][0] != 1:
        return None, [f"kept as a device array on {device_text(out['device'])}, not read"]
    if not refused(out) and kept_unread(out):
        return None, ["kept as device memory at its own address, never read (reading the result raises "
                      f"{out['values_error'].split(':')[0]})"]
    return refuses_with_buffererror(out, problems, want)


def unlooked(c, out) -> str | None:
    """Why a refusal says nothing of the case: the consumer raised before it
    asked the producer for the capsule (nor, in a case about a device, for
    the device), which the producer counts; None when it looked. A
    ``from_dlpack`` that takes the capsule itself is handed it, and looked;
    one handed a keyword (``copy=False``) may answer the keyword alone."""
    if not refused(out) or out.get("calls") or out.get("device_asked") or "calls" not in out:
        return None
    if out.get("call_kwargs") or out.get("keywords_given"):
        return None
    if c.capsule_request is not None:
        return None
    return (f"from_dlpack raised {out['exc'][0]} before it called __dlpack__: it refused without looking at "
            "the capsule, so this case cannot be judged")


def control_refusal(c, control: dict) -> str | None:
    """Why a refusal says nothing of the case: the consumer refuses the
    same import of a valid tensor (``control``: how it is made; a shape of
    the same number of dimensions as the case's) too. None when it takes
    the valid one."""
    out = import_asked(c, CapsuleFactory(), {}, read_values=False, **control)
    out.pop("result", None)
    if not refused(out) or out.get("outcome") == "keyword":
        return None
    kind = "legacy " if control.get("legacy_only") else ""
    return (f"it refuses a valid {kind}float64 tensor of shape {control['shape']} too ({out['exc'][0]}: "
            f"{short(out['exc'][1], 120)}), so its refusal here says nothing of the rule")


#: The valid twin of most cases: the plain import of a 1-D float64 tensor
#: (each case asks for the smallest tensor that shows its point: 1-D but
#: where its point needs two dimensions, whose twin is SQUARE).
PLAIN = {"shape": (3,), "dtype": F64, "fill": f64(V123)}
SQUARE = {"shape": (2, 2), "fill": f64([1, 2, 3, 4])}


def judged(c, run, judge, *, want=None, deleters=1, needs_versioned=False, asks_producer=False,
           about_dtype=False, control: dict | None = PLAIN):
    """One case: what the consumer can be asked, ``run(factory)`` (the
    import), the deleters counted once its objects are gone, then the
    checks every case shares and the case's own ``judge``. Returns the pass
    detail (with the consumer's exception, if any) or raises the verdict.

    A refusal is judged only where the consumer looked (:func:`unlooked`)
    and takes the valid twin of the case, ``control`` (None: the refusal is
    not the case's point); a result whose values are wanted and cannot be
    read by any means is not supported, unless a problem already fails it."""
    if asks_producer and c.capsule_request is not None:
        call = ", ".join(f"{k}={v!r}" for k, v in c.capsule_request.items())
        raise NotSupported("from_dlpack takes a capsule, not an object with __dlpack__, so it never calls "
                           f"__dlpack__ (its users call __dlpack__({call}))")
    if about_dtype and c.shapeless:
        raise NotSupported("the results are byte buffers without a dtype: any element type is bytes to this "
                           "consumer")
    if want is not None:
        want = c.expected(want, "float64")
    f = CapsuleFactory()
    out = run(f)
    out["made"] = f.last_id != 0
    out["deleters_during"] = f.deleter_calls
    out.pop("result", None)
    gc.collect()
    out["deleters"] = f.deleter_calls
    exc = out.get("exc")
    if needs_versioned:
        first = (out.get("calls") or [{}])[0]
        if not first.get("max_version") or first["max_version"][0] < 1:
            raise NotSupported("the consumer asks only for legacy capsules (no max_version), so it cannot be "
                               "handed this versioned one", exc)
    if out.get("outcome") == "keyword":
        raise NotSupported("keyword not accepted", exc)
    problems: list[str] = []
    want_deleters = deleters if out.get("made", True) else 0
    if out.get("deleters") != want_deleters:
        problems.append(f"deleter ran {out.get('deleters')} times, expected {want_deleters}")
    if not problems and refused(out):
        # a consumer that read the device of a case about a device and refused it judged what the case shows
        twin = control is not None and not out.get("device_asked")
        blind = unlooked(c, out) or (control_refusal(c, {**PLAIN, **control}) if twin else None)
        if blind:
            raise NotSupported(blind, exc)
    status, notes = judge(out, problems, want)
    if status is None and not problems and want is not None and "values_error" in out:
        raise NotSupported(f"the result's values cannot be read, by DLPack or the library's own means "
                           f"({out['values_error']})", exc)
    detail = "; ".join(problems + notes)
    if status == "fail" or (status is None and problems):
        raise CheckFailed(detail, exc)
    if status == "not supported":
        raise NotSupported(detail, exc)
    return detail, exc


# --- the rules -----------------------------------------------------------------------------

@rule("array-api", "from_dlpack")
def zero_copy_import(c):
    """a valid versioned capsule is imported in place with its values"""
    return judged(c, lambda f: import_or_why_copied(c, f, shape=(3,), dtype=F64, fill=f64(V123)),
                  accepts_in_place, want=V123)


@rule("array-api", "from_dlpack: 'consumers ... must pass max_version'")
def max_version_passed(c):
    """from_dlpack calls __dlpack__(max_version=(1, m)) to ask for a versioned capsule"""
    return judged(c, lambda f: import_asked(c, f, {}, shape=(3,), dtype=F64, fill=f64(V123)), asks_max_version,
                  asks_producer=True, control=None)


@rule("python", "Python spec: fallback for pre-1.0 producers")
def legacy_fallback(c):
    """a producer rejecting max_version (TypeError) is asked again without it"""
    return judged(c, lambda f: import_asked(c, f, {}, legacy_only=True, shape=(3,), dtype=F64, fill=f64(V123)),
                  falls_back_to_legacy, want=V123, asks_producer=True)


@rule("python", "Python spec: capsule renaming")
def capsule_renamed(c):
    """a consumed capsule is renamed 'used_dltensor_versioned' / 'used_dltensor'"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, fill=f64(V123)), renames)


def import_twice(c, f) -> dict:
    """An import, then the same capsule handed over again."""
    p = KeepingProducer(f, shape=(3,), dtype=F64, fill=f64([1, 2, 3]))
    first = attempt(c, p)
    cap = p.capsule
    name = capsule_name(cap) if cap is not None else None
    second = attempt(c, ForeignProducer(f, returns=cap)) if cap is not None else {"outcome": "none"}
    second.pop("result", None)
    return {"outcome": first["outcome"], "name_after": name.decode() if name else None, "second": second,
            "exc": second.get("exc") or first.get("exc"), "result": first.get("result"),
            "calls": recorded_calls(p)}


@rule("python", "Python spec: a capsule is consumed exactly once")
def consumed_twice(c):
    """a capsule is consumed once; handing it over again is refused"""
    return judged(c, lambda f: import_twice(c, f), refuses_second_import)


@rule("header", "DLTensor.byte_offset")
def byte_offset(c):
    """byte_offset is honoured (data + byte_offset is the first element)"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, byte_offset=8, fill=f64(V123)), accepts,
                  want=V123)


@rule("header", "DLTensor.strides (in elements, signed)")
def negative_strides(c):
    """a negative stride (a reversed view) is honoured: the values are read backwards from the first element, or the
    tensor is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, strides=(-1,), elements=V123),
                  accepts_or_refuses, want=V123)


@rule("header", "DLTensor.strides (NULL = row-major before 1.2)")
def null_strides_v1_1(c):
    """NULL strides in a version 1.1 capsule mean row-major"""
    return judged(c, lambda f: import_made(c, f, shape=(2, 2), dtype=F64, version=(1, 1), strides="null",
                                           fill=f64([1, 2, 3, 4]), versioned=True),
                  accepts, want=[[1.0, 2.0], [3.0, 4.0]], needs_versioned=True, control=SQUARE)


@rule("header", "DLTensor.strides (NULL = row-major before 1.2)")
def null_strides_legacy(c):
    """NULL strides in a legacy capsule (of a pre-1.0 producer) mean row-major"""
    return judged(c, lambda f: import_made(c, f, shape=(2, 2), dtype=F64, legacy_only=True, strides="null",
                                           fill=f64([1, 2, 3, 4])),
                  accepts, want=[[1.0, 2.0], [3.0, 4.0]], control={**SQUARE, "legacy_only": True})


@rule("python", "Python spec: __dlpack__ max_version (a producer may return a capsule of an older version)")
def legacy_answer(c):
    """a legacy 'dltensor' capsule answering a max_version request (from a producer without DLPack 1.x) is imported"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, versioned=False, fill=f64(V123)),
                  accepts, want=V123, needs_versioned=True)


@rule("header", "DLTensor.strides (non-NULL required since 1.2)")
def null_strides_v1_3(c):
    """NULL strides in a version 1.3 capsule (forbidden since 1.2) are refused or read as row-major"""
    return judged(c, lambda f: import_made(c, f, shape=(2, 2), dtype=F64, strides="null", fill=f64([1, 2, 3, 4]),
                                           versioned=True),
                  accepts_or_refuses, want=[[1.0, 2.0], [3.0, 4.0]], needs_versioned=True, control=SQUARE)


@rule("header", "DLPackVersion: minor changes keep the ABI")
def minor_version_newer(c):
    """a capsule of version 1.99 (newer minor) is usable or refused cleanly"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, version=(1, 99), fill=f64(V123),
                                           versioned=True),
                  accepts_or_refuses, want=V123, needs_versioned=True)


@rule("header", "DLPACK_FLAG_BITMASK_READ_ONLY")
def read_only(c):
    """READ_ONLY data gives a read-only array or is refused (never a writable one)"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, flags=FLAG_READ_ONLY, fill=f64(V123),
                                           versioned=True),
                  keeps_read_only, want=V123, needs_versioned=True)


@rule("header", "DLManagedTensorVersioned.deleter 'can be NULL'")
def null_deleter(c):
    """a NULL deleter is allowed (nothing to call)"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, deleter=False, fill=f64(V123)), accepts,
                  want=V123, deleters=0)


@rule("header", "DLTensor.data")
def size_zero_null_data(c):
    """a size-0 tensor with NULL data is accepted"""
    return judged(c, lambda f: import_made(c, f, shape=(0,), dtype=F64, data=None), accepts_or_refuses)


# --- element types -------------------------------------------------------------------------

#: dtype name -> its (code, bits, lanes) and three values it holds exactly.
ELEMENT_CASES = {
    "int8": ((0, 8, 1), [-3, 0, 5]), "int16": ((0, 16, 1), [-300, 0, 5]),
    "int32": ((0, 32, 1), [-70000, 0, 5]), "int64": ((0, 64, 1), [-(1 << 40), 0, 5]),
    "uint8": ((1, 8, 1), [0, 7, 250]), "uint16": ((1, 16, 1), [0, 7, 65000]),
    "uint32": ((1, 32, 1), [0, 7, 4000000000]), "uint64": ((1, 64, 1), [0, 7, 1 << 63]),
    "float16": ((2, 16, 1), [0.5, -1.25, 3.0]), "float32": ((2, 32, 1), [0.5, -1.25, 3.0]),
    "bfloat16": ((4, 16, 1), [0.5, -1.25, 3.0]),
}
#: (code, bits) -> the struct format of one element (bfloat16: the high half of a float32's).
ELEMENT_FORMATS = {(0, 8): "b", (0, 16): "h", (0, 32): "i", (0, 64): "q", (1, 8): "B", (1, 16): "H",
                   (1, 32): "I", (1, 64): "Q", (2, 16): "e", (2, 32): "f"}


def element_bytes(name: str) -> bytes:
    """The values of ELEMENT_CASES[name] as the bytes of a C array of that type."""
    (code, bits, _), values = ELEMENT_CASES[name]
    if code == 4:
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack(f"<{len(values)}{ELEMENT_FORMATS[code, bits]}", *values)


def element_type_of(r):
    """The (code, bits, lanes) of a result, from its own export."""
    return read_capsule(export_any(r))["dtype"]


def imports_element_types(c, names: list[str]) -> str:
    """The check of an element-type rule: each tensor of ``names`` imports
    with its values and its own element type (read from the result's
    export), or is refused (with which exception is another rule's point)."""
    if c.shapeless:
        raise NotSupported("the results are byte buffers without a dtype: any element type is bytes to this "
                           "consumer")
    done, refused_with, bad, untold = [], [], [], []
    for name in names:
        triple, values = ELEMENT_CASES[name]
        out = attempt(c, ForeignProducer(CapsuleFactory(), shape=(3,), dtype=triple, fill=element_bytes(name)))
        if refused(out):
            # which exception a refusal raises is the dtype_unknown_code rule's point, not this one's
            refused_with.append(f"{name} ({out['exc'][0]})")
            continue
        if "values" in out and out["values"] != values:
            bad.append(f"{name}: values {out['values']!r}, expected {values!r}")
            continue
        try:
            got = element_type_of(out["result"])
        except Exception:
            got = None
        if got is None:
            kinds = sorted({type(v).__name__ for v in out.get("values", [])})
            want = "int" if triple[0] in (0, 1) else "float"
            if kinds and kinds != [want]:
                bad.append(f"{name}: values read as {'/'.join(kinds)}, not {want}")
            else:
                untold.append(name)
        elif got != triple:
            bad.append(f"{name}: imported as (code, bits, lanes)={got}, expected {triple}")
        else:
            done.append(name)
    if bad:
        raise CheckFailed("; ".join(bad + ([f"ok: {', '.join(done)}"] if done else [])))
    if not done:
        why = [f"refused: {', '.join(refused_with)}"] if refused_with else []
        why += [f"the element type of the results cannot be read: {', '.join(untold)}"] if untold else []
        raise NotSupported("none of " + ", ".join(names) + " could be judged (" + "; ".join(why) + ")")
    notes = [f"kept: {', '.join(done)}"]
    notes += [f"refused: {', '.join(refused_with)}"] if refused_with else []
    notes += [f"element type not readable: {', '.join(untold)}"] if untold else []
    return "; ".join(notes)


@rule("array-api", "from_dlpack: the result holds the data of x")
def dtype_signed(c):
    """int8, int16, int32 and int64 tensors import with their values and element type (never widened), or are refused"""
    return imports_element_types(c, ["int8", "int16", "int32", "int64"])


@rule("array-api", "from_dlpack: the result holds the data of x")
def dtype_unsigned(c):
    """uint8, uint16, uint32 and uint64 tensors import with their values and element type (never widened), or are
    refused"""
    return imports_element_types(c, ["uint8", "uint16", "uint32", "uint64"])


@rule("array-api", "from_dlpack: the result holds the data of x")
def dtype_narrow_float(c):
    """float16, bfloat16 and float32 tensors import with their values and element type (never widened), or are
    refused"""
    return imports_element_types(c, ["float16", "bfloat16", "float32"])


# --- copies and devices ----------------------------------------------------------------------

@rule("array-api", "from_dlpack, copy: 'must always copy'")
def copy_true(c):
    """from_dlpack(x, copy=True) returns a copy (another pointer, same values), also from a pre-1.0 producer that
    cannot copy"""
    return judged(c, lambda f: import_asked(c, f, {"copy": True}, legacy_only=True, shape=(3,), dtype=F64,
                                            fill=f64(V123)),
                  copies, want=V123, control={"legacy_only": True})


@rule("array-api", "from_dlpack, copy")
def copy_false(c):
    """from_dlpack(x, copy=False) imports in place"""
    return judged(c, lambda f: import_asked(c, f, {"copy": False}, shape=(3,), dtype=F64, fill=f64(V123)),
                  accepts_in_place, want=V123)


@rule("array-api", "from_dlpack, copy: 'must never copy'; header, DLPACK_FLAG_BITMASK_IS_COPIED")
def copy_false_is_copied(c):
    """from_dlpack(x, copy=False) refuses (BufferError or ValueError) a tensor flagged IS_COPIED, which a producer that
    copied anyway returns, and calls its deleter once"""
    return judged(c, lambda f: import_asked(c, f, {"copy": False}, read_values=False, shape=(3,), dtype=F64,
                                            flags=FLAG_IS_COPIED, fill=f64(V123), versioned=True),
                  refuses_copy, needs_versioned=True)


@rule("array-api", "from_dlpack, device")
def device_cpu(c):
    """from_dlpack(x, device=<CPU>) of CPU data imports in place"""
    return judged(c, lambda f: import_asked(c, f, cpu_device_call(c), shape=(3,), dtype=F64, fill=f64(V123)),
                  accepts_in_place, want=V123)


@rule("array-api", "from_dlpack, Raises")
def producer_buffererror(c):
    """a BufferError from __dlpack__ reaches the caller as BufferError"""
    return judged(c, lambda f: import_asked(c, f, {}, raises=BufferError("cannot export (test)")),
                  refuses_with_buffererror, deleters=0, asks_producer=True)


@rule("python", "Python spec: __dlpack__ returns a PyCapsule")
def producer_returns_non_capsule(c):
    """__dlpack__ returning a non-capsule is refused, no crash"""
    return judged(c, lambda f: import_asked(c, f, {}, returns=42), refuses, deleters=0)


# --- malformed capsules -------------------------------------------------------------------

@rule("python", "Python spec: capsule names")
def bad_name(c):
    """a capsule with another name is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, name=b"not_a_dltensor"), refuses)


@rule("python", "Python spec: capsule renaming")
def used_name(c):
    """a capsule already named 'used_dltensor_versioned' is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, name=NAME_USED_VERSIONED), refuses)


@rule("header", "DLPackVersion: 'the consumer must call the deleter'")
def major_version_2(c):
    """version.major 2 is refused and the deleter called"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, version=(2, 0), versioned=True), refuses,
                  needs_versioned=True)


@rule("header", "DLTensor.ndim")
def ndim_negative(c):
    """ndim -1 is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, ndim=-1), refuses)


@rule("header", "DLTensor.shape")
def shape_negative(c):
    """a negative extent is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(-3,), dtype=F64), refuses)


@rule("header", "DLTensor.shape")
def shape_null(c):
    """a NULL shape with ndim > 0 is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, shape_null=True), refuses)


@rule("header", "DLTensor.data")
def data_null(c):
    """NULL data for a non-empty tensor is refused, never dereferenced"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, data=None), refuses)


@rule("header", "DLTensor.shape")
def extent_overflow(c):
    """a shape whose size overflows int64 is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(2 ** 62, 8), dtype=F64), refuses, control=SQUARE)


@rule("array-api", "from_dlpack, Raises: BufferError (incompatible dtype)")
def dtype_unknown_code(c):
    """an unknown dtype code (99) is refused with BufferError"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=(99, 32, 1)), refuses_with_buffererror,
                  about_dtype=True)


@rule("array-api", "from_dlpack, Raises: BufferError (incompatible dtype)")
def dtype_bad_bits(c):
    """float with 24 bits is refused with BufferError"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=(2, 24, 1)), refuses_with_buffererror,
                  about_dtype=True)


def with_element_type(c, out: dict) -> dict:
    """``out`` with the element type of its result, read from the result's
    own export (``None`` when it cannot be read)."""
    if "result" in out:
        try:
            out["element_type"] = element_type_of(out["result"])
        except Exception:
            out["element_type"] = None
    return out


def refuses_or_keeps_lanes(out, problems, want):
    if not refused(out) and out.get("element_type") == (2, 32, 4):
        return None, ["read as a vector type (its result exports lanes 4)"]
    return refuses_with_buffererror(out, problems, want)


@rule("array-api", "from_dlpack, Raises: BufferError (incompatible dtype)")
def dtype_lanes(c):
    """float32 with lanes=4 is refused with BufferError (or read as a vector type)"""
    return judged(c, lambda f: with_element_type(c, import_made(c, f, shape=(3,), dtype=(2, 32, 4))),
                  refuses_or_keeps_lanes, about_dtype=True)


@rule("array-api", "from_dlpack, Raises: BufferError (incompatible device)")
def device_opencl(c):
    """an OpenCL tensor (bogus pointer) is refused with BufferError (or kept as device memory), never read"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, device=(4, 0), data=BOGUS_DEVICE_POINTER,
                                           read_values="unless_on_a_device"), refuses_device)


@rule("array-api", "from_dlpack, Raises: BufferError (incompatible device)")
def device_cuda_unreachable(c):
    """a CUDA tensor (bogus pointer) the consumer cannot reach is refused with BufferError (or kept as a device array),
    never read"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, device=(2, 0), data=BOGUS_DEVICE_POINTER,
                                           read_values="unless_on_a_device"), refuses_device)
