"""The pytest plugin, end to end in a pytester project: one item per rule,
``-k`` selection, xfail through the allow file and marks, and a failing
build exactly when a rule that is not allowed breaks."""

import re

import pytest

pytest_plugins = ["pytester"]

NUMPY_LIKE = '''
import numpy as np
import pytest
from dlpack_ref.conformance import conformance_tests

def make(dtype, shape, readonly=False):
    a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    a.flags.writeable = not readonly
    return a

test_dlpack = conformance_tests(producer_factory=make, from_dlpack=np.from_dlpack, name="numpy-like",
                                tolist=lambda a: a.tolist(), allow_file="dlpack-allow.txt",
                                marks={"producer.scalar": pytest.mark.skip(reason="no scalars here")})
'''

ARRAY_API_LIKE = '''
from dlpack_ref.conformance import conformance_tests

test_dlpack = conformance_tests("array_api_strict:from_dlpack", name="array_api_strict")
'''


def _failed(result):
    return sorted(re.findall(r"^FAILED (?:\(.*?\) )?\S+::test_dlpack::(\S+)", result.stdout.str(), re.M))


def _outcomes(result):
    return {k: v for k, v in result.parseoutcomes().items() if k in ("passed", "failed", "skipped", "xfailed")}


@pytest.fixture
def numpy_project(pytester):
    pytester.makepyfile(test_numpy_like=NUMPY_LIKE)
    pytester.makefile(".txt", **{"dlpack-allow": ""})
    return pytester


def test_numpy_like_library_fails_exactly_on_the_rules_not_allowed(numpy_project):
    first = numpy_project.runpytest("-p", "no:cacheprovider", "-rf")
    broken = _failed(first)
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    assert "consumer.shape_null" in broken and "producer.dlpack_device_type" in broken
    assert "the consumer crashed the process (killed by SIGSEGV)" in first.stdout.str()
    assert "rule: a NULL shape with ndim > 0 is refused" in first.stdout.str()
    counts = _outcomes(first)
    assert sum(counts.values()) == 58

    numpy_project.makefile(".txt", **{"dlpack-allow": "".join(f"numpy-like {rule} known\n" for rule in broken)})
    allowed = numpy_project.runpytest("-p", "no:cacheprovider")
    assert allowed.ret == pytest.ExitCode.OK
    assert _outcomes(allowed)["xfailed"] == len(broken)

    kept = broken[1:]
    numpy_project.makefile(".txt", **{"dlpack-allow": "".join(f"numpy-like {rule} known\n" for rule in kept)})
    one_left = numpy_project.runpytest("-p", "no:cacheprovider", "-rf")
    assert one_left.ret == pytest.ExitCode.TESTS_FAILED
    assert _failed(one_left) == [broken[0]]


def test_rules_are_selectable_with_k(numpy_project):
    listed = numpy_project.runpytest("-p", "no:cacheprovider", "-k", "copy_true", "--collect-only", "-q")
    assert sorted(re.findall(r"::test_dlpack::(\S+)", listed.stdout.str())) == [
        "consumer.copy_true", "producer.copy_true_copies", "producer.copy_true_flag"]
    result = numpy_project.runpytest("-p", "no:cacheprovider", "-k", "copy_true", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # consumer.copy_true breaks, not allowed here
    assert _outcomes(result) == {"passed": 2, "failed": 1}
    assert _failed(result) == ["consumer.copy_true"]


def test_marks_and_the_command_line_allow_file(numpy_project):
    numpy_project.makefile(".txt", extra="* consumer.* every consumer rule, for this test\n"
                                         "* producer.dlpack_device_type plain int\n"
                                         "* producer.dl_device_unsupported ValueError before NumPy 2.4\n")
    result = numpy_project.runpytest("-p", "no:cacheprovider", "--dlpack-allow", "extra.txt", "-rs")
    assert result.ret == pytest.ExitCode.OK
    assert "no scalars here" in result.stdout.str()


def test_array_api_strict_through_the_generic_adapter(pytester):
    pytester.makepyfile(test_array_api_like=ARRAY_API_LIKE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    broken = _failed(result)
    # NumPy underneath: its consumer findings, and the plain-int device type
    assert {"consumer.shape_null", "consumer.data_null", "producer.dlpack_device_type"} <= set(broken)
    assert "tolist" not in result.stdout.str()  # no harness failures of its own
    pytester.makefile(".txt", allow="".join(f"array_api_strict {rule} known\n" for rule in broken))
    assert pytester.runpytest("-p", "no:cacheprovider", "--dlpack-allow", "allow.txt").ret == pytest.ExitCode.OK
