"""The checker on every library it knows, and on hand-made libraries built
like them: no rule answers "error"; each failure's reproduction, run in a
fresh interpreter, shows the same failure; a rule asks a producer only what
its declared capability allows and judges only its own point; a library
not shaped like NumPy is judged as what it is.

The tests of a library skip, with the reason, where it is not installed
(every lane but the ecosystem lane lacks the libraries whose files say
``lane="ecosystem"``)."""

from __future__ import annotations

import concurrent.futures
import functools
import gc
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack_ref as dr
from dlpack_ref import conformance as conf
from dlpack_ref.conformance import Consumer, Status
from dlpack_ref.conformance.model import result_from_dict
from dlpack_ref.conformance.rules import entries
from dlpack_ref.harness.registry import KNOWN, in_lane, installed, subject as library, version_of
from dlpack_ref.harness.subject import keywords_taken
from dlpack_ref.testing import DELETER_T, CapsuleFactory, ForeignProducer, read_capsule
from support import command
from support.hostile_libraries import hostile  # noqa: F401 (a fixture of this module's tests)

pytestmark = pytest.mark.harness

INSTALLED, _ = installed()
RULES = {e.rule.id: e.rule for e in entries()}


@functools.lru_cache(maxsize=None)
def _report(lib: str) -> dict:
    """The JSON report of ``dlpack-ref check --library lib``, run as a user
    runs it (the library is imported in child processes only, not in
    pytest's, which forks for other tests)."""
    rc, out, err = command.run(["check", "--library", lib, "--format", "json", "--no-matrix"])
    assert rc in (0, 1), err[-2000:]
    [library_report] = json.loads(out)["libraries"]
    return {r["check"]: r for r in library_report["results"]}


#: The committed runs docs/ecosystem.md's tables are generated from.
COMMITTED = [Path(__file__).resolve().parent.parent / "benchmarks" / "results" / f"ecosystem_{n}.json" for n in (1, 2)]


@functools.lru_cache(maxsize=None)
def _committed_run(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _committed(lib: str) -> tuple[dict, dict]:
    """(the committed run that checked ``lib``, its report of ``lib``); skips where none did."""
    for path in COMMITTED:
        run = _committed_run(path)
        for report in run["libraries"]:
            if report["name"] == lib and report["checked"]:
                return run, report
    pytest.skip(f"no committed run checked {lib}")


def test_the_committed_runs_hold_every_rule_of_todays_checker_in_its_order():
    # a run made before a rule was added, renamed or moved gives the page tables that are not the checker's
    order = [e.rule.id for e in entries()]
    side = {e.rule.id: e.side for e in entries()}
    for path in COMMITTED:
        for report in _committed_run(path)["libraries"]:
            if report["checked"]:
                ids = [r["check"] for r in report["results"]]
                sides = {side.get(i) for i in ids}
                assert ids == [i for i in order if side[i] in sides], (path.name, report["name"])


@pytest.mark.parametrize("lib", in_lane("ecosystem"))
def test_the_committed_run_gives_todays_verdicts_where_it_ran_what_is_installed(lib):
    # the page shows the committed run: where the library, NumPy and Python are the versions it ran
    # (the ecosystem lane's are, until a library releases), each rule's verdict must be today's
    run, committed = _committed(lib)
    today = _library(lib)
    numpy = {r["name"]: r["version"] for r in run["libraries"]}.get("numpy")
    ran = (committed["version"], numpy, run["environment"]["python"].rsplit(".", 1)[0])
    here = (version_of(lib), version_of("numpy") if numpy else None, platform.python_version().rsplit(".", 1)[0])
    if ran != here:
        pytest.skip(f"the committed run had {lib}, NumPy and Python {ran}, here {here}")
    changed = {r["check"]: (r["status"], today[r["check"]].status.value) for r in committed["results"]
               if r["status"] != today[r["check"]].status.value and (lib, r["check"]) not in _UNDEFINED}
    assert changed == {}, "rerun the committed run (its command is on docs/ecosystem.md), then tools/docs_figures.py"


def _library(lib: str) -> dict:
    """Rule id -> Result of ``lib``; skips where it is not installed."""
    if lib not in INSTALLED:
        pytest.skip(f"{lib} is not installed here")
    return {rule: result_from_dict(r, RULES[rule]) for rule, r in _report(lib).items()}


# --- every known library ----------------------------------------------------------------

@pytest.mark.parametrize("lib", list(KNOWN))
def test_no_rule_answers_error(lib):
    errors = [r.line() for r in _library(lib).values() if r.status is Status.ERROR]
    assert errors == []


# Failures whose outcome depends on memory the library corrupted: the
# checker and a reproduction may see a crash, a wrong answer, or even a
# refusal, as the rule asks, where the corrupted memory happens to hold what
# the library refuses; which one varies from run to run and with the heap's
# layout. Their reproductions must run to one of the rule's ends (a crash,
# "observed:" and exit 1, or "ok:" and exit 0), not show the failure. A
# library that reads memory the checker's capsules freed (mlx's
# consumed_twice) is not among them: those capsules keep freed memory as it
# was, so its verdict and reproduction are the same in every run (before,
# mlx's reproduction showed the failure in 1 run of 20).
_UNDEFINED = {
    ("mlx", "consumer.shape_negative"): "mlx imports a negative extent and corrupts the heap",
}


def _run_reproduction(source: str, path) -> subprocess.CompletedProcess:
    path.write_text(source)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=180)


def _observation(run: subprocess.CompletedProcess) -> str | None:
    """The key of the reproduction's ``observed:`` line: its text up to the
    first bracket, colon or equals sign, where addresses and messages start."""
    lines = [line for line in run.stdout.splitlines() if line.startswith("observed: ")]
    return re.split(r"[(\[{:]", lines[-1][len("observed: "):])[0].strip() if lines else None


def mismatch(result, run: subprocess.CompletedProcess, undefined: bool = False) -> str | None:
    """Why a reproduction's outcome is not the checker's verdict (None: it
    is). A crash is reproduced by any fatal signal: which one a crash on
    undefined behaviour raises may differ from run to run (SIGSEGV, SIGBUS)."""
    shown = f"exit {run.returncode}, observed {_observation(run)!r}; {run.stderr[-300:]!r}"
    if undefined:
        ended = run.returncode < 0 or (run.returncode == 1 and _observation(run)) or (
            run.returncode == 0 and any(line.startswith("ok: ") for line in run.stdout.splitlines()))
        return None if ended else shown
    if result.crash:
        return None if run.returncode < 0 else shown
    key = _observation(run)
    return None if run.returncode == 1 and key and key in result.line() else shown


# A reproduction imports only its library: no dlpack-ref code runs in it, so
# the sanitizer lane (ASan preloaded into every child) has nothing to find
# there, and ASan turns the libraries' own aborts into its reports.
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


@pytest.mark.skipif(UNDER_ASAN, reason="reproductions run no dlpack-ref code; ASan rewrites the libraries' crashes")
@pytest.mark.parametrize("lib", list(KNOWN))
def test_each_failure_has_a_reproduction_that_shows_it(lib, tmp_path):
    # cuda.* rules fail only on a GPU (their reproductions need its driver)
    failures = [r for r in _library(lib).values() if r.status is Status.FAIL and not r.rule.id.startswith("cuda.")]
    if not failures:
        pytest.skip(f"{lib} fails no rule here")
    sources = {r.rule.id: _report(lib)[r.rule.id]["reproduction"] for r in failures}
    assert [rule for rule, source in sources.items() if source is None] == []
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(sources, pool.map(lambda item: _run_reproduction(item[1], tmp_path / f"{item[0]}.py"),
                                          sources.items())))
    whys = {r.rule.id: mismatch(r, runs[r.rule.id], (lib, r.rule.id) in _UNDEFINED) for r in failures}
    assert {rule: why for rule, why in whys.items() if why is not None} == {}


def test_an_undefined_outcome_s_reproduction_ends_as_the_rule_ends_or_is_wrong():
    failed = result_from_dict({"status": "fail", "detail": "accepted"}, RULES["consumer.shape_negative"])
    ends = [subprocess.CompletedProcess([], -11, "", ""),
            subprocess.CompletedProcess([], 1, "expected: x\nobserved: accepted", ""),
            subprocess.CompletedProcess([], 0, "ok: refused with ValueError", "")]
    assert [mismatch(failed, run, undefined=True) for run in ends] == [None, None, None]
    wrong = [subprocess.CompletedProcess([], 1, "", "Traceback (most recent call last): NameError"),
             subprocess.CompletedProcess([], 0, "", ""),
             subprocess.CompletedProcess([], 1, "expected: x\nerror: the check could not run", "")]
    assert all(mismatch(failed, run, undefined=True) is not None for run in wrong)


def test_any_fatal_signal_reproduces_a_crash():
    # torch's crash on ndim -1 is undefined behaviour: SIGSEGV in the check, SIGBUS in a reproduction
    crashed = result_from_dict({"status": "fail", "detail": "the consumer crashed the process (killed by SIGSEGV)",
                                "crash": "SIGSEGV"},
                               RULES["consumer.ndim_negative"])
    assert mismatch(crashed, subprocess.CompletedProcess([], -7, "", "")) is None
    assert mismatch(crashed, subprocess.CompletedProcess([], 1, "observed: accepted", "")) is not None


# The keywords of __dlpack__ each rule is about: no other may be named as
# the reason of a verdict of the four libraries the lead's issue tried.
_VERSIONED = {"consumer.null_strides_v1_1", "consumer.legacy_answer", "consumer.null_strides_v1_3",
              "consumer.minor_version_newer", "consumer.read_only", "consumer.copy_false_is_copied",
              "consumer.major_version_2"}
_ABOUT = {
    "max_version": {"producer.versioned_capsule", "producer.newer_major_requested", "producer.read_only_flag",
                    "producer.deleter_once", "consumer.max_version_passed", "consumer.legacy_fallback", *_VERSIONED},
    "copy": {"producer.copy_true_copies", "producer.copy_true_flag", "producer.copy_false_no_copy",
             "consumer.copy_true", "consumer.copy_false", "consumer.copy_false_is_copied",
             "consumer.zero_copy_import"},
    "dl_device": {"producer.dl_device_own", "producer.dl_device_unsupported"},
    "stream": {"producer.stream_cpu"},
}


def _stray_keywords(results: dict) -> list[str]:
    """Verdicts (fail, not supported) whose reason names a keyword their rule
    is not about: in the detail, or as the keyword a TypeError refused."""
    return [f"{r.rule.id} names {keyword}: {r.line()}" for r in results.values() if r.status is not Status.PASS
            for keyword, rules in _ABOUT.items()
            if r.rule.id not in rules and (re.search(rf"\b{keyword}(=| keyword)|\bno {keyword}\b", r.detail) or
                                           f"keyword argument '{keyword}'" in (r.exc_message or ""))]


@pytest.mark.parametrize("lib", in_lane("ecosystem"))
def test_no_reason_names_a_keyword_the_rule_does_not_test(lib):
    assert _stray_keywords(_library(lib)) == []


# --- the new libraries, judged as what they are --------------------------------------------

def test_onnxruntime_is_a_pre_1_0_producer_and_consumer():
    results = _library("onnxruntime")
    for rule in ("producer.versioned_capsule", "producer.copy_true_copies", "producer.dl_device_unsupported"):
        assert results[rule].status is Status.NOT_SUPPORTED, results[rule].line()
        assert "a pre-1.0 producer" in results[rule].detail
    # asked without max_version, stream=1 for CPU data is accepted: a finding of its own
    assert results["producer.stream_cpu"].status is Status.FAIL
    assert results["producer.stream_cpu"].detail == "stream=1 was accepted for CPU data"
    assert results["consumer.legacy_fallback"].status is Status.PASS
    assert results["consumer.shape_null"].detail == "the consumer crashed the process (killed by SIGSEGV)"


def test_tensorflow_refusals_are_verdicts_and_its_consumer_takes_capsules():
    results = _library("tensorflow")
    copies = results["producer.copy_true_copies"]
    assert copies.status is Status.FAIL and copies.exc_type == "RuntimeError"
    assert copies.detail.startswith("copy=True refused with RuntimeError")
    flag = results["producer.copy_true_flag"]
    assert flag.status is Status.NOT_SUPPORTED and "refused with RuntimeError, so there is no copy" in flag.detail
    for rule in ("consumer.max_version_passed", "consumer.legacy_fallback", "consumer.producer_buffererror"):
        assert results[rule].status is Status.NOT_SUPPORTED
        assert results[rule].detail.startswith("from_dlpack takes a capsule, not an object with __dlpack__")
    assert results["consumer.capsule_renamed"].status is Status.PASS
    assert results["consumer.zero_copy_import"].status is Status.PASS


def test_paddle_device_id_none_is_a_finding():
    results = _library("paddle")
    own = results["producer.dl_device_own"]
    assert own.status is Status.FAIL and own.exc_type == "TypeError"
    assert own.detail == "dl_device=(1, None) (its own __dlpack_device__()) raised"
    assert results["producer.dlpack_device_type"].detail == "device_id None is a NoneType, not an int"
    assert results["consumer.read_only"].detail == "imported READ_ONLY data as a writable array"


def test_mlx_copies_host_memory_and_says_so():
    results = _library("mlx")
    for rule in ("consumer.zero_copy_import", "consumer.copy_false"):
        assert results[rule].status is Status.NOT_SUPPORTED, results[rule].line()
        assert "cannot import this memory in place" in results[rule].detail


def test_mpi4py_buffers_are_judged_as_bytes():
    results = _library("mpi4py")
    assert results["consumer.zero_copy_import"].status is Status.PASS
    assert results["consumer.null_strides_v1_1"].status is Status.PASS
    for rule in ("consumer.dtype_unknown_code", "consumer.dtype_bad_bits", "consumer.dtype_lanes"):
        assert results[rule].status is Status.NOT_SUPPORTED
    # it asks for max_version=(1, 0) and refuses the legacy capsule a pre-1.0-answering producer returns
    assert results["consumer.legacy_answer"].status is Status.FAIL
    assert results["consumer.legacy_answer"].exc_message == "dlpack: invalid capsule object"


# --- the capability and refusal rules on hand-made producers and consumers --------------------

class _PreOneZero:
    """A pre-1.0 producer (onnxruntime's OrtValue): __dlpack__(stream=None) only."""

    def __init__(self, a):
        self._a = a

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

    def __dlpack__(self, *, stream=None):
        return self._a.__dlpack__(stream=stream)

    def tolist(self):
        return self._a.tolist()


def _dlpack_ref_factory(wrap):
    own = library("dlpack_ref").producer

    def make(dtype, shape, readonly=False):
        return wrap(own.factory(dtype, shape, readonly))
    return make


def test_the_capability_is_the_keywords_taken():
    assert keywords_taken(dr.zeros(3)) == {"max_version", "stream", "dl_device", "copy"}
    assert keywords_taken(_PreOneZero(dr.zeros(3))) == {"stream"}
    assert keywords_taken(ForeignProducer(CapsuleFactory(), legacy_only=True)) == {"stream"}


def test_a_pre_1_0_producer_is_asked_without_max_version():
    # Before: producer.stream_cpu failed with "stream=None raised (TypeError ... 'max_version')".
    results = {r.rule.id: r for r in conf.check(producer_factory=_dlpack_ref_factory(_PreOneZero),
                                                name="pre-1.0", tolist=lambda x: x.tolist())}
    assert [r.line() for r in results.values() if r.status is Status.ERROR] == []
    assert results["producer.stream_cpu"].status is Status.PASS
    assert results["producer.legacy_without_max_version"].status is Status.PASS
    for rule, keyword in [("producer.versioned_capsule", "max_version"), ("producer.copy_true_copies", "copy"),
                          ("producer.copy_false_no_copy", "copy"), ("producer.dl_device_own", "dl_device"),
                          ("producer.dl_device_unsupported", "dl_device")]:
        r = results[rule]
        assert r.status is Status.NOT_SUPPORTED, r.line()
        assert r.detail.startswith(f"__dlpack__ takes no {keyword} keyword"), r.line()
    assert _stray_keywords(results) == []


class _RefusesWithItsOwnErrors:
    """tensorflow's and paddle's answers: RuntimeError for copy=True, a device
    id None that __dlpack__ itself refuses with TypeError."""

    def __init__(self, a):
        self._a = a

    def __dlpack_device__(self):
        return (dr.DeviceType.CPU, None)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise RuntimeError("does not support DLPack export with copy=True")
        if dl_device is not None and not isinstance(dl_device[1], int):
            raise TypeError("incompatible function arguments")
        return self._a.__dlpack__(stream=stream, max_version=max_version, copy=copy)


def test_a_library_s_own_refusal_is_a_verdict():
    # Before: the copy rules and dl_device_own answered "error".
    results = {r.rule.id: r for r in conf.check(producer_factory=_dlpack_ref_factory(_RefusesWithItsOwnErrors),
                                                name="own-errors", only=[
                                                    "producer.copy_true_copies", "producer.copy_true_flag",
                                                    "producer.dl_device_own", "producer.dlpack_device_type"])}
    copies, flag = results["producer.copy_true_copies"], results["producer.copy_true_flag"]
    assert (copies.status, copies.exc_type) == (Status.FAIL, "RuntimeError")
    assert copies.detail == "copy=True refused with RuntimeError: it must copy (or raise BufferError when it cannot)"
    assert flag.status is Status.NOT_SUPPORTED and flag.exc_type == "RuntimeError"
    own = results["producer.dl_device_own"]
    assert (own.status, own.exc_type) == (Status.FAIL, "TypeError")
    assert own.detail == "dl_device=(1, None) (its own __dlpack_device__()) raised"
    assert results["producer.dlpack_device_type"].detail == "device_id None is a NoneType, not an int"


def _capsule_only(capsule, **kwargs):
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"expected a capsule, got {type(capsule).__name__}")
    return dr.from_dlpack(capsule, **kwargs)


def test_a_capsule_taking_consumer_is_judged_on_what_it_is_given():
    # Before: glue calling __dlpack__() for it failed max_version_passed on the glue.
    c = Consumer("capsule-taker", _capsule_only, data_ptr=lambda r: r.data_ptr, readonly=lambda r: r.readonly,
                 capsule_request={})
    results = {r.rule.id: r for r in conf.check(from_dlpack=c, name="capsule-taker")}
    asks_producer = {"consumer.max_version_passed", "consumer.legacy_fallback", "consumer.producer_buffererror"}
    for rule_id, r in results.items():
        if rule_id in asks_producer:
            assert r.status is Status.NOT_SUPPORTED and "its users call __dlpack__()" in r.detail, r.line()
        elif rule_id in _VERSIONED:
            assert r.status is Status.NOT_SUPPORTED, r.line()  # it is handed legacy capsules only
        elif rule_id not in ("consumer.copy_false", "consumer.device_cpu"):  # no keywords given to it
            assert r.status is Status.PASS, r.line()


def test_a_consumer_that_cannot_share_host_memory_is_not_failed_for_copying():
    # mlx's answer; before: zero_copy_import and copy_false failed.
    def copying(x, *, copy=None):
        if copy is False:
            raise ValueError("cannot import a CPU array without a copy")
        return dr.from_dlpack(x, copy=True)

    c = Consumer("copying", copying, data_ptr=lambda r: r.data_ptr, readonly=lambda r: r.readonly)
    results = {r.rule.id: r for r in conf.check(from_dlpack=c, name="copying", only=[
        "consumer.zero_copy_import", "consumer.copy_false", "consumer.copy_true"])}
    for rule in ("consumer.zero_copy_import", "consumer.copy_false"):
        assert results[rule].status is Status.NOT_SUPPORTED, results[rule].line()
        assert "cannot import this memory in place" in results[rule].detail
    assert results["consumer.copy_true"].status is Status.PASS


def test_a_consumer_refusing_a_legacy_answer_fails_legacy_answer():
    # mpi4py's answer to a producer that ignores max_version (as several known libraries do)
    def versioned_only(x, **kwargs):
        capsule = x.__dlpack__(max_version=(1, 3))
        if dr.inspect(capsule)["name"] != "dltensor_versioned":
            raise BufferError("not a versioned capsule")
        return dr.from_dlpack(capsule)

    [r] = conf.check(from_dlpack=versioned_only, name="versioned-only", only=["consumer.legacy_answer"])
    assert (r.status, r.exc_type) == (Status.FAIL, "BufferError")


def test_negative_strides_read_forwards_are_wrong_values():
    # paddle's answer: reading a reversed view forwards from the first element.
    def forwards(x, **kwargs):
        capsule = x.__dlpack__(max_version=(1, 3))
        info = dr.inspect(capsule)
        if info["strides"] and info["strides"][0] < 0:
            return dr.asarray(dr.from_dlpack(capsule).tolist()[::-1])
        return dr.from_dlpack(capsule)

    [r] = conf.check(from_dlpack=forwards, name="forwards", only=["consumer.negative_strides"])
    assert r.status is Status.FAIL and r.detail.startswith("values [3.0, 2.0, 1.0], expected [1.0, 2.0, 3.0]")


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_deleter_called_by_a_consumer_that_kept_the_name_is_counted_twice(versioned):
    # PyTorch and TensorFlow refusing a device tensor do this. The capsule
    # destructor then calls the deleter again, which the factory counts,
    # instead of reading the struct the first call freed (before: the
    # checker's child died of SIGSEGV in the factory, reported as a crash).
    f = CapsuleFactory()
    cap = f.make(shape=(3,), versioned=versioned)
    info = read_capsule(cap)
    DELETER_T(info["deleter"])(info["address"])
    assert f.deleter_calls == 1
    del cap
    gc.collect()
    assert f.calls_for(f.last_id) == 2


# --- libraries not shaped like NumPy, judged as what they are ---------------------------------

def _checked(lib: str, *extra: str) -> tuple[int, dict, str]:
    """(exit status, rule id -> result dict, stdout) of ``check --library lib --format json``."""
    rc, out, err = command.run(["check", "--library", lib, "--format", "json", "--no-matrix", *extra])
    data = json.loads(out)
    by_id = {r["check"]: r for lib_report in data["libraries"] for r in lib_report["results"]}
    return rc, by_id, out


def test_a_library_without_dunder_dlpack_is_no_producer_and_nothing_to_check(hostile):
    rc, _, out = _checked("no_dunder_dlpack")
    assert rc == 3
    assert "no producer: no_dunder_dlpack.asarray was tried, and its no_dunder_dlpack.Thing objects have no " \
           "__dlpack__" in out


def test_a_producer_without_asarray_is_still_a_producer(hostile):
    rc, results, _ = _checked("producer_without_asarray")
    producer = {rule: r for rule, r in results.items() if rule.startswith("producer.")}
    assert producer and not [r for r in producer.values() if r["status"] == "error"]
    # it takes all four keywords: the rules about them are judged, not "not supported"
    for rule in ("producer.versioned_capsule", "producer.copy_true_copies", "producer.dl_device_own",
                 "producer.stream_cpu"):
        assert producer[rule]["status"] == "pass", producer[rule]
    assert results["consumer.zero_copy_import"]["status"] == "pass"


def test_a_capsule_only_consumer_is_found_by_the_generic_adapter_and_a_widening_one_fails(hostile):
    rc, results, _ = _checked("capsule_only")
    assert results["consumer.max_version_passed"]["status"] == "not supported"
    assert "from_dlpack takes a capsule" in results["consumer.max_version_passed"]["detail"]
    # every element widened to float64: the element-type rules fail, float64 values equal or not
    for rule in ("consumer.dtype_signed", "consumer.dtype_unsigned", "consumer.dtype_narrow_float"):
        assert results[rule]["status"] == "fail", results[rule]
        assert "imported as (code, bits, lanes)=(2, 64, 1)" in results[rule]["detail"]


def test_a_single_use_producer_is_asked_once_per_array(hostile):
    rc, results, out = _checked("single_use")
    assert not [r for r in results.values() if r["status"] == "error"], out
    # what needs two exports of one array cannot be judged: not supported, with why
    copies = results["producer.copy_true_copies"]
    assert copies["status"] == "not supported" and "arrays export once (single use)" in copies["detail"]
    for rule in ("producer.legacy_without_max_version", "producer.versioned_capsule", "producer.stream_cpu",
                 "producer.deleter_once", "producer.dtype_complex"):
        assert results[rule]["status"] == "pass", results[rule]
    assert '"version": "3.1"' in out  # a hook's library reports its own version


def test_a_plain_enum_device_type_is_judged_by_its_value(hostile):
    rc, results, _ = _checked("plain_enum_device")
    assert results["producer.dlpack_device_type"]["status"] == "pass", results["producer.dlpack_device_type"]
    assert results["producer.dlpack_device_type"]["detail"] == "(DLDeviceType.CPU=1, 0)"
    assert results["producer.stream_cpu"]["status"] == "pass"
    assert results["producer.dl_device_own"]["status"] == "pass"
    kept = results["consumer.device_cuda_unreachable"]
    assert kept["status"] == "pass" and kept["detail"] == "kept as a device array on device_type 2, device_id 0, not read"


def test_device_memory_kept_at_its_address_and_never_read_passes_the_device_rules(hostile):
    # A consumer that hands device memory on without reading it (a message
    # library with a device-aware transport) keeps the tensor's own address
    # and refuses reads with BufferError: it neither reads nor crashes.
    rc, results, _ = _checked("device_bytes", "--rules", "consumer.device_*")
    for rule in ("consumer.device_opencl", "consumer.device_cuda_unreachable"):
        assert results[rule]["status"] == "pass", results[rule]
        assert results[rule]["detail"] == ("kept as device memory at its own address, never read (reading the "
                                           "result raises BufferError)")


def test_a_pointer_that_cannot_be_read_is_not_a_copy(hostile):
    rc, results, _ = _checked("unreadable_pointer")
    for rule in ("consumer.zero_copy_import", "consumer.copy_false", "consumer.copy_true"):
        r = results[rule]
        assert r["status"] == "not supported", r
        assert "the result's data pointer cannot be read (AttributeError" in r["detail"]
        assert "copied" not in r["detail"]


# --- the libraries of the ecosystem lane ---------------------------------------------------------

def test_numkong_is_a_versioned_producer_with_narrow_floats():
    results = _library("numkong")
    for rule in ("producer.versioned_capsule", "producer.copy_false_no_copy", "producer.dl_device_own"):
        assert results[rule].status is Status.PASS, results[rule].line()
    assert results["producer.dtype_bfloat16"].status is Status.PASS
    assert "float8_e4m3fn=(10, 8, 1)" in results["producer.dtype_float8"].detail
    assert results["producer.copy_true_copies"].status is Status.NOT_SUPPORTED  # BufferError: it cannot copy


def test_open3d_device_type_is_a_plain_enum_judged_by_value():
    results = _library("open3d")
    assert results["producer.dlpack_device_type"].status is Status.PASS, results["producer.dlpack_device_type"]
    assert results["producer.dl_device_own"].status is not Status.ERROR
    assert "not on the CPU" not in results["producer.stream_cpu"].detail


def test_mlc_is_a_pre_1_0_producer_and_its_constructor_a_consumer():
    results = _library("mlc")
    assert results["producer.versioned_capsule"].status is Status.NOT_SUPPORTED
    assert "a pre-1.0 producer" in results["producer.versioned_capsule"].detail
    assert results["consumer.zero_copy_import"].status is Status.PASS
