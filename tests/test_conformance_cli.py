"""``dlpack-ref check`` as a CI gate: exit statuses, allowances, any
library through the generic adapter, the report formats and the JSON schema."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import jsonschema
import pytest

import dlpack_ref as dr
from dlpack_ref.conformance import adapters, cli, report, runner
from support import command


# A consumer broken on purpose in exactly two rules (tests/support/broken_consumer.py):
# the gate's tests must not depend on which rules another library breaks today.
BROKEN = "support.broken_consumer:from_dlpack"
BROKEN_RULES = ["consumer.copy_true", "consumer.shape_null"]


@pytest.fixture(scope="module", autouse=True)
def _support_importable():
    """A library named by spec is imported afresh in each case's child
    process, which finds it on PYTHONPATH, as a user's own module would be."""
    with command.support_importable():
        yield


@pytest.fixture(scope="module")
def schema():
    with open(report.SCHEMA_PATH) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def broken_run():
    return command.run(["check", "--library", "dlpack_ref", "--library", BROKEN, "--format", "json"])


def test_json_of_dlpack_ref_alone_exits_0_and_matches_the_schema(schema):
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--format", "json"])
    assert rc == 0
    data = json.loads(out)
    jsonschema.validate(data, schema)
    assert data["schema_version"] == report.SCHEMA_VERSION
    assert data["tool"] == {"name": "dlpack-ref", "version": dr.__version__, "dlpack_version": [1, 3]}
    assert data["environment"]["python"] == ".".join(map(str, sys.version_info[:3]))
    [lib] = data["libraries"]
    assert lib["summary"]["fail"] == lib["summary"]["error"] == 0
    assert data["exchange"] == [{"producer": "dlpack_ref", "consumer": "dlpack_ref", "works": True,
                                 "zero_copy": True, "values_ok": True}]
    # Progress with counts, on stderr: one task per rule, CUDA rules included.
    total = len(runner.rules())
    assert total == len(lib["results"]) and any(r.id.startswith("cuda.") for r in runner.rules())
    assert f"dlpack_ref: {total}/{total} done, 0 failing" in err


def test_a_broken_consumer_fails_the_gate_on_exactly_its_rules(broken_run, schema):
    rc, out, err = broken_run
    assert rc == cli.EXIT_FAILED == 1
    data = json.loads(out)
    jsonschema.validate(data, schema)
    assert data["gate"]["blocking"] == [{"library": BROKEN, "check": rule} for rule in BROKEN_RULES]
    assert f"{BROKEN}: consumer.shape_null: fail" in err


def test_fail_on_dlpack_ref_gives_the_old_exit_status():
    rc, out, _ = command.run(["check", "--library", "dlpack_ref", "--library", BROKEN, "--fail-on", "dlpack_ref",
                       "--no-matrix"])
    assert rc == 0
    assert "pass (exit status 0): no failure that is not allowed in dlpack_ref" in out
    assert "dlpack_ref: not checked" not in out   # checked, so not listed as missing


def test_allow_file_and_allow_flag_clear_the_gate(tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text(f"# the broken consumer's known findings\n{BROKEN} consumer.shape_null known, on purpose\n")
    rc, out, _ = command.run(["check", "--library", BROKEN, "--allow-file", str(allow), "--no-matrix"])
    assert rc == 1 and "FAIL (exit status 1): 1 failure(s) not allowed" in out
    rc, out, _ = command.run(["check", "--library", BROKEN, "--allow-file", str(allow), "--allow", "consumer.copy_*",
                       "--no-matrix"])
    assert rc == 0
    assert "[allowed: known, on purpose]" in out
    assert "FAIL (allowed)" in out


def test_an_allow_line_without_a_reason_is_a_usage_error(tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("numpy consumer.shape_null\n")
    rc, _, err = command.run(["check", "--library", "numpy", "--allow-file", str(allow)])
    assert rc == cli.EXIT_USAGE
    assert "allow.txt:1: expected 'LIBRARY RULE REASON'" in err


def test_a_missing_library_that_was_asked_for_exits_3():
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--library", "no_such_lib_xyz", "--no-matrix"])
    assert rc == cli.EXIT_MISSING == 3
    assert "no_such_lib_xyz: not checked (cannot be imported: ModuleNotFoundError" in out


def test_without_library_the_known_ones_not_installed_are_listed(monkeypatch):
    monkeypatch.setattr(cli, "installed", lambda: (["dlpack_ref"], ["cupy", "torch"]))
    rc, out, _ = command.run(["check", "--no-matrix"])
    assert rc == 0
    assert "- cupy: not checked (not installed)" in out and "- torch: not checked (not installed)" in out


def test_any_module_through_the_generic_adapter():
    """array-api-strict named as module:from_dlpack: no built-in adapter,
    no tolist, values read by indexing and through DLPack."""
    subject = adapters.subject("array_api_strict:from_dlpack")
    assert subject.producer.tolist is None and subject.consumer.tolist is None
    rc, out, _ = command.run(["check", "--library", "array_api_strict:from_dlpack", "--format", "json", "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    by_id = {r["check"]: r for r in lib["results"]}
    assert "tolist" not in out
    assert by_id["producer.view_values"]["status"] == "pass"
    assert by_id["consumer.zero_copy_import"]["status"] == "pass"
    # What array-api-strict fails is its own affair: only that it ran.
    assert rc in (0, 1) and lib["summary"]["error"] == 0


def test_a_consumer_that_crashes_is_reported_as_a_crash():
    rc, out, _ = command.run(["check", "--library", "support.broken_consumer:crashing_from_dlpack", "--format", "json",
                       "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    failed = {r["check"]: r["detail"] for r in lib["results"] if r["status"] == "fail"}
    assert sorted(failed) == BROKEN_RULES
    assert failed["consumer.shape_null"] == "the consumer crashed the process (killed by SIGSEGV)"
    assert rc == 1



def test_markdown_is_escaped():
    rc, out, _ = command.run(["check", "--library", "dlpack_ref", "--format", "markdown", "--no-matrix"])
    assert rc == 0
    assert "## Libraries" in out and "| producer.copy\\_true\\_copies |" in out
    assert "__" not in out.replace("\\_\\_", "")


def test_failure_lines_are_short_and_rules_are_stated_once():
    rc, out, _ = command.run(["check", "--library", BROKEN, "--no-matrix"])
    failures = out.split("Failures\n", 1)[1]
    lines = [line for line in failures.split("\n\nRules broken above:")[0].splitlines() if line.startswith("- ")]
    assert lines and all(len(line) <= 210 for line in lines)
    assert failures.count("a NULL shape with ndim > 0 is refused") == 1
    # The summary counts what the failure lines list: the two broken rules.
    counted = re.search(rf"^- {re.escape(BROKEN)} \S+: \d+ pass, (\d+) fail, 0 error, ", out, re.M)
    assert counted and int(counted[1]) == sum(line.startswith(f"- [fail] {BROKEN}:") for line in lines) == 2



def console_script() -> str:
    """The dlpack-ref script installed beside this interpreter: where a user's
    `python -m pytest` from an environment that is not activated (its bin
    folder not on PATH) finds it."""
    script = shutil.which("dlpack-ref", path=sysconfig.get_path("scripts"))
    assert script is not None, f"no dlpack-ref script in {sysconfig.get_path('scripts')}"
    return script


def test_version_and_help_name_the_console_script():
    out = subprocess.run([console_script(), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"dlpack-ref {dr.__version__} (DLPack 1.3)"
    help_text = subprocess.run([console_script(), "check", "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert help_text.startswith("usage: dlpack-ref check")
    for words in ("exit status:", "--fail-on dlpack_ref", "report.schema.json", "formats", "module:from_dlpack"):
        assert words in help_text
    module_help = subprocess.run([sys.executable, "-m", "dlpack_ref", "--help"], capture_output=True, text=True,
                                 check=True).stdout
    assert module_help.startswith("usage: python -m dlpack_ref")


def _run_source(source: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "repro.py"
    path.write_text(source)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)


def test_json_carries_a_reproduction_for_each_failure_that_shows_it(broken_run, tmp_path):
    [_, lib] = json.loads(broken_run[1])["libraries"]
    by_id = {r["check"]: r for r in lib["results"]}
    assert {rule for rule, r in by_id.items() if r["reproduction"]} == set(BROKEN_RULES)
    # the broken consumer returns an empty array for a NULL shape: accepted
    run = _run_source(by_id["consumer.shape_null"]["reproduction"], tmp_path)
    assert run.returncode == 1
    assert run.stdout.splitlines()[-2:] == ["expected: a NULL shape with ndim > 0 is refused",
                                            "observed: accepted (result Array)"]
    run = _run_source(by_id["consumer.copy_true"]["reproduction"], tmp_path)
    assert run.returncode == 1 and run.stdout.splitlines()[-1] == "observed: copy=True imported in place (same pointer)"


def test_explain_prints_the_rule_and_a_reproduction_that_crashes_as_the_library_did(tmp_path):
    spec = "support.broken_consumer:crashing_from_dlpack"
    rc, out, _ = command.run(["check", "--library", spec, "--library", "dlpack_ref", "--explain", "consumer.shape_null"])
    assert rc == 1
    head, _, rest = out.partition("\n\n")
    assert head == ("consumer.shape_null: a NULL shape with ndim > 0 is refused\n"
                    "where: DLPack header (dlpack.h, DLPack 1.3), DLTensor.shape")
    assert f"[fail] {spec}: consumer.shape_null: the consumer crashed the process (killed by SIGSEGV)" in rest
    assert "[pass] dlpack_ref: consumer.shape_null" in rest
    source = rest.split("\n\n", 1)[1].split("\n[pass] dlpack_ref")[0]
    assert source.startswith(f"# {spec}: consumer.shape_null") and "import support.broken_consumer as xp" in source
    assert _run_source(source, tmp_path).returncode == -signal.SIGSEGV


def test_explain_of_an_unknown_rule_is_a_usage_error():
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--explain", "consumer.no_such_rule"])
    assert rc == cli.EXIT_USAGE and out == ""
    assert "no rule 'consumer.no_such_rule'" in err


def test_the_hook_of_the_conformance_page_runs_as_written(tmp_path, monkeypatch):
    page = (Path(__file__).resolve().parents[1] / "docs" / "conformance.md").read_text()
    [source] = re.findall(r"```python\n(# my_dlpack_hook\.py.*?)```", page, re.S)
    (tmp_path / "my_dlpack_hook.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, out, _ = command.run(["check", "--library", "my_dlpack_hook", "--format", "json", "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    assert rc == 0 and lib["summary"]["fail"] == lib["summary"]["error"] == 0
    not_supported = {r["check"] for r in lib["results"] if r["status"] == "not supported"}
    assert not_supported == {"producer.read_only_flag", "producer.read_only_legacy_refused", "producer.scalar",
                             "producer.buffererror_for_unexportable", "producer.dtype_float4"}


def test_the_ecosystem_table_of_a_json_report(tmp_path):
    crashing = "support.broken_consumer:crashing_from_dlpack"
    rc, out, _ = command.run(["check", "--library", "dlpack_ref", "--library", crashing, "--format", "json"])
    report = tmp_path / "report.json"
    report.write_text(out)
    table = subprocess.run([sys.executable, "-m", "dlpack_ref.conformance.ecosystem", str(report)],
                           capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    head, summary, rules, _, matrix = table.split("\n\n")
    assert head == (f"Made on {data['date']} with dlpack-ref {dr.__version__}, CPython "
                    f"{data['environment']['python']} on {data['environment']['machine']} "
                    f"({data['environment']['platform']}).")

    def grid(block):
        return {row[0]: row[1:] for row in (line.strip("| ").split(" | ") for line in block.splitlines()[2:])}

    counts = data["libraries"][0]["summary"]
    assert grid(summary)["dlpack\\_ref"] == [dr.__version__, str(counts["pass"]), "0", str(counts["not supported"]), "0"]
    by_rule = grid(rules)
    assert by_rule["consumer.shape\\_null"] == ["ok", "CRASH (SIGSEGV)"]
    assert by_rule["consumer.copy\\_true"] == ["ok", "FAIL"]
    assert by_rule["producer.copy\\_true\\_copies"] == ["ok", "-"]  # a consumer only
    assert not any(rule.startswith("cuda.") for rule in by_rule)  # no library ran a CUDA rule here
    # the consumer-only library has a column in the exchange matrix, no row
    assert grid(matrix) == {"dlpack\\_ref": ["zero-copy", "zero-copy"]}
