"""``dlpack-ref check`` as a CI gate: exit statuses on every path,
allowances, any library through the generic adapter or its hook, the
report formats and the JSON schema, stdout holding the report alone, and
reproductions and ``--explain`` files that run as they are."""

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
from dlpack_ref.conformance import report
from dlpack_ref.conformance.rules import entries
from dlpack_ref.harness.output import EXIT_FAILED, EXIT_MISSING, EXIT_USAGE
from support import command
from support.hostile_libraries import hostile  # noqa: F401 (a fixture of this module's tests)

pytestmark = pytest.mark.harness

# A consumer broken on purpose in exactly two rules (tests/support/broken_consumer.py):
# the gate's tests must not depend on which rules another library breaks today.
BROKEN = "support.broken_consumer:from_dlpack"
BROKEN_RULES = ["consumer.copy_true", "consumer.shape_null"]
CRASHING = "support.broken_consumer:crashing_from_dlpack"


@pytest.fixture(scope="module", autouse=True)
def _support_importable(hostile):
    """A library named by spec is imported afresh in each case's child
    process, which finds it on PYTHONPATH, as a user's own module would be."""
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
    # every rule ran, CUDA rules included; progress on stderr
    assert len(lib["results"]) == len(entries()) and any(e.side == "cuda" for e in entries())
    assert "dlpack_ref: " in err and "done, 0 failing" in err


def test_a_broken_consumer_fails_the_gate_on_exactly_its_rules(broken_run, schema):
    rc, out, err = broken_run
    assert rc == EXIT_FAILED == 1
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
    assert rc == EXIT_USAGE
    assert "allow.txt:1: expected 'LIBRARY RULE REASON'" in err


def test_a_missing_library_that_was_asked_for_exits_3():
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--library", "no_such_lib_xyz", "--no-matrix"])
    assert rc == EXIT_MISSING == 3
    assert "no_such_lib_xyz: not checked: cannot be imported: ModuleNotFoundError" in out
    assert "asked for and not checked: no_such_lib_xyz" in out


# --- every exit path of the gate --------------------------------------------------------------

def test_an_import_that_exits_0_is_exit_3_with_the_reason_never_a_pass():
    for command_line in (["check", "--library", "exits_at_import"], ["bench", "--library", "exits_at_import"]):
        rc, out, err = command.run(command_line)
        assert rc == EXIT_MISSING, (command_line, out, err)
        assert "exits_at_import: cannot be imported: SystemExit: 0" in (out + err)


def test_nothing_to_check_in_a_library_asked_for_is_exit_3_with_what_was_looked_for():
    rc, out, _ = command.run(["check", "--library", "nothing_to_check", "--no-matrix"])
    assert rc == EXIT_MISSING
    assert ("nothing_to_check: not checked: nothing to check: no producer: nothing_to_check has neither asarray "
            "(with reshape) nor a from_dlpack to make arrays with; no consumer: nothing_to_check has no "
            "from_dlpack") in out


def test_a_rules_pattern_that_matches_nothing_is_a_usage_error():
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--rules", "producer.copy_ture*"])
    assert rc == EXIT_USAGE and out == ""
    assert "--rules producer.copy_ture*: matches no rule" in err


def test_rules_that_apply_to_no_side_of_the_library_asked_for_are_exit_3():
    # a consumer only: no producer rule can be checked in it
    rc, out, _ = command.run(["check", "--library", BROKEN, "--rules", "producer.*", "--no-matrix"])
    assert rc == EXIT_MISSING
    assert f"{BROKEN}: not checked: none of the selected rules applies to it" in out


@pytest.mark.parametrize("flag", ["--json"])
def test_a_json_file_that_cannot_be_written_is_a_usage_error_before_anything_runs(flag):
    rc, out, err = command.run(["check", "--library", "dlpack_ref", flag, "/no/such/dir/report.json"])
    assert rc == EXIT_USAGE and out == ""
    assert "the folder /no/such/dir does not exist" in err and "dlpack_ref" not in err.split("error:")[0]


def test_a_hook_that_returns_none_says_so():
    rc, out, _ = command.run(["check", "--library", "hook_returns_none", "--no-matrix"])
    assert rc == EXIT_MISSING
    assert ("hook_returns_none: not checked: its adapter failed: TypeError: "
            "hook_returns_none.__dlpack_conformance__() returned None") in out


# --- stdout is the report alone ------------------------------------------------------------------

def test_a_library_that_prints_leaves_the_json_report_intact(tmp_path):
    target = tmp_path / "report.json"
    rc, out, err = command.run(["check", "--library", "prints_everywhere", "--format", "json", "--json", str(target)])
    assert rc in (0, 1), err[-2000:]
    data = json.loads(out)   # stdout is the report and nothing else
    assert json.loads(target.read_text()) == {**data, "date": data["date"]}
    [lib] = data["libraries"]
    assert lib["summary"]["error"] == 0 and lib["summary"]["pass"] > 20
    for words in ("printed at import", "written to fd 1 at import", "printed by the factory", "printed by the hook"):
        assert words in err and words not in out


def test_the_exchange_cells_of_a_library_run_apart_from_other_libraries_imports():
    pytest.importorskip("numpy")
    # imported first, it would patch the numpy its cells' worker shares with numpy's cells
    rc, out, _ = command.run(["check", "--library", "replaces_numpy_from_dlpack", "--library", "numpy",
                              "--format", "json", "--rules", "producer.zero_dim"])
    data = json.loads(out)
    cells = {(c["producer"], c["consumer"]): c for c in data["exchange"]}
    assert cells[("numpy", "numpy")] == {"producer": "numpy", "consumer": "numpy", "works": True,
                                         "zero_copy": True, "values_ok": True}


# --- reproductions and --explain -------------------------------------------------------------------

def _run_source(source: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "repro.py"
    path.write_text(source)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_json_carries_a_reproduction_for_each_failure_that_shows_it(broken_run, tmp_path):
    [_, lib] = json.loads(broken_run[1])["libraries"]
    by_id = {r["check"]: r for r in lib["results"]}
    assert {rule for rule, r in by_id.items() if r["reproduction"]} == set(BROKEN_RULES)
    # the broken consumer returns an empty array for a NULL shape: accepted
    run = _run_source(by_id["consumer.shape_null"]["reproduction"], tmp_path)
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[-2:] == ["expected: a NULL shape with ndim > 0 is refused",
                                            "observed: accepted (result Array on device_type 1, device_id 0)"]
    run = _run_source(by_id["consumer.copy_true"]["reproduction"], tmp_path)
    assert run.returncode == 1 and run.stdout.splitlines()[-1] == "observed: copy=True imported in place (same pointer)"


def test_a_reproduction_holds_the_checks_own_code():
    from dlpack_ref.conformance.model import Result, Status
    from dlpack_ref.conformance.reproduce import reproduction
    from dlpack_ref.harness.bundle import definition_source
    entry = {e.rule.id: e for e in entries()}["consumer.copy_true"]
    source = reproduction(BROKEN, Result(entry.rule, Status.FAIL, "x"), "generic")
    from dlpack_ref.conformance.rules import consumer_cases, consumer_judges

    def code(text: str) -> str:   # a helper a reproduction pulls in keeps its code, not its comment lines
        return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert definition_source(entry.check) in source
    for used in (consumer_judges.copies, consumer_cases.import_asked, consumer_cases.attempt):
        assert code(definition_source(used)) in code(source)
    # judged as it stands, less the statements of the options the rule does not give, in order
    whole = code(definition_source(consumer_cases.judged)).splitlines()
    start = source.splitlines().index(whole[0])
    end = next(i for i, line in enumerate(source.splitlines()[start + 1:], start + 1) if line and line[0] != " ")
    kept = iter(whole)
    assert all(line in kept for line in source.splitlines()[start:end] if line)
    for option in ("    if needs_versioned:", "    if asks_producer and", "    if about_dtype and"):
        assert option in "\n".join(whole) and option not in source


@pytest.mark.parametrize("name", ['quote"and\\backslash', 'x\nprint("INJECTED")'])
def test_a_module_name_enters_a_reproduction_as_a_literal_only(name, tmp_path, hostile):
    rc, out, _ = command.run(["check", "--library", name, "--format", "json", "--rules", "consumer.copy_true",
                              "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    [result] = lib["results"]
    assert result["status"] == "fail"
    source = result["reproduction"]
    compile(source, "repro.py", "exec")
    assert repr(name) in source and name not in source
    run = _run_source(source, hostile)
    assert run.returncode == 1 and "INJECTED" not in run.stdout
    assert run.stdout.splitlines()[-1] == "observed: copy=True imported in place (same pointer)"


def test_explain_prints_a_file_that_runs_and_crashes_as_the_library_did(tmp_path):
    rc, out, _ = command.run(["check", "--library", CRASHING, "--library", "dlpack_ref", "--explain",
                              "consumer.shape_null"])
    assert rc == 1
    head = out.splitlines()[:2]
    assert head == ["# consumer.shape_null: a NULL shape with ndim > 0 is refused",
                    "# where: DLPack header (dlpack.h, DLPack 1.3), DLTensor.shape"]
    assert f"# [fail] {CRASHING}: consumer.shape_null: the consumer crashed the process (killed by SIGSEGV)" in out
    assert "# [pass] dlpack_ref: consumer.shape_null" in out
    assert _run_source(out, tmp_path).returncode == -signal.SIGSEGV


def test_explain_of_a_rule_nothing_fails_is_a_file_of_comments(tmp_path):
    rc, out, _ = command.run(["check", "--library", "dlpack_ref", "--explain", "consumer.shape_null"])
    assert rc == 0
    assert all(line.startswith("#") for line in out.splitlines())
    assert _run_source(out, tmp_path).returncode == 0


def test_explain_of_an_unknown_rule_is_a_usage_error():
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--explain", "consumer.no_such_rule"])
    assert rc == EXIT_USAGE and out == ""
    assert "no rule 'consumer.no_such_rule'" in err


# --- what the report says ------------------------------------------------------------------------------

def test_a_crash_is_named_as_one_in_every_format():
    rc, out, _ = command.run(["check", "--library", CRASHING, "--format", "json", "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    by_id = {r["check"]: r for r in lib["results"]}
    assert by_id["consumer.shape_null"]["crash"] == "SIGSEGV" and by_id["consumer.copy_true"]["crash"] is None
    for fmt, cell in (("table", "CRASH (SIGSEGV)"), ("markdown", "CRASH (SIGSEGV)")):
        rc, out, _ = command.run(["check", "--library", CRASHING, "--format", fmt, "--no-matrix"])
        [row] = [line for line in out.splitlines() if "consumer.shape" in line and "null" in line
                 and line.lstrip("| ").startswith("consumer.shape")]
        assert cell in row


def test_a_failing_run_ends_with_how_to_see_a_reproduction():
    rc, out, _ = command.run(["check", "--library", BROKEN, "--no-matrix"])
    assert rc == 1
    assert out.rstrip().splitlines()[-1].startswith(
        f"Each failure has a reproduction, Python that shows it with its library alone: python -m dlpack_ref "
        f"check --library {BROKEN} --explain consumer.copy_true prints one")


def test_without_library_the_gate_line_blames_no_missing_library_and_not_installed_is_one_line():
    rc, out, _ = command.run(["check", "--rules", "producer.zero_dim", "--no-matrix"])
    assert "requested" not in out and "asked for and not checked" not in out
    assert rc in (0, 1)
    not_installed = [line for line in out.splitlines() if "not installed" in line]
    assert len(not_installed) <= 1
    if not_installed:
        assert not_installed[0].startswith("- not installed: ")


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


def test_any_module_through_the_generic_adapter():
    """array-api-strict named as module:from_dlpack: no built-in adapter,
    no tolist, values read by indexing and through DLPack."""
    pytest.importorskip("array_api_strict")
    rc, out, _ = command.run(["check", "--library", "array_api_strict:from_dlpack", "--format", "json",
                              "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    by_id = {r["check"]: r for r in lib["results"]}
    assert by_id["producer.view_values"]["status"] == "pass"
    assert by_id["consumer.zero_copy_import"]["status"] == "pass"
    # What array-api-strict fails is its own affair: only that it ran.
    assert rc in (0, 1) and lib["summary"]["error"] == 0


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
    for words in ("exit status:", "--fail-on dlpack_ref", "report.schema.json", "formats", "module:from_dlpack",
                  "--json FILE"):
        assert words in help_text
    module_help = subprocess.run([sys.executable, "-m", "dlpack_ref", "--help"], capture_output=True, text=True,
                                 check=True).stdout
    assert module_help.startswith("usage: python -m dlpack_ref")


def test_the_hook_of_the_conformance_page_runs_as_written(tmp_path, monkeypatch):
    page = (Path(__file__).resolve().parents[1] / "docs" / "conformance.md").read_text()
    [source] = re.findall(r"```python\n(# my_dlpack_hook\.py.*?)```", page, re.S)
    (tmp_path / "my_dlpack_hook.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    rc, out, _ = command.run(["check", "--library", "my_dlpack_hook", "--format", "json", "--no-matrix"])
    [lib] = json.loads(out)["libraries"]
    assert rc == 0 and lib["summary"]["fail"] == lib["summary"]["error"] == 0
    not_supported = {r["check"] for r in lib["results"] if r["status"] == "not supported"}
    assert not_supported == {"producer.read_only_flag", "producer.read_only_legacy_refused", "producer.scalar",
                             "producer.buffererror_for_unexportable", "producer.dtype_float4"}
    assert lib["version"] != "?"


def test_the_ecosystem_table_of_a_json_report(tmp_path):
    rc, out, _ = command.run(["check", "--library", "dlpack_ref", "--library", CRASHING, "--format", "json"])
    report_file = tmp_path / "report.json"
    report_file.write_text(out)
    table = subprocess.run([sys.executable, "-m", "dlpack_ref.conformance.ecosystem", str(report_file)],
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
