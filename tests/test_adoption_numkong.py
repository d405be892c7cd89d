"""adoption/numkong/compare.py, the judge of `adoption/run.sh numkong`, on
small result files made here: a test that released passes and adopted does
not is a regression unless docs/adoption.md lists its adopted outcome; a
producer rule of the checker must pass (or be not supported) where released
failed it, and no rule may regress. The patch applies to the files it names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPARE = ROOT / "adoption" / "numkong" / "compare.py"

DOCS = """# Real libraries

## numkong

| test | adopted | rule |
| --- | --- | --- |
| `test/test_dlpack.py::test_fp6[e2m3]` | failed | legacy FP6 |

## other
| `test/test_x.py::test_elsewhere` | failed | not this library's |
"""


def junit(path: Path, outcomes: dict[str, str]) -> None:
    cases = []
    for test_id, outcome in outcomes.items():
        module, name = test_id.split("::")
        classname = module.removesuffix(".py").replace("/", ".")
        inner = {"failed": "<failure message='x'/>", "skipped": "<skipped message='x'/>", "passed": ""}[outcome]
        cases.append(f'<testcase classname="{classname}" name="{name}">{inner}</testcase>')
    path.write_text(f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>")


def report(path: Path, statuses: dict[str, str]) -> None:
    results = [{"subject": "numkong", "check": c, "status": s} for c, s in statuses.items()]
    path.write_text(json.dumps({"libraries": [{"name": "numkong", "results": results}]}))


def judge(tmp_path, released_tests, adopted_tests, released_checks, adopted_checks, docs=DOCS):
    junit(tmp_path / "tests-released.xml", released_tests)
    junit(tmp_path / "tests-adopted.xml", adopted_tests)
    report(tmp_path / "check-released.json", released_checks)
    report(tmp_path / "check-adopted.json", adopted_checks)
    (tmp_path / "adoption.md").write_text(docs)
    return subprocess.run([sys.executable, str(COMPARE), "--work", str(tmp_path), "--docs", str(tmp_path / "adoption.md")],
                          capture_output=True, text=True, timeout=60)


TESTS = {"test/test_dlpack.py::test_fp6[e2m3]": "passed", "test/test_tensor.py::test_view": "passed",
         "test/test_tensor.py::test_gpu": "skipped"}
CHECKS = {"producer.stream_cpu": "fail", "producer.zero_dim": "pass", "consumer.data_null": "fail"}
FIXED = {"producer.stream_cpu": "pass", "producer.zero_dim": "pass", "consumer.data_null": "fail"}


def test_a_listed_change_and_fixed_producer_rules_pass_with_the_counts(tmp_path):
    done = judge(tmp_path, TESTS, {**TESTS, "test/test_dlpack.py::test_fp6[e2m3]": "failed"}, CHECKS, FIXED)
    assert done.returncode == 0, done.stdout
    assert "numkong released: 2 passed, 0 failed, 1 skipped" in done.stdout
    assert "numkong adopted: 1 passed, 1 failed, 1 skipped" in done.stdout
    assert "numkong adopted check: 2 pass, 1 fail, 0 not supported, 0 error" in done.stdout
    assert "not moved onto the header): consumer.data_null" in done.stdout


def test_an_unlisted_test_that_stops_passing_is_a_regression(tmp_path):
    adopted = {**TESTS, "test/test_dlpack.py::test_fp6[e2m3]": "failed", "test/test_tensor.py::test_view": "skipped"}
    done = judge(tmp_path, TESTS, adopted, CHECKS, FIXED)
    assert done.returncode == 1
    assert "test regressed: test/test_tensor.py::test_view: released passed, adopted skipped" in done.stdout


def test_a_listed_test_must_have_its_listed_outcome(tmp_path):
    done = judge(tmp_path, TESTS, TESTS, CHECKS, FIXED)
    assert done.returncode == 1
    assert "listed change test/test_dlpack.py::test_fp6[e2m3]: docs say failed, adopted build passed" in done.stdout


def test_only_the_numkong_section_lists_changes(tmp_path):
    released = {**TESTS, "test/test_x.py::test_elsewhere": "passed"}
    adopted = {**released, "test/test_dlpack.py::test_fp6[e2m3]": "failed", "test/test_x.py::test_elsewhere": "failed"}
    done = judge(tmp_path, released, adopted, CHECKS, FIXED)
    assert done.returncode == 1 and "test regressed: test/test_x.py::test_elsewhere" in done.stdout


@pytest.mark.parametrize("adopted, message", [
    ({**FIXED, "producer.stream_cpu": "fail"}, "checker rule still fail: producer.stream_cpu"),
    ({**FIXED, "producer.zero_dim": "not supported"}, "checker rule regressed: producer.zero_dim"),
    ({**FIXED, "consumer.data_null": "error"}, None),
])
def test_producer_rules_must_be_fixed_and_no_rule_may_regress(tmp_path, adopted, message):
    adopted_tests = {**TESTS, "test/test_dlpack.py::test_fp6[e2m3]": "failed"}
    done = judge(tmp_path, TESTS, adopted_tests, CHECKS, adopted)
    if message is None:   # the consumer was not moved: its failing rules are only reported
        assert done.returncode == 0, done.stdout
    else:
        assert done.returncode == 1 and message in done.stdout


def test_missing_results_are_a_failure_not_a_pass(tmp_path):
    (tmp_path / "adoption.md").write_text(DOCS)
    done = subprocess.run([sys.executable, str(COMPARE), "--work", str(tmp_path), "--docs", str(tmp_path / "adoption.md")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "numkong's tests did not run" in done.stdout


def test_the_docs_list_the_changes_the_script_judges_by():
    text = (ROOT / "docs" / "adoption.md").read_text()
    section = re.search(r"^## numkong\n(.*?)(?=^## |\Z)", text, re.M | re.S).group(1)
    listed = re.findall(r"^\| `([^`]+::[^`]+)` \| (passed|failed|skipped)\b", section, re.M)
    assert ("test/test_dlpack.py::test_fp6_uses_versioned_with_padded_flag[e2m3]", "failed") in listed


def test_the_patch_names_only_numkongs_python_sources():
    patch = (ROOT / "adoption" / "numkong" / "producer.patch").read_text()
    files = re.findall(r"^\+\+\+ b/(\S+)", patch, re.M)
    assert files == ["python/dlpack_interop.c", "python/dlpack_interop.h", "python/tensor.c"]
    assert '#include "dlpack_ref.h"' in patch and "dlpack_ref_producer_dlpack_fast" in patch
