"""The conformance checks: dlpack-ref passes all of them, a broken producer
or a crashing consumer (a lambda too) is reported as such, each consumer
case is judged by its own function, and the checker's tables are the
project's."""

import ctypes
import gc
import os
import signal

import pytest

import dlpack_ref as dr
from dlpack_ref import conformance as conf
from dlpack_ref.testing import NAME_USED_VERSIONED, NAME_VERSIONED, c_api
from dlpack_ref.conformance import Consumer, Status
from dlpack_ref.conformance.rules import consumer_judges as judges, entries
from dlpack_ref.conformance.run import run, run_here, run_matrix
from dlpack_ref.harness import runner
from dlpack_ref.harness.registry import subject as library


def _problems(results):
    return [r.line() for r in results if r.failed]


@pytest.fixture(scope="module")
def dlpack_ref_results():
    return run(library("dlpack_ref"))


def test_dlpack_ref_passes_every_rule(dlpack_ref_results):
    assert [r.rule.id for r in dlpack_ref_results] == [rule.id for rule in conf.rules()]
    assert _problems(dlpack_ref_results) == []
    passed = {r.rule.id for r in dlpack_ref_results if r.status is Status.PASS}
    # the checks that need nothing dlpack-ref lacks really ran
    assert {"producer.copy_true_copies", "producer.deleter_once", "producer.exchange_api",
            "producer.exchange_api_matches_dlpack", "producer.read_only_flag", "producer.dtype_float4",
            "producer.view_values"} <= passed
    assert {r.rule.id for r in dlpack_ref_results if r.rule.id.startswith("consumer.")} <= passed


def test_assert_conforms_on_dlpack_ref_from_a_local_factory():
    own = library("dlpack_ref").producer

    def make(dtype, shape, readonly=False):
        return own.factory(dtype, shape, readonly)

    results = conf.assert_conforms(producer_factory=make, from_dlpack=dr.from_dlpack, name="dlpack_ref",
                                   tolist=lambda x: x.tolist())
    # no CudaProducer given: the CUDA rules are not run
    assert {r.rule.id for r in results} == {rule.id for rule in conf.rules() if not rule.id.startswith("cuda.")}


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
        return _NeverCopies(library("dlpack_ref").producer.factory(dtype, shape, readonly))

    with pytest.raises(AssertionError) as info:
        conf.assert_conforms(producer_factory=make, name="never-copies", tolist=lambda x: x.tolist())
    message = str(info.value)
    assert "producer.copy_true_copies" in message
    assert "copy=True exported the same data pointer" in message
    assert "array API standard" in message
    conf.assert_conforms(producer_factory=make, tolist=lambda x: x.tolist(),
                         allow=("producer.copy_true_copies", "producer.copy_true_flag"))


def _crash(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_spawned_consumer_that_crashes_is_a_result(tmp_path, monkeypatch):
    (tmp_path / "crashing_consumer.py").write_text(
        "import os, signal\n"
        "def from_dlpack(x, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    # the spec is imported in children only: the parent never calls the consumer
    results = run("crashing_consumer:from_dlpack")
    assert len(results) == sum(e.side == "consumer" for e in entries())
    crashed = [r for r in results if "killed by SIGSEGV" in r.detail]
    assert crashed and all(r.status is Status.FAIL for r in crashed)
    # every case reaches from_dlpack, except device= (no CPU device object is known)
    assert {r.rule.id: r.status for r in results if r not in crashed} == {"consumer.device_cpu": Status.NOT_SUPPORTED}


def test_a_lambda_consumer_that_crashes_runs_in_a_forked_child_too():
    results = conf.check(from_dlpack=lambda x, **kw: _crash(), name="lambda",
                         only=["consumer.zero_copy_import", "consumer.bad_name"])
    assert [(r.rule.id, r.status) for r in results] == [("consumer.zero_copy_import", Status.FAIL),
                                                        ("consumer.bad_name", Status.FAIL)]
    assert all("the consumer crashed the process (killed by SIGSEGV)" == r.detail for r in results)


def test_a_lambda_consumer_that_hangs_is_killed(monkeypatch):
    import time
    monkeypatch.setattr(runner, "TASK_TIMEOUT_S", 1.0)
    [r] = conf.check(from_dlpack=lambda x, **kw: time.sleep(30), only=["consumer.bad_name"])
    assert r.status is Status.FAIL and "hung for more than 1 s" in r.detail


def test_in_process_lambda_consumer_with_values_read_through_dlpack():
    results = conf.check(from_dlpack=Consumer("inline", lambda x, **kw: dr.from_dlpack(x, **kw),
                                              data_ptr=lambda r: r.data_ptr, cpu_device="cpu"))
    assert _problems(results) == []


def test_each_rule_is_a_function_of_its_own():
    checks = [e.check for e in entries()]
    assert len(set(checks)) == len(checks)
    assert all(e.check.__name__ == e.rule.id.partition(".")[2] for e in entries())


def test_the_judge_of_an_in_place_case_that_copied_names_both_pointers():
    problems = []
    status, notes = judges.accepts_in_place({"outcome": "ok", "values": [1.0, 2.0, 3.0], "ptr": 2,
                                               "source_ptr": 1}, problems, [1.0, 2.0, 3.0])
    assert status is None and problems == ["copied (pointer 2 != source 1)"] and notes == []


class _Exports:
    """A producer whose __dlpack_device__ answers a fixed pair."""

    def __init__(self, device):
        self._a = dr.zeros((2, 3), dtype="float32")
        self._device = device

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)


@pytest.mark.parametrize("device_type, ok", [(dr.DeviceType.CPU, True), (dr.DeviceType.TRN, True)])
def test_device_types_are_judged_by_the_devicetype_table(device_type, ok):
    [r] = conf.check(producer_factory=lambda dtype, shape, readonly=False: _Exports((device_type, 0)),
                     only=["producer.dlpack_device_type"])
    assert (r.status is Status.PASS) == ok, r.line()


@pytest.mark.parametrize("value", [19, 20, 21])
def test_the_device_types_upstream_added_after_1_3_are_device_types(value):
    """kDLTPU, kDLTPUHost and kDLAscend; JAX's own DLDeviceType already
    answers kDLTPUHost for TPU pinned-host arrays."""
    import enum

    class DLDeviceType(enum.IntEnum):
        kDLTPU = 19
        kDLTPUHost = 20
        kDLAscend = 21

    [r] = conf.check(producer_factory=lambda dtype, shape, readonly=False: _Exports((DLDeviceType(value), 0)),
                     only=["producer.dlpack_device_type"])
    assert r.status is Status.PASS, r.line()


def test_bcomplex32_is_judged_with_the_complex_dtypes():
    """dlpack-ref exports bcomplex32 with kDLBcomplex; a producer that calls
    it a 32-bit kDLComplex (which would be complex of two float16) fails."""
    from dlpack_ref.conformance.rules.breaking.producers import Retyped, wrapping

    [r] = conf.check(producer_factory=library("dlpack_ref").producer.factory, only=["producer.dtype_complex"])
    assert r.status is Status.PASS and "bcomplex32=(18, 32, 1)" in r.detail, r.line()
    class BcomplexAsComplex32(Retyped):
        """Exports bcomplex32 as (5, 32, 1)."""

        retyped = {(18, 32, 1): (5, 32, 1)}

    [r] = conf.check(producer_factory=wrapping(BcomplexAsComplex32).factory, only=["producer.dtype_complex"])
    assert r.status is Status.FAIL and "bcomplex32: exported (code, bits, lanes)=(5, 32, 1), expected (18, 32, 1)" \
        in r.detail, r.line()


def test_device_type_5_is_not_a_device_type():
    import enum

    class Fake(enum.IntEnum):
        FIVE = 5

    with pytest.raises(ValueError):
        dr.Device(5, 0)
    [r] = conf.check(producer_factory=lambda dtype, shape, readonly=False: _Exports((Fake.FIVE, 0)),
                     only=["producer.dlpack_device_type"])
    assert r.status is Status.FAIL and "not a DLDeviceType value" in r.detail


def test_numpy_smoke():
    results = {r.rule.id: r for r in run(library("numpy"), only=[
        "producer.legacy_without_max_version", "producer.copy_true_copies", "producer.read_only_flag",
        "producer.dlpack_device_type"])}
    assert results["producer.copy_true_copies"].status is Status.PASS
    assert results["producer.read_only_flag"].status is Status.PASS
    # NumPy answers a plain int where the standard types an Enum member
    assert results["producer.dlpack_device_type"].status is Status.FAIL
    assert "plain int" in results["producer.dlpack_device_type"].detail


def test_rules_are_unique_and_cited():
    ids = [rule.id for rule in conf.rules()]
    assert len(ids) == len(set(ids)) == len(entries())
    assert all(rule.citation() for rule in conf.rules())
    assert all(rule.id.startswith(("producer.", "consumer.", "cuda.")) for rule in conf.rules())


def test_pyarrow_adapter_exports_1d_arrays_and_reports_its_refusals():
    pytest.importorskip("pyarrow")
    results = {r.rule.id: r for r in run(library("pyarrow"), only=[
        "producer.view_values", "producer.buffererror_for_unexportable", "producer.copy_true_copies",
        "consumer.zero_copy_import"])}
    assert results["producer.view_values"].status is Status.PASS, results["producer.view_values"].line()
    # arrays with nulls and strings are refused with ArrowTypeError, not BufferError
    unexportable = results["producer.buffererror_for_unexportable"]
    assert unexportable.status is Status.FAIL
    assert "with nulls: __dlpack__ raised pyarrow.lib.ArrowTypeError" in unexportable.detail
    # 1-D only: a rule whose point holds in 1-D asks it for a 1-D array (before: "not supported")
    assert results["producer.copy_true_copies"].status is Status.PASS, results["producer.copy_true_copies"].line()
    assert "consumer.zero_copy_import" not in results  # pyarrow has no from_dlpack


def test_exchange_matrix_with_a_producer_only_library():
    pytest.importorskip("pyarrow")
    cells = run_matrix(["dlpack_ref", "pyarrow"], ["dlpack_ref"])
    assert cells[("pyarrow", "dlpack_ref")]["works"] is True
    assert cells[("pyarrow", "dlpack_ref")]["values_ok"] is True
    assert ("dlpack_ref", "pyarrow") not in cells  # pyarrow has no from_dlpack: no column


def test_a_table_failing_without_an_exception_fails_the_exchange_api_check(tmp_path):
    from support import hostile_table
    lib = hostile_table.build(tmp_path)
    inner = dr.zeros((2, 3))
    cls = hostile_table.publishing_type(hostile_table.table(lib), lambda self, **kw: inner.__dlpack__(**kw))
    lib.hostile_set(None, hostile_table.SILENT_MINUS_ONE, 0, 0, 0)
    [r] = conf.check(producer_factory=lambda dtype, shape, readonly=False: cls(), only=["producer.exchange_api"])
    assert r.status is Status.FAIL
    assert r.detail == "managed_tensor_from_py_object_no_sync returned -1 without setting an exception"


@pytest.mark.parametrize("failure", ["silent -1", "error with -1", "error with 0", "silent 7"])
@pytest.mark.parametrize("rule", ["producer.exchange_api", "producer.exchange_api_matches_dlpack"])
def test_a_table_failing_with_a_tensor_handed_out_fails_the_check_and_frees_it_once(tmp_path, factory, rule,
                                                                                     failure):
    from support import hostile_table
    lib = hostile_table.build(tmp_path)
    inner = dr.zeros((2, 3))
    cls = hostile_table.publishing_type(hostile_table.table(lib), lambda self, **kw: inner.__dlpack__(**kw))
    cap = factory.make(shape=(2,))
    tensor = c_api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(cap, NAME_VERSIONED)
    c_api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(cap, NAME_USED_VERSIONED)
    lib.hostile_set(tensor, hostile_table.FAILURES[failure], 0, 0, 0)
    # In this process (conf.check would run it in a child) to count the deleter calls.
    [r] = run_here(conf.subject_of(conf.Producer("hostile", lambda dtype, shape, readonly=False: cls())), only=[rule])
    assert r.status is Status.FAIL, r
    gc.collect()
    assert factory.deleter_calls == 1


def test_a_consumer_that_reads_lanes_as_a_vector_type_passes_dtype_lanes():
    from dlpack_ref.testing import CapsuleFactory, Consumed

    class Vectors:
        """A result that keeps the tensor's 4 lanes: its own export says so."""

        def __init__(self):
            self._factory = CapsuleFactory()

        def __dlpack__(self, **kwargs):
            return self._factory.make(shape=(2,), dtype=(2, 32, 4), versioned="max_version" in kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    def reads_vectors(x, **kwargs):
        taken = Consumed(x.__dlpack__(max_version=(1, 3)))
        if taken.info["dtype"] != (2, 32, 4):
            raise BufferError("only float32x4 here")
        taken.release()
        return Vectors()

    [r] = conf.check(from_dlpack=reads_vectors, name="vectors", only=["consumer.dtype_lanes"])
    assert (r.status, r.detail) == (Status.PASS, "read as a vector type (its result exports lanes 4)")
