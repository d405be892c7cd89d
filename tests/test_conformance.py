"""The conformance checks: dlpack-ref passes all of them, a broken producer
or a crashing consumer is reported as such, and the CLI's outputs parse."""

import io
import json
import contextlib

import pytest

import dlpack_ref as dr
from dlpack_ref import conformance as conf
from dlpack_ref.conformance import Status, adapters, cli
from dlpack_ref.conformance.consumer import Consumer, check_consumer, resolve
from dlpack_ref.conformance.producer import check_producer


def _problems(results):
    return [r.line() for r in results if r.status in (Status.FAIL, Status.ERROR)]


@pytest.fixture(scope="module")
def dlpack_ref_lib():
    return adapters.library("dlpack_ref")


def test_dlpack_ref_passes_every_producer_check(dlpack_ref_lib):
    results = check_producer(dlpack_ref_lib.producer)
    assert len(results) == len(conf.producer.CHECKS)
    assert _problems(results) == []
    passed = {r.rule.id for r in results if r.status is Status.PASS}
    # the checks that need nothing dlpack-ref lacks really ran
    assert {"producer.copy_true_copies", "producer.deleter_once", "producer.exchange_api",
            "producer.read_only_flag", "producer.dtype_float4", "producer.view_values"} <= passed


def test_dlpack_ref_passes_every_consumer_case_in_child_processes(dlpack_ref_lib):
    results = check_consumer(dlpack_ref_lib.consumer)
    assert len(results) == len(conf.consumer.CASES)
    assert _problems(results) == []
    assert all(r.status is Status.PASS for r in results), [r.line() for r in results]


def test_assert_conforms_on_dlpack_ref_from_pytest():
    def make(dtype, shape, readonly=False):
        return adapters.library("dlpack_ref").producer.factory(dtype, shape, readonly)

    results = conf.assert_conforms(producer_factory=make, from_dlpack=dr.from_dlpack, name="dlpack_ref")
    assert {r.rule.id for r in results} == {rule.id for rule in conf.rules()}


class _NeverCopies:
    """A producer that ignores copy=True: exports its data in place."""

    def __init__(self, a):
        self._a = a

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

    def __dlpack__(self, *, copy=None, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def tolist(self):
        return self._a.tolist()


def test_assert_conforms_names_the_broken_rule():
    def make(dtype, shape, readonly=False):
        return _NeverCopies(adapters.library("dlpack_ref").producer.factory(dtype, shape, readonly))

    with pytest.raises(AssertionError) as info:
        conf.assert_conforms(producer_factory=make, name="never-copies")
    message = str(info.value)
    assert "producer.copy_true_copies" in message
    assert "copy=True exported the same data pointer" in message
    assert "array API standard" in message
    # a rule can be allowed explicitly
    conf.assert_conforms(producer_factory=make, allow=("producer.copy_true_copies",
                                                       "producer.copy_true_flag"))


def test_a_consumer_that_crashes_is_a_result_not_the_end_of_the_run(tmp_path, monkeypatch):
    (tmp_path / "crashing_consumer.py").write_text(
        "import os, signal\n"
        "def from_dlpack(x, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    results = check_consumer(Consumer("crashing", None, spec="crashing_consumer:from_dlpack"))
    assert len(results) == len(conf.consumer.CASES)
    crashed = [r for r in results if "killed by SIGSEGV" in r.detail]
    assert all(r.status is Status.FAIL for r in crashed)
    # every case reaches from_dlpack, except device= (no CPU device object was given)
    others = {r.rule.id: r.status for r in results if r not in crashed}
    assert others == {"consumer.device_cpu": Status.NOT_SUPPORTED}


def test_in_process_consumer_without_a_spec():
    results = conf.check(from_dlpack=Consumer("inline", lambda x, **kw: dr.from_dlpack(x, **kw),
                                              data_ptr=lambda r: r.data_ptr, readonly=lambda r: r.readonly,
                                              cpu_device="cpu"))
    assert _problems(results) == []


def test_numpy_smoke():
    np_lib = adapters.library("numpy")
    results = {r.rule.id: r for r in check_producer(np_lib.producer, only=[
        "producer.legacy_without_max_version", "producer.copy_true_copies", "producer.read_only_flag",
        "producer.dlpack_device_type"])}
    assert results["producer.copy_true_copies"].status is Status.PASS
    assert results["producer.read_only_flag"].status is Status.PASS
    # NumPy answers a plain int where the standard types an Enum member
    assert results["producer.dlpack_device_type"].status is Status.FAIL
    assert "plain int" in results["producer.dlpack_device_type"].detail


def _cli(argv):
    out = io.StringIO()
    err = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_cli_json_on_dlpack_ref():
    rc, out, err = _cli(["check", "--library", "dlpack_ref", "--format", "json"])
    assert rc == 0
    data = json.loads(out)
    assert data["versions"]["dlpack_ref"] == dr.__version__
    statuses = {r["status"] for r in data["producer"]["dlpack_ref"] + data["consumer"]["dlpack_ref"]}
    assert statuses <= {"pass", "not supported"}
    assert data["exchange"] == [{"producer": "dlpack_ref", "consumer": "dlpack_ref", "works": True,
                                 "zero_copy": True, "values_ok": True}]
    assert "dlpack_ref" in err  # progress goes to stderr


def test_cli_table_with_numpy_exits_0_when_only_others_fail():
    rc, out, _ = _cli(["check", "--library", "dlpack_ref", "--library", "numpy", "--format", "table"])
    assert rc == 0
    assert "Exchange matrix" in out and "zero-copy" in out
    assert "numpy producer.dlpack_device_type [fail]" in out


def test_cli_rejects_an_unknown_library():
    with pytest.raises(SystemExit):
        _cli(["check", "--library", "nope"])
