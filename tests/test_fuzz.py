"""Fuzzing the consumer: hand-built capsules and misbehaving producers.

Properties, for any DLTensor fields, capsule name, version, flags and
producer behaviour:
- the process never crashes (the hypothesis runs happen in a subprocess, so a
  crash is reported with the input that caused it instead of killing pytest);
- every deleter runs exactly once (never for a capsule that has no deleter),
  and at once when the import fails after the capsule was taken;
- only the documented exceptions come out: BufferError, TypeError, ValueError
  (CopyForbiddenError is a BufferError and a ValueError), or the producer's
  own exception unchanged;
- an accepted capsule gives an Array that describes exactly the tensor given,
  and exports it again unchanged.

CI runs a fixed budget (DLPACK_REF_FUZZ_EXAMPLES, default 300 per property);
tools/fuzz_long.py runs the same properties for longer.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

import dlpack_ref
from dlpack_ref.cuda import CUDAUnavailableError
from dlpack_ref.testing import FLAG_IS_COPIED, FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY
from dlpack_ref.testing import NAME_LEGACY, NAME_USED_LEGACY, NAME_USED_VERSIONED, NAME_VERSIONED
from dlpack_ref.testing import CapsuleFactory, ForeignProducer, capsule_name, read_capsule

CHILD = os.environ.get("DLPACK_REF_FUZZ_CHILD") == "1"
EXAMPLES = int(os.environ.get("DLPACK_REF_FUZZ_EXAMPLES", "300"))
# Each example's input is appended here before it runs: after a crash, the
# last line is the input that crashed.
LOG = os.environ.get("DLPACK_REF_FUZZ_LOG")

INT64_MAX = 2**63 - 1
MAX_NDIM = 64
DOCUMENTED = (BufferError, TypeError, ValueError)
SUPPORTED_DEVICE_TYPES = {1, 2, 3, 13, 20}  # kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLTPUHost

# DLPack 1.3's data types, written out from the header's table (not taken
# from dlpack-ref, so the two can disagree and a test can see it).
VALID_DTYPES = (
    {(0, b, 1) for b in (8, 16, 32, 64)} | {(1, b, 1) for b in (8, 16, 32, 64)}
    | {(2, b, 1) for b in (16, 32, 64)} | {(4, 16, 1), (5, 64, 1), (5, 128, 1), (6, 8, 1)}
    | {(code, 8, 1) for code in range(7, 15)} | {(15, 6, 1), (16, 6, 1), (17, 4, 1), (17, 4, 2)}
    | {(18, 32, 1)}
)

child_only = pytest.mark.skipif(not CHILD, reason="runs in the subprocess started by test_fuzz_in_subprocess")
fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _log(kind, spec):
    if LOG:
        with open(LOG, "a") as f:
            f.write(f"{kind} {spec!r}\n")


def _outcome(label):
    """Count outcomes in hypothesis' statistics (not available under atheris)."""
    if currently_in_test_context():
        event(label)


# --- strategies ----------------------------------------------------------------

# Every field has a valid generator and a bad one; each input spoils at most
# two fields (hypothesis shrinks towards none), so that valid tensors, tensors
# with one bad field and pairs of bad fields all come up often.
int64s = st.integers(-(2**63), INT64_MAX)
huge = st.sampled_from([2**31, 2**32 + 1, 2**62, INT64_MAX, -(2**63), -INT64_MAX])
VALID = {
    "extent": st.integers(0, 4),
    "dtype": st.sampled_from(sorted(VALID_DTYPES)),
    "device": st.tuples(st.sampled_from([1, 1, 1, 2, 3, 13, 20]), st.sampled_from([0, 1])),
    "version": st.tuples(st.just(1), st.integers(0, 5)),
    "flags": st.integers(0, 7),
    "stride": st.integers(-6, 6),
    "byte_offset": st.sampled_from([0, 1, 8, 256, 4096]),
}
BAD = {
    "extent": st.one_of(st.integers(-3, -1), huge, int64s),
    "dtype": st.tuples(st.integers(0, 255), st.sampled_from([0, 1, 4, 6, 8, 16, 32, 64, 128, 255]),
                       st.sampled_from([0, 1, 2, 4, 65535])),
    "device": st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)),
    "version": st.tuples(st.sampled_from([0, 2, 2**32 - 1]), st.integers(0, 2**32 - 1)),
    "flags": st.integers(0, 2**64 - 1),
    "stride": st.one_of(huge, int64s),
    "byte_offset": st.sampled_from([INT64_MAX, 2**63, 2**64 - 1]),
    "ndim": st.sampled_from([-1, -(2**31), 0, 1, 2, 6, MAX_NDIM, MAX_NDIM + 1, 1024, 2**31 - 1]),
}
SPOILABLE = ["extent", "dtype", "device", "version", "flags", "strides", "stride", "byte_offset",
             "data", "shape_null", "ndim", "deleter", "legacy"]
# What a producer that is asked to copy may spoil: the consumer reads its
# memory then, and must be able to trust the data pointer, extents and strides.
SPOILABLE_READABLE = ["extent", "dtype", "device", "version", "flags", "strides", "data", "deleter", "legacy"]


@st.composite
def tensor_fields(draw, readable=False):
    """Keyword arguments for CapsuleFactory.make, without the name.

    readable=True keeps to tensors whose every element lies in memory the
    factory allocated (small extents and strides, data "alloc" or NULL)."""
    spoiled = draw(st.sets(st.sampled_from(SPOILABLE_READABLE if readable else SPOILABLE), max_size=2))

    def field(kind):
        bad = kind in spoiled and kind in BAD and not (readable and kind == "extent")
        return draw(BAD[kind] if bad else VALID[kind])

    ndim = draw(st.integers(0, 5))
    shape = [draw(VALID["extent"]) for _ in range(ndim)]
    if "extent" in spoiled and ndim:
        axis = draw(st.integers(0, ndim - 1))
        shape[axis] = draw(st.integers(-3, -1) if readable else BAD["extent"])
    kwargs = {
        "shape": tuple(shape),
        "dtype": field("dtype"),
        "versioned": "legacy" not in spoiled,
        "device": field("device"),
        "byte_offset": field("byte_offset") if not readable else draw(st.sampled_from([0, 8, 256])),
    }
    kwargs["version"] = field("version") if kwargs["versioned"] else (1, 3)
    kwargs["flags"] = field("flags") if kwargs["versioned"] else 0
    if "strides" in spoiled:
        kwargs["strides"] = "null"  # valid only in legacy and pre-1.2 capsules
    elif draw(st.booleans()):
        stride = VALID["stride"] if readable or "stride" not in spoiled else st.one_of(VALID["stride"], BAD["stride"])
        kwargs["strides"] = tuple(draw(stride) for _ in range(ndim))
    if "shape_null" in spoiled:
        kwargs["shape_null"] = True
    if "ndim" in spoiled:
        kwargs["ndim"] = draw(BAD["ndim"])
    if "data" in spoiled:
        kwargs["data"] = draw(st.sampled_from([None] if readable else [None, 0x1001]))
    if "deleter" in spoiled:
        kwargs["deleter"] = False
    return kwargs


names = st.one_of(
    st.just(None), st.just(None), st.just(None),
    st.sampled_from([NAME_USED_VERSIONED, NAME_USED_LEGACY, b"", b"dltensor_versioned ", b"DLTENSOR", "null"]),
    st.binary(min_size=1, max_size=24).filter(lambda b: b"\x00" not in b and b not in (NAME_VERSIONED, NAME_LEGACY)),
)


# --- the oracle -------------------------------------------------------------------

def _c_strides(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def _wrap_int64(v):
    """v as an int64 field holds it (C-contiguous strides of a huge empty
    shape overflow; the producer writes them wrapped)."""
    return ((v + 2**63) % 2**64) - 2**63


def expected_array(kw):
    """What a capsule made with these fields must import as: a dict of the
    Array's metadata, or None when the rules of docs/semantics.md refuse it."""
    versioned = kw["versioned"]
    major, minor = kw["version"]
    if versioned and major != 1:
        return None
    ndim = len(kw["shape"]) if kw.get("ndim") is None else kw["ndim"]
    if not 0 <= ndim <= MAX_NDIM:
        return None
    if tuple(kw["dtype"]) not in VALID_DTYPES:
        return None
    device_type, device_id = kw["device"]
    if device_type not in SUPPORTED_DEVICE_TYPES or device_id < 0:
        return None
    # The factory pads shape with 1 (strides with 0) up to an ndim override.
    shape = (tuple(kw["shape"]) + (1,) * ndim)[:ndim]
    if ndim > 0 and kw.get("shape_null"):
        return None
    null_strides = kw.get("strides") == "null"
    if ndim > 0 and null_strides and versioned and minor >= 2:
        return None
    if any(n < 0 for n in shape):
        return None
    size = 1
    for n in shape:
        size *= n   # exact: a zero extent makes any shape's count 0 (docs/guarantees.md)
    if size > INT64_MAX:
        return None
    if null_strides:
        given = _c_strides(shape)
    else:
        given = _c_strides(tuple(kw["shape"])) if kw.get("strides") is None else tuple(kw["strides"])
    strides = tuple(_wrap_int64(s) for s in (given + (0,) * ndim)[:ndim])
    flags = kw["flags"] & (FLAG_READ_ONLY | FLAG_IS_SUBBYTE_TYPE_PADDED) if versioned else 0
    code, bits, lanes = kw["dtype"]
    storage_bits = bits * lanes
    if storage_bits < 8 and flags & FLAG_IS_SUBBYTE_TYPE_PADDED:
        storage_bits = 8
    if storage_bits and size > (INT64_MAX - 7) // storage_bits:
        return None   # the tensor's bytes must fit int64 too
    if size > 0:
        if any(s >= INT64_MAX or s < -INT64_MAX for s in strides):
            return None
        span = sum(abs(s) * (n - 1) for n, s in zip(shape, strides) if n > 1)
        if span > INT64_MAX or span + 1 > INT64_MAX // storage_bits:
            return None
        if not kw.get("data", "alloc"):
            return None
    if kw["byte_offset"] > INT64_MAX:
        return None
    return {"shape": shape, "strides": strides, "dtype": (code, bits, lanes),
            "device": (device_type, device_id), "readonly": bool(flags & FLAG_READ_ONLY),
            "subbyte_padded": bool(flags & FLAG_IS_SUBBYTE_TYPE_PADDED),
            "byte_offset": kw["byte_offset"]}


def test_oracle_dtypes_match_the_public_table():
    assert VALID_DTYPES == {dt.__dlpack_data_type__() for dt in dlpack_ref.DTYPES.values()}


# --- checks, shared with tools/fuzz_long.py and tools/atheris_fuzz.py ----------

def _describe(a):
    return {"shape": a.shape, "strides": a.strides, "dtype": a.dtype.__dlpack_data_type__(),
            "device": tuple(int(v) for v in a.__dlpack_device__()), "readonly": a.readonly,
            "subbyte_padded": a.subbyte_padded}


def _check_reexport(a, data_ptr):
    """The accepted Array exports the same tensor again (versioned, zero-copy).
    CUDA-family memory is ordered for the export through the CUDA layer: with
    no cuda-python, or for a device this machine (or the simulated driver)
    does not have, that is a CUDAUnavailableError (a BufferError) saying so."""
    try:
        cap = a.__dlpack__(max_version=(1, 3))
    except CUDAUnavailableError as exc:
        assert a.device.type != 1 and str(exc), repr(exc)
        _outcome("re-export refused: CUDA unavailable for this device")
        return
    fields = read_capsule(cap)
    assert fields["data"] + fields["byte_offset"] == data_ptr
    assert fields["shape"] == a.shape and fields["strides"] == a.strides
    assert fields["dtype"] == a.dtype.__dlpack_data_type__()
    assert bool(fields["flags"] & FLAG_READ_ONLY) == a.readonly
    assert bool(fields["flags"] & FLAG_IS_SUBBYTE_TYPE_PADDED) == a.subbyte_padded


def check_capsule(kw, name):
    """Import one hand-built capsule and check every property."""
    _log("capsule", (kw, name))
    f = CapsuleFactory()
    cap = f.make(name=name, **kw)
    has_deleter = kw.get("deleter", True)
    data = f.last_data
    info = dlpack_ref.inspect(cap)  # reading a capsule never consumes it
    assert info["consumed"] is False or name in (NAME_USED_VERSIONED, NAME_USED_LEGACY)
    standard = name is None
    expected = expected_array(kw) if standard else None
    try:
        a = dlpack_ref.from_dlpack(cap)
    except DOCUMENTED as exc:
        _outcome("capsule refused")
        assert type(exc) is BufferError, f"a bad capsule must raise BufferError, not {type(exc).__name__}: {exc}"
        assert str(exc), "the error must say what is wrong"
        assert expected is None, f"a valid capsule was refused: {exc}"
        if standard:
            # Taken, then refused: the deleter already ran, exactly once.
            assert capsule_name(cap) == (NAME_USED_VERSIONED if kw["versioned"] else NAME_USED_LEGACY)
            assert f.deleter_calls == (1 if has_deleter else 0)
        else:
            assert capsule_name(cap) == (None if name == "null" else name), "a foreign capsule was renamed"
            assert f.deleter_calls == 0
    else:
        _outcome("capsule accepted")
        assert expected is not None, f"an invalid capsule was accepted: {_describe(a)}"
        described = {k: v for k, v in expected.items() if k != "byte_offset"}
        assert _describe(a) == described, f"imported as {_describe(a)}, expected {described}"
        assert a.data_ptr == (data + expected["byte_offset"]) % 2**64, "data pointer moved"
        assert f.deleter_calls == 0, "the deleter ran while the Array is alive"
        with pytest.raises(BufferError, match="already consumed"):
            dlpack_ref.from_dlpack(cap)
        _check_reexport(a, a.data_ptr)
        # Reading the elements: only where the factory allocated them all, and
        # small (tolist of an empty (10**12, 0) shape is a list of 10**12 lists).
        if (a.device.type == 1 and kw.get("data", "alloc") == "alloc" and kw["byte_offset"] < 4096
                and all(n <= 8 for n in a.shape) and all(abs(s) <= 64 for s in a.strides)):
            try:
                a.tolist()
            except BufferError:
                pass  # e.g. strided packed sub-byte data: refused, never misread
        del a
        assert f.deleter_calls == (1 if has_deleter else 0)
    del cap
    assert f.deleter_calls == (1 if has_deleter else 0), "deleter not called exactly once"
    assert f.live == 0


class RetainingProducer(ForeignProducer):
    """A ForeignProducer that also keeps what it returned, so the test drops
    the capsules itself. dlpack_ref.testing's capsule destructor is a ctypes
    callback, which cannot run while an exception is pending (every ctypes
    call in it fails and the pending exception is lost); keeping the
    capsules here makes them die after the consumer's exception is caught."""

    def __init__(self, *args, lie_device=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.returned = []
        self.made = []  # (capsule, factory id) of each capsule made here
        self.lie_device = lie_device

    def __dlpack_device__(self):
        return self.lie_device if self.lie_device is not None else super().__dlpack_device__()

    def __dlpack__(self, **kwargs):
        before = self.factory.last_id
        out = super().__dlpack__(**kwargs)
        if self.factory.last_id != before:
            self.made.append((out, self.factory.last_id))
        self.returned.append(out)
        return out


_RAISED = [RuntimeError("producer failed"), TypeError("producer type error"),
           BufferError("producer cannot export"), ValueError("producer value error"), KeyError("k")]
_RETURNED = [5, "capsule", b"\x00" * 8, (), "foreign-capsule"]


@st.composite
def producers(draw):
    kw = draw(tensor_fields(readable=True))
    kw.pop("versioned")  # the producer decides from max_version
    device = kw.pop("device")
    behaviour = draw(st.sampled_from(["normal", "normal", "normal", "legacy_only", "raises", "returns", "lies"]))
    spec = {"behaviour": behaviour, "device": device, "make": kw}
    if behaviour == "raises":
        spec["raises"] = draw(st.integers(0, len(_RAISED) - 1))
    elif behaviour == "returns":
        spec["returns"] = draw(st.integers(0, len(_RETURNED) - 1))
    elif behaviour == "lies":
        spec["lie_device"] = draw(st.one_of(VALID["device"], BAD["device"]))
    spec["request"] = {
        "device": draw(st.sampled_from([None, None, "cpu", (1, 0), "cuda:0", (13, 0), (3, 0), (2, 1)])),
        "copy": draw(st.sampled_from([None, None, True, False])),
    }
    return spec


def check_producer(spec):
    """from_dlpack on a (mis)behaving producer, with device/copy requests."""
    _log("producer", spec)
    f = CapsuleFactory()
    kwargs = {"device": spec["device"], **spec["make"]}
    raised = returns = None
    if spec["behaviour"] == "legacy_only":
        kwargs["legacy_only"] = True
    elif spec["behaviour"] == "raises":
        raised = kwargs["raises"] = _RAISED[spec["raises"]]
    elif spec["behaviour"] == "returns":
        returns = _RETURNED[spec["returns"]]
        if returns == "foreign-capsule":
            returns = f.make(name=b"not_a_dlpack_capsule")
        kwargs["returns"] = returns
    p = RetainingProducer(f, lie_device=spec.get("lie_device"), **kwargs)
    request = {k: v for k, v in spec["request"].items() if v is not None}
    try:
        a = dlpack_ref.from_dlpack(p, **request)
    except BaseException as exc:
        _outcome(f"producer: {type(exc).__name__}")
        if raised is not None and exc is raised:
            pass  # the producer's own exception comes out unchanged
        else:
            assert isinstance(exc, DOCUMENTED), f"undocumented {type(exc).__name__}: {exc}"
            assert str(exc), "the error must say what is wrong"
        if returns is not None and type(returns).__name__ != "PyCapsule" and p.calls:
            assert type(exc) is TypeError and "not a DLPack capsule" in str(exc), repr(exc)
        if isinstance(exc, ValueError) and "copy=False" in str(exc):
            assert isinstance(exc, dlpack_ref.CopyForbiddenError)
        # Capsules the consumer took (renamed) were released before it raised.
        if made_with_deleter(spec):
            for cap, cap_id in p.made:
                if capsule_name(cap) in (NAME_USED_VERSIONED, NAME_USED_LEGACY):
                    assert f.calls_for(cap_id) == 1, "a consumed capsule's deleter did not run on the error path"
    else:
        _outcome("producer: accepted")
        assert isinstance(a, dlpack_ref.Array)
        made = spec["make"]
        assert a.shape == tuple(made["shape"]) + (1,) * (len(a.shape) - len(made["shape"]))
        assert a.dtype.__dlpack_data_type__() == tuple(made["dtype"])
        # A versioned capsule flagged IS_COPIED is the producer's copy: trusted.
        producer_copied = (bool(p.made) and capsule_name(p.made[-1][0]) == NAME_USED_VERSIONED
                           and made["flags"] & FLAG_IS_COPIED)
        if request.get("copy") is True and not producer_copied:
            assert a.data_ptr != f.last_data + made["byte_offset"] or a.size == 0
        if request.get("copy") is False:
            assert a.data_ptr == (f.last_data + made["byte_offset"]) % 2**64
        if request.get("device") in ("cpu", (1, 0)):
            assert dlpack_ref.can_access("cpu", a.device)
        del a
    made_ids = [cap_id for _, cap_id in p.made]
    del p.returned[:], p.made[:]
    expected_calls = len(made_ids) if made_with_deleter(spec) else 0
    assert f.deleter_calls == expected_calls, f"{f.deleter_calls} deleter calls for {len(made_ids)} capsules"
    if made_with_deleter(spec):
        assert all(f.calls_for(i) == 1 for i in made_ids)


def made_with_deleter(spec):
    return spec["make"].get("deleter", True)


# --- the properties (run in the child process) -----------------------------------

@child_only
@fuzz_settings
@given(tensor_fields(), names)
def test_capsule_fields(kw, name):
    check_capsule(kw, name)


@child_only
@fuzz_settings
@given(producers())
def test_producer_behaviour(spec):
    check_producer(spec)


@child_only
@fuzz_settings
@given(tensor_fields())
def test_capsule_consumed_twice_and_inspected(kw):
    """Whatever the fields, a standard capsule is consumed at most once."""
    _log("twice", kw)
    f = CapsuleFactory()
    cap = f.make(**kw)
    results = []
    for _ in range(2):
        try:
            results.append(dlpack_ref.from_dlpack(cap))
        except BufferError as exc:
            results.append(exc)
    assert isinstance(results[1], BufferError) and "already consumed" in str(results[1])
    assert dlpack_ref.inspect(cap)["consumed"] is True
    del results
    assert f.deleter_calls == (1 if kw.get("deleter", True) else 0)


CHILD_PROPERTIES = ["test_capsule_fields", "test_producer_behaviour", "test_capsule_consumed_twice_and_inspected"]


def run_child(prop, examples, log_path, timeout=None, extra_args=()):
    """Run one property in a fresh interpreter; returns the CompletedProcess."""
    env = dict(os.environ, DLPACK_REF_FUZZ_CHILD="1", DLPACK_REF_FUZZ_EXAMPLES=str(examples),
               DLPACK_REF_FUZZ_LOG=log_path)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
           f"{os.path.abspath(__file__)}::{prop}", *extra_args]
    # Under AddressSanitizer (tools/sanitize.sh) the shadow memory needs far
    # more address space than the limit allows.
    limit = sys.platform.startswith("linux") and not os.environ.get("DLREF_SANITIZER")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limit_memory if limit else None)


# A consumer that trusted a huge shape would try to allocate or touch it:
# the child gets an address-space limit, so that shows up as a failure (an
# error or a crash) instead of exhausting the machine.
CHILD_ADDRESS_SPACE = 4 * 2**30


def _limit_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


def last_input(log_path):
    try:
        with open(log_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, 0
    return (lines[-1] if lines else None), len(lines)


@pytest.mark.skipif(CHILD, reason="the parent of the fuzz subprocesses")
@pytest.mark.parametrize("prop", CHILD_PROPERTIES)
def test_fuzz_in_subprocess(prop, tmp_path):
    log_path = str(tmp_path / f"{prop}.log")
    r = run_child(prop, EXAMPLES, log_path, timeout=600)
    last, count = last_input(log_path)
    assert r.returncode == 0, (
        f"{prop} failed (exit status {r.returncode}) after {count} inputs; last input:\n{last}\n"
        f"{r.stdout[-4000:]}\n{r.stderr[-2000:]}")
    assert count >= min(EXAMPLES, 50), f"only {count} inputs ran"
