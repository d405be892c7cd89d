"""Verdicts only from what the checker observed, limited libraries judged
evenly, and every cell of a report explained.

Each library here is made to behave as real ones do where the checker
cannot see: a consumer that refuses before it looks at the capsule (one
that must be set up first, a GPU library handed CPU memory), a consumer or
producer with 1-D arrays only, results that cannot export again, views the
checker's reader cannot read, a probe that raises. Each is checked as a
user's subject is (in a forked child), or by name through the generic
adapter and factory hooks (a module written to a folder on PYTHONPATH)."""

from __future__ import annotations

import json
import re
import signal
import struct

import pytest

import dlpack_ref as dr
from dlpack_ref import conformance as conf
from dlpack_ref.conformance import Consumer, NotSupported, Producer, Status
from dlpack_ref.conformance.gate import AllowList
from dlpack_ref.conformance.model import Result
from dlpack_ref.conformance.rules import entries
from dlpack_ref.conformance.report import LibraryRun, Run, render
from dlpack_ref.harness.exchange import cell_text, exchange
from dlpack_ref.harness.outcome import Failure, failure_json
from dlpack_ref.harness.registry import subject as library
from dlpack_ref.testing import CapsuleFactory, ForeignProducer, read_values
from support import command

pytestmark = pytest.mark.harness

RULES = {e.rule.id: e.rule for e in entries()}
CONSUMER_RULES = [rule for rule in RULES if rule.startswith("consumer.")]
#: Rules about a malformed capsule, which a consumer passes by refusing it.
MALFORMED = ["consumer.bad_name", "consumer.used_name", "consumer.ndim_negative", "consumer.shape_negative",
             "consumer.shape_null", "consumer.data_null", "consumer.extent_overflow", "consumer.dtype_unknown_code",
             "consumer.dtype_bad_bits", "consumer.dtype_lanes", "consumer.producer_returns_non_capsule"]


def checked(**kwargs) -> dict[str, Result]:
    return {r.rule.id: r for r in conf.check(**kwargs)}


# --- a consumer is judged only where it looked at the capsule ---------------------------------------

def test_a_consumer_that_refuses_before_calling_dlpack_is_judged_on_nothing():
    # Before: it passed every malformed-capsule rule, and failed max_version_passed with the producer never asked.
    def uninitialised(x, **kwargs):
        raise RuntimeError("call mylib.init() first")

    results = checked(from_dlpack=uninitialised, name="uninitialised")
    judged = {rule: r.line() for rule, r in results.items() if r.status is not Status.NOT_SUPPORTED}
    assert judged == {}
    for rule in (*MALFORMED, "consumer.max_version_passed", "consumer.null_strides_legacy"):
        assert results[rule].detail.startswith("from_dlpack raised RuntimeError before it called __dlpack__"), \
            results[rule].line()
        assert results[rule].exc_type == "RuntimeError"


def test_a_gpu_library_handed_cpu_memory_is_judged_only_on_the_devices_it_read():
    # CuPy's answer: __dlpack_device__ read, CPU memory refused before __dlpack__ is called.
    def gpu_only(x, **kwargs):
        device = x.__dlpack_device__()
        raise BufferError(f"cannot import memory of device {tuple(device)} without a GPU")

    results = checked(from_dlpack=gpu_only, name="gpu-only")
    for rule in (*MALFORMED, "consumer.max_version_passed", "consumer.zero_copy_import"):
        assert results[rule].status is Status.NOT_SUPPORTED, results[rule].line()
        assert "before it called __dlpack__" in results[rule].detail
    # it read the device of the cases about a device, and refused them as the standard asks
    for rule in ("consumer.device_opencl", "consumer.device_cuda_unreachable"):
        assert results[rule].status is Status.PASS, results[rule].line()


def test_a_capsule_taking_consumer_that_refuses_a_valid_capsule_too_is_not_judged_on_a_malformed_one():
    def refuses_all(capsule, **kwargs):
        raise RuntimeError("no runtime loaded")

    c = Consumer("refuses-all", refuses_all, capsule_request={"max_version": (1, 3)})
    results = checked(from_dlpack=c, name="refuses-all", only=MALFORMED)
    for rule in MALFORMED:
        r = results[rule]
        assert r.status is Status.NOT_SUPPORTED, r.line()
        assert re.search(r"it refuses a valid float64 tensor of shape \((3,|2, 2)\) too \(RuntimeError: no runtime "
                         r"loaded\), so its refusal here says nothing of the rule", r.detail), r.line()


# --- limited libraries judged evenly ---------------------------------------------------------------

def one_d_only(x, **kwargs):
    """A consumer that holds 1-D arrays only: it imports, then refuses any other shape."""
    r = dr.from_dlpack(x, **kwargs)
    if r.ndim != 1:
        raise ValueError(f"only 1-D arrays, not {r.ndim}-D")
    return r


def test_a_1d_consumer_is_not_failed_for_a_shape_it_cannot_hold():
    # Before: null_strides_v1_1 and null_strides_legacy failed ("refused") on their (2, 2) tensors.
    c = Consumer("1-d", one_d_only, data_ptr=lambda r: r.data_ptr, readonly=lambda r: r.readonly)
    results = checked(from_dlpack=c, name="1-d")
    for rule in ("consumer.null_strides_v1_1", "consumer.null_strides_legacy", "consumer.null_strides_v1_3"):
        r = results[rule]
        assert r.status is Status.NOT_SUPPORTED, r.line()
        assert "tensor of shape (2, 2) too (ValueError: only 1-D arrays, not 2-D)" in r.detail
    # the rules whose point holds in 1-D ask for 1-D tensors, and are judged
    failed = {rule: r.line() for rule, r in results.items() if r.status is Status.FAIL}
    assert failed == {}
    for rule in ("consumer.zero_copy_import", "consumer.byte_offset", "consumer.bad_name",
                 "consumer.shape_negative", "consumer.size_zero_null_data", "consumer.data_null"):
        assert results[rule].status is Status.PASS, results[rule].line()


def one_d_factory():
    own = library("dlpack_ref").producer

    def make(dtype, shape, readonly=False):
        if len(shape) != 1:
            raise NotSupported(f"1-D arrays only; no array of shape {shape}")
        return own.factory(dtype, shape, readonly)
    return make


def test_a_1d_producer_is_asked_for_1d_arrays_where_the_rule_s_point_holds_in_1d():
    # Before: all 26 producer rules "not supported" for pyarrow, whose arrays are 1-D.
    results = checked(producer_factory=one_d_factory(), name="1-d")
    unsupported = {rule for rule, r in results.items() if r.status is Status.NOT_SUPPORTED}
    assert unsupported == {"producer.zero_dim", "producer.scalar", "producer.buffererror_for_unexportable"}
    assert "no array of shape ()" in results["producer.zero_dim"].detail
    assert [r.line() for r in results.values() if r.failed] == []
    assert results["producer.strides_not_null"].detail.startswith("strides (1,)")
    assert results["producer.size_zero"].detail.startswith("shape (0,)")


# --- values read by the library's own means, and the checker's blindness is no verdict --------------

class Held:
    """A result without __dlpack__ (a lazy or foreign type), with its own tolist."""

    def __init__(self, array):
        self.array = array

    def tolist(self):
        return self.array.tolist()


class Opaque:
    """A result the checker has no way to read."""

    def __init__(self, array):
        self.array = array


@pytest.mark.parametrize("wrapper, status", [(Held, Status.PASS), (Opaque, Status.NOT_SUPPORTED)],
                         ids=["own-tolist", "unreadable"])
def test_a_result_that_cannot_export_again_is_read_by_its_own_means_or_not_judged(wrapper, status):
    # Before: both failed with "values unreadable", though the import was right.
    c = Consumer("wrapped", lambda x, **kw: wrapper(dr.from_dlpack(x, **kw)), data_ptr=lambda r: r.array.data_ptr,
                 readonly=lambda r: r.array.readonly)
    rules = ["consumer.zero_copy_import", "consumer.byte_offset", "consumer.negative_strides",
             "consumer.null_deleter"]
    results = checked(from_dlpack=c, name="wrapped", only=rules)
    for rule in rules:
        assert results[rule].status is status, results[rule].line()
    if status is Status.NOT_SUPPORTED:
        assert "values cannot be read, by DLPack or the library's own means" in results["consumer.byte_offset"].detail


def test_memory_the_cpu_reaches_is_read_whatever_its_device_type_and_a_handle_never(factory):
    # host-visible oneAPI USM: before, "memory on device (14, 0) is not readable here"
    usm = factory.make(shape=(3,), dtype=(2, 64, 1), device=(14, 0), fill=struct.pack("<3d", 1.0, 2.0, 3.0))
    assert read_values(usm) == [1.0, 2.0, 3.0]
    # a device address the CPU cannot reach is not read (no crash), nor is an OpenCL handle's memory
    unmapped = factory.make(shape=(3,), dtype=(2, 64, 1), device=(2, 0), data=0xDEAD0000)
    with pytest.raises(BufferError, match=r"memory on device \(2, 0\) is not readable here"):
        read_values(unmapped)
    handle = factory.make(shape=(3,), dtype=(2, 64, 1), device=(4, 0))
    with pytest.raises(BufferError, match=r"memory on device \(4, 0\) is not readable here"):
        read_values(handle)


def test_a_view_the_checker_cannot_read_is_not_counted_as_the_library_refusing():
    # Before: the reader's BufferError passed as "refused with BufferError".
    def views():
        return {"on an OpenCL device": ForeignProducer(CapsuleFactory(), shape=(3,), device=(4, 0))}

    [r] = conf.check(producer_factory=library("dlpack_ref").producer.factory, views=views, name="opencl-view",
                     only=["producer.view_values"])
    assert r.status is Status.NOT_SUPPORTED, r.line()
    assert "on an OpenCL device: not compared (the checker cannot read the export" in r.detail


def test_a_library_whose_own_reading_raises_is_not_an_error():
    # Before: a tolist (or an indexing) raising RuntimeError answered "error".
    def tolist(x):
        raise RuntimeError("indexing needs a device context")

    results = checked(producer_factory=library("dlpack_ref").producer.factory, tolist=tolist, name="no-reading",
                      only=["producer.view_values", "producer.zero_dim"])
    for r in results.values():
        assert r.status is Status.NOT_SUPPORTED, r.line()
        assert "cannot read its own values" in r.detail and "RuntimeError: indexing needs a device context" in r.detail


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("observed")
    (folder / "needs_init.py").write_text(
        "def from_dlpack(x, **kwargs):\n    raise RuntimeError('needs_init.init() was not called')\n")
    (folder / "refuses_everything.py").write_text(
        "from dlpack_ref.conformance import Consumer\n\n"
        "def refuse(x, **kwargs):\n    raise RuntimeError('no device here')\n\n"
        "def __dlpack_conformance__():\n    return None, Consumer('refuses_everything', refuse)\n")
    with command.support_importable(str(folder)):
        yield folder


def test_a_probe_that_raises_is_an_answer_not_an_error(modules):
    # Before: the generic adapter's probe let the RuntimeError escape: every consumer rule answered "error".
    rc, out, err = command.run(["check", "--library", "needs_init", "--format", "json", "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    results = {r["check"]: r for r in lib["results"]}
    assert [rule for rule, r in results.items() if r["status"] == "error"] == []
    assert set(results) == set(CONSUMER_RULES)
    assert results["consumer.max_version_passed"]["status"] == "not supported"
    assert "before it called __dlpack__" in results["consumer.max_version_passed"]["detail"]
    assert rc == 0, err[-2000:]
    # why it has no producer is kept beside the consumer's results
    assert lib["note"].startswith("no producer: needs_init.from_dlpack of NumPy arrays was tried, and RuntimeError")


def test_bench_exits_3_when_a_named_library_has_nothing_timed(modules):
    # Before: "nothing to compare", exit 0.
    rc, out, err = command.run(["bench", "--library", "refuses_everything", "--quick", "--format", "json"])
    assert rc == 3, err[-2000:]
    assert "refuses_everything: none of its calls could be timed" in err
    json.loads(out)  # the report is still written


# --- every cell explained ---------------------------------------------------------------------------

def test_a_factory_s_not_supported_is_a_not_supported_cell():
    # Before: the NotSupported escaped the exchange, and the matrix cell read "error".
    def make(dtype, shape, readonly=False):
        raise NotSupported(f"no {dtype} arrays here")

    cell = exchange(Producer("no-float32", make), library("dlpack_ref").consumer)
    assert cell_text(cell) == "n/s"
    assert cell["not_supported"].startswith("no float32 arrays here")


def _run_of_every_kind() -> Run:
    rule = RULES["producer.zero_dim"]
    results = [Result(rule, status, f"{status.value} detail", subject="lib") for status in Status]
    results.append(Result(RULES["consumer.shape_null"], Status.FAIL,
                          "the consumer crashed the process (killed by SIGSEGV)", subject="lib", crash="SIGSEGV"))
    cells = {("lib", "lib"): {"works": True, "zero_copy": True, "values_ok": True},
             ("lib", "other"): {"works": True, "zero_copy": False, "values_ok": True},
             ("other", "lib"): {"works": True, "zero_copy": None, "values_ok": True, "note": "pointer unreadable"},
             ("other", "other"): {"works": True, "zero_copy": True, "values_ok": False},
             ("third", "lib"): {"works": False, "exc_type": "BufferError", "exc_message": "no"},
             ("third", "other"): {"works": False, "not_supported": "no float32 arrays here"},
             ("lib", "third"): failure_json(Failure.ended(-signal.SIGSEGV)),
             ("other", "third"): failure_json(Failure.timed_out(60)),
             ("third", "third"): failure_json(Failure.raised("RuntimeError", "the worker failed"))}
    libraries = {name: LibraryRun(name, "1", results if name == "lib" else [], adapter="")
                 for name in ("lib", "other", "third")}
    return Run(libraries, [], {}, cells, AllowList(), None, [], [], 1)


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_every_cell_is_in_its_legend_and_every_non_pass_cell_has_a_line(fmt):
    from dlpack_ref.conformance.report import CHECK_LEGEND
    from dlpack_ref.harness.exchange import CELL_LEGEND
    run = _run_of_every_kind()
    out = render(run, fmt)
    text = out.replace("\\", "")
    legends = [line for line in text.splitlines() if line.startswith("Legend: ")]
    assert len(legends) == 3  # producer, consumer and matrix grids
    for word in ("ok", "FAIL", "n/s", "ERR", "CRASH (SIG)"):
        assert f"{word} = " in legends[0]
    for cell in run.matrix.values():
        word = cell_text(cell)
        general = {"refused (BufferError)": "refused (X)", "CRASH (SIGSEGV)": "CRASH (SIG)"}.get(word, word)
        assert f"{general} = " in legends[2], word
    assert set(CELL_LEGEND) >= {cell_text(c) for c in run.matrix.values()} - {"refused (BufferError)",
                                                                               "CRASH (SIGSEGV)"}
    assert set(CHECK_LEGEND) >= {"ok", "FAIL", "n/s", "ERR"}
    failures = text.split("Failures\n", 1)[1].split("Not supported\n", 1)[0]
    unsupported = text.split("Not supported\n", 1)[1].split("Gate", 1)[0]
    assert "lib: producer.zero_dim: not supported detail" in unsupported
    for pair in ("other -> lib: ok (?)", "third -> other: n/s: no float32 arrays here"):
        assert pair in unsupported
    for pair in ("other -> other: WRONG VALUES", "third -> lib: refused (BufferError): BufferError: no",
                 "lib -> third: CRASH (SIGSEGV)", "other -> third: HANG", "third -> third: error"):
        assert pair in failures
    for pair in ("lib -> lib", "lib -> other"):  # in place, and a copy: nothing to explain
        assert pair not in failures + unsupported
