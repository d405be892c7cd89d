"""What the consumer rules share: how a case is made and run. Every case
hands the consumer (a :class:`~dlpack_ref.harness.subject.Consumer`) a
producer or capsule of :mod:`dlpack_ref.testing.factory`, so that every
field, and the deleter count, is under control; what the import gave is
collected in an outcome dict, the deleters are counted once every object of
the case is gone, and the case's own judge (:mod:`.consumer_judges`)
decides, in :func:`judged`. A crash is the runner's to report. The cases'
factories keep the memory of the tensors whose deleter ran
(``keep_freed``): a consumer that reads a tensor after freeing it reads it
as it was, so its verdict is the same in every run.
"""

from __future__ import annotations

import ctypes
import gc
import struct

from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.subject import NotSupported
from dlpack_ref.testing.factory import CapsuleFactory, ForeignProducer
from dlpack_ref.testing.reader import capsule_name

from .consumer_judges import refused
from .support import CheckFailed

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
    (versioned for max_version >= (1, 0)) unless ``versioned=`` is given."""

    capsule = None
    name_before = None

    def __dlpack__(self, **kwargs):
        self.capsule = super().__dlpack__(**kwargs)
        self.name_before = capsule_name(self.capsule)
        return self.capsule


class FillingProducer(KeepingProducer):
    """A KeepingProducer that writes ``elements``, float64 values of a 1-D
    tensor, along the strides it makes each capsule with."""

    def __init__(self, factory, elements, **kwargs):
        super().__init__(factory, **kwargs)
        self.elements = elements

    def __dlpack__(self, **kwargs):
        capsule = super().__dlpack__(**kwargs)
        first = self.factory.last_data + self.make_kwargs.get("byte_offset", 0)
        step = self.make_kwargs.get("strides", (1,))[0] * 8
        for i, value in enumerate(self.elements):
            ctypes.c_double.from_address(first + i * step).value = value
        return capsule


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


def import_made(c, f, *, device=(1, 0), read_values=None, elements=(), names=False, **make) -> dict:
    """The import of one capsule made with ``make`` (plain: no keyword),
    with the capsule's name before and after where ``names`` asks; the
    result is read when its data was allocated, unless ``read_values`` says
    otherwise. ``elements``: float64 values of a 1-D tensor written along
    its strides."""
    p = WatchedProducer(f, device=device, **make)
    if names:
        p = KeepingProducer(f, device=device, **make)
    if elements:
        p = FillingProducer(f, elements, device=device, **make)
    out = looked(attempt(c, p, read_values=make.get("data", "alloc") == "alloc" if read_values is None
                         else read_values), p, device)
    if names and p.capsule is not None:
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
        out["copy_false"] = import_asked(c, CapsuleFactory(keep_freed=True), {"copy": False}, read_values=False,
                                         **producer)
        out["copy_false"].pop("result", None)
    return out


def cpu_device_call(c) -> dict | None:
    """The keywords of an import onto the consumer's CPU device (None: it has no device keyword)."""
    return None if c.cpu_device is None else {"device": c.cpu_device}


# --- what a refusal says, and the case as judged ------------------------------------

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
    out = import_asked(c, CapsuleFactory(keep_freed=True), {}, read_values=False, **control)
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
    f = CapsuleFactory(keep_freed=True)
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
