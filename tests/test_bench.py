"""``dlpack-ref bench``: its arguments and exit statuses, the JSON report
against its schema, zero-copy detection by pointer (a producer that secretly
copies is reported as a copy), ``--library`` hooks, a pair that crashes
(reported from the pre-flight's child process, everything else timed), the
chart, instruction counts, and the quick run over every installed library
as CI runs it. No test asserts a timing: only that times were taken."""

import json
import os
import shutil
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref import cli
from dlpack_ref.bench import callgrind, chart, report, timing
from dlpack_ref.harness import registry
from dlpack_ref.harness.output import EXIT_FAILED, EXIT_MISSING, EXIT_OK, EXIT_USAGE
from support import command, hostile_libraries

pytestmark = pytest.mark.harness

SECRET = "support.secret_copy"
CRASHING = "support.crashing_import"
DEFERRED = "support.deferred_copy"


@pytest.fixture(scope="module", autouse=True)
def _support_importable(tmp_path_factory):
    """The pre-flight imports each library afresh in a child process, which
    finds the test doubles on PYTHONPATH, as a user's own module would be
    (tests/support, and the hostile libraries written to a folder)."""
    folder = tmp_path_factory.mktemp("hostile")
    hostile_libraries.write(folder)
    with command.support_importable(str(folder)):
        yield


@pytest.fixture(scope="module")
def schema():
    with open(report.SCHEMA_PATH) as f:
        data = json.load(f)
    jsonschema.Draft202012Validator.check_schema(data)
    return data


@pytest.fixture(scope="module")
def secret_run(schema):
    """numpy and the secretly copying producer, with the known libraries
    installed mocked down to numpy and one missing (--installed adds them)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "installed", lambda: (["dlpack_ref", "numpy"], ["cupy"]))
        rc, out, err = command.run_here(["bench", "--library", SECRET, "--installed", "--quick", "--format", "json"])
    assert rc == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    return doc, err


def _pair(doc, producer, consumer):
    [pair] = [p for p in doc["pairs"] if (p["producer"], p["consumer"]) == (producer, consumer)]
    return pair


# --- the command line ---------------------------------------------------------------

@pytest.mark.parametrize("argv", [["bench", "--format", "xml"], ["bench", "--rounds", "3"], ["bench", "extra"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv, prog="dlpack-ref")
    assert exc.value.code == EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: dlpack-ref") and "error:" in err


def test_a_chart_file_of_another_type_is_a_usage_error(tmp_path):
    rc, out, err = command.run(["bench", "--library", "dlpack_ref", "--plot", str(tmp_path / "chart.pdf")])
    assert rc == EXIT_USAGE
    assert out == "" and "the file must end in .png or .svg" in err


@pytest.mark.parametrize("flag, name", [("--plot", "c.png"), ("--json", "c.json")])
def test_a_path_that_cannot_be_written_is_a_usage_error_before_measuring(flag, name):
    rc, out, err = command.run(["bench", "--library", "dlpack_ref", flag, f"/no/such/dir/{name}"])
    assert rc == EXIT_USAGE
    assert out == "" and f"error: {flag} /no/such/dir/{name}: the folder /no/such/dir does not exist" in err
    assert "pre-flight" not in err and "Traceback" not in err


def test_a_library_that_prints_leaves_the_json_report_intact(tmp_path, schema):
    rc, out, err = command.run(["bench", "--library", "prints_everywhere", "--quick", "--format", "json",
                                "--json", str(tmp_path / "bench.json")])
    assert rc == EXIT_OK, err[-2000:]
    doc = json.loads(out)   # stdout is the report and nothing else
    jsonschema.validate(doc, schema)
    assert json.loads((tmp_path / "bench.json").read_text()) == doc
    assert "written to fd 1 at import" in err and "printed by the factory" in err


def test_a_consumer_that_takes_capsules_is_handed_them(schema):
    rc, out, err = command.run(["bench", "--library", "capsule_only", "--quick", "--format", "json"])
    assert rc == EXIT_OK, err[-2000:]
    doc = json.loads(out)
    pair = _pair(doc, "dlpack_ref", "capsule_only")
    assert pair["status"] == "measured", pair
    assert pair["zero_copy"] is False   # it copies (into float64)


def test_a_missing_library_asked_for_exits_3_before_measuring():
    rc, out, err = command.run(["bench", "--library", "no_such_lib_xyz", "--quick"])
    assert rc == EXIT_MISSING == 3
    assert out == ""
    assert "no_such_lib_xyz: cannot be imported: ModuleNotFoundError" in err
    assert "pre-flight" not in err


def test_without_matplotlib_plot_fails_before_measuring_and_removes_the_old_chart(tmp_path, monkeypatch):
    old = tmp_path / "exchange.png"
    old.write_bytes(b"an earlier run's chart")
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib raises ImportError
    rc, out, err = command.run_here(["bench", "--library", "dlpack_ref", "--quick", "--plot", str(old)])
    assert rc == EXIT_FAILED == 1
    assert out == "" and not old.exists()
    assert "--plot needs matplotlib" in err and "was removed" in err and "pre-flight" not in err


def test_a_chart_without_matplotlib_removes_the_stale_one(tmp_path, monkeypatch):
    """The helper every chart-drawing script uses (benchmarks/bench_copies.py too)."""
    stale = tmp_path / "copies.png"
    stale.write_bytes(b"old")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert chart.pyplot_or_remove(str(stale)) is None
    assert not stale.exists()
    assert chart.pyplot_or_remove(str(stale)) is None   # nothing there: nothing to do


# --- what a run reports ---------------------------------------------------------------

def test_json_report_matches_its_schema_with_versions_machine_and_load(secret_run):
    doc, err = secret_run
    assert doc["schema_version"] == 1
    assert doc["tool"] == {"name": "dlpack-ref", "version": dr.__version__, "dlpack_version": [1, 3]}
    assert doc["environment"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert doc["machine"]["cores"] == os.cpu_count()
    assert len(doc["machine"]["load_average"]["start"]) == len(doc["machine"]["load_average"]["end"]) == 3
    libs = {lib["name"]: lib for lib in doc["libraries"]}
    assert list(libs) == ["dlpack_ref", SECRET, "numpy"]   # dlpack_ref first, then --library, then --installed
    assert libs["numpy"]["version"] == np.__version__
    assert libs[SECRET] | {"version": None} == {"name": SECRET, "version": None, "producer": True,
                                                 "consumer": False, "exchange_table": None}
    assert libs["dlpack_ref"]["exchange_table"] == [1, 3]
    assert doc["missing"] == [{"name": "cupy", "reason": "not installed"}]
    # 3 producers x 2 consumers, 3 calls per producer, 2 copies of their own arrays, 2 of NumPy's, memcpy
    assert "pre-flight: 20 calls" in err


def test_every_pair_is_timed_and_zero_copy_is_judged_by_pointer(secret_run):
    doc, _ = secret_run
    assert {(p["producer"], p["consumer"]) for p in doc["pairs"]} == {
        (p, c) for p in ("dlpack_ref", SECRET, "numpy") for c in ("dlpack_ref", "numpy")}
    for pair in doc["pairs"]:
        assert pair["status"] == "measured" and pair["reason"] is None, pair
        assert 0 < pair["ns_min"] <= pair["ns_median"] and pair["calls_per_sample"] >= 1
    # NumPy's own pointers are the oracle: both libraries import each other in place...
    for producer in ("dlpack_ref", "numpy"):
        for consumer in ("dlpack_ref", "numpy"):
            assert _pair(doc, producer, consumer)["zero_copy"] is True
    # ... and whatever the consumer, a producer that copies on export is a copy.
    assert _pair(doc, SECRET, "numpy")["zero_copy"] is False
    assert _pair(doc, SECRET, "dlpack_ref")["zero_copy"] is False


def test_producer_methods_and_the_table_path(secret_run):
    doc, _ = secret_run
    methods = {m["library"]: m for m in doc["producers"]}
    for m in methods.values():
        assert m["dlpack"]["status"] == m["dlpack_device"]["status"] == "measured"
    # numpy's type publishes no exchange table: nothing to set beside __dlpack__.
    assert methods["numpy"]["import_by_table"] is None
    assert methods["numpy"]["import_by_dlpack"]["status"] == "not measured"
    # dlpack_ref's own arrays are aliased, not imported through its table; the capsule import is timed.
    assert methods["dlpack_ref"]["import_by_table"] is None
    assert methods["dlpack_ref"]["import_by_dlpack"]["status"] == "measured"


def test_copies_beside_memcpy(secret_run):
    doc, _ = secret_run
    copies = doc["copies"]
    assert copies["bytes"] == 64 << 20 and copies["memcpy"]["status"] == "measured"
    by_lib = {c["library"]: c for c in copies["libraries"]}
    assert set(by_lib) == {"dlpack_ref", "numpy"}
    for c in by_lib.values():
        assert c["status"] == "measured" and c["copied"] is True
        assert c["gb_per_s"] > 0 and c["of_memcpy"] > 0


def test_a_copy_that_returns_before_it_is_made_is_timed_until_it_can_be_read(schema):
    """A library whose copy returns at once, made by a thread 250 ms later
    (its __dlpack__ waits for it), takes longer than memcpy: timed to its
    return, it would show tens of times memcpy's speed."""
    rc, out, err = command.run(["bench", "--library", DEFERRED, "--quick", "--format", "json"])
    assert rc == EXIT_OK, err[-2000:]
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    for kind in ("libraries", "from_numpy"):
        rows = {c["library"]: c for c in doc["copies"][kind]}
        deferred = rows[DEFERRED]
        assert deferred["status"] == "measured" and deferred["copied"] is True, deferred
        assert deferred["ready_by"] == "__dlpack__"
        assert deferred["ns_min"] >= 250e6   # its copy's delay: 250 ms
        assert deferred["of_memcpy"] < 1.0, deferred
        assert rows["dlpack_ref"]["ready_by"] == "__dlpack__"


def test_a_copy_without_dlpack_is_read_through_its_data_pointer():
    from dlpack_ref.bench import cases
    seen = []

    class Buffer:   # a result without __dlpack__, as mpi4py's buffers are
        pass

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cases, "subject", lambda spec: type("S", (), {"consumer": type("C", (), {
            "pointer": staticmethod(lambda r: seen.append(r) or 1)})})())
        ready = cases.readable("buffers")
    result = Buffer()
    ready(result)
    assert seen == [result] and cases.ready_by(result) == "data pointer"
    assert cases.ready_by(np.zeros(2)) == "__dlpack__"


def test_dlpack_ref_standings_name_the_best_other_library(secret_run):
    doc, _ = secret_run
    as_consumer = {s["producer"]: s for s in doc["dlpack_ref"]["as_consumer"]}
    assert set(as_consumer) == {"dlpack_ref", SECRET, "numpy"}
    for producer, s in as_consumer.items():
        assert s["best_other"] == "numpy"   # the only other consumer
        assert s["ratio"] == s["dlpack_ref_ns_median"] / s["best_other_ns_median"]
        assert s["dlpack_ref_ns_median"] == _pair(doc, producer, "dlpack_ref")["ns_median"]
    as_producer = {s["consumer"]: s for s in doc["dlpack_ref"]["as_producer"]}
    assert {s["best_other"] for s in as_producer.values()} <= {SECRET, "numpy"}


def test_table_and_markdown_show_the_matrix_and_the_copies(secret_run):
    doc, _ = secret_run
    table = report.render(doc, "table")
    assert "producer \\ consumer" in table and "copy=True of a 64 MiB array" in table
    row = next(line for line in table.splitlines() if line.startswith(SECRET))   # its row of the matrix
    assert row.count(" copy") == 2   # both consumers' cells
    md = report.render(doc, "markdown")
    assert "| producer \\\\ consumer | dlpack\\_ref | numpy |" in md
    assert "- not benchmarked: cupy (not installed)" in md


def test_a_crashing_pair_is_reported_from_the_preflight_and_the_rest_is_timed(schema):
    rc, out, err = command.run(["bench", "--library", CRASHING, "--quick", "--format", "json"])
    assert rc == EXIT_MISSING  # the library asked for had nothing timed: every call of it crashed
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    crashed = _pair(doc, "dlpack_ref", CRASHING)
    assert crashed["status"] == "crashed" and crashed["ns_median"] is None and crashed["zero_copy"] is None
    assert "killed by SIGSEGV" in crashed["reason"]
    assert _pair(doc, "dlpack_ref", "dlpack_ref")["status"] == "measured"
    [copy] = [c for c in doc["copies"]["libraries"] if c["library"] == CRASHING]
    assert copy["status"] == "crashed"
    assert f"dlpack_ref -> {CRASHING}: the call crashed its process" in report.render(doc, "table")
    assert "failing" in err and "not timed" in err


def test_a_refused_call_is_reported_with_the_exception():
    pytest.importorskip("tvm_ffi")
    rc, out, _ = command.run(["bench", "--library", "tvm_ffi", "--quick", "--format", "json"])
    assert rc == 0
    [copy] = [c for c in json.loads(out)["copies"]["libraries"] if c["library"] == "tvm_ffi"]
    # tvm_ffi.from_dlpack takes no copy keyword (its own signature is the oracle).
    assert copy["status"] == "refused" and copy["ns_median"] is None
    assert "TypeError" in copy["reason"] and "copy" in copy["reason"]


def _installed(name):
    try:
        __import__(name)
    except ImportError:
        return False
    return True


# --- timing and counting ------------------------------------------------------------------

def test_compare_rotates_the_order_every_round():
    seen = []
    calls = {name: (lambda name=name: seen.append(name)) for name in "abc"}
    stats = timing.compare(calls, rounds=3, budget_s=0.0)
    # budget 0: one call per sample, after one calibrating call each
    assert seen == list("abc") + list("abc") + list("bca") + list("cab")
    for s in stats.values():
        assert s["number"] == 1 and 0 < s["min_ns"] <= s["median_ns"]
    assert timing.compare({}, rounds=3) == {}


@pytest.fixture(scope="module")
def countable():
    """Skip where callgrind cannot count here: valgrind missing, or an
    interpreter built without the symbols it counts by (a stripped build)."""
    why = callgrind.unavailable()
    if why is not None:
        pytest.skip(f"instructions cannot be counted here: {why}")


def test_callgrind_counts_more_instructions_for_more_work(tmp_path, countable):
    profile = tmp_path / "big.out"
    counts, loop = callgrind.count("dlpack_ref.bench.callgrind:source_calls",
                                   ["items = list(range(1000))", {"small": "sum(items[:10])", "big": "sum(items)"}],
                                   loops=50, keep={"big": str(profile)})
    assert loop > 0
    assert 0 < counts["small"] < counts["big"]
    assert counts["big"] > 10 * counts["small"]   # 1000 additions against 10
    assert "summary:" in profile.read_text() or "totals:" in profile.read_text()


def test_instructions_are_counted_per_pair(schema, countable):
    rc, out, _ = command.run(["bench", "--library", "dlpack_ref", "--quick", "--instructions", "--format", "json"])
    assert rc == 0
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    assert _pair(doc, "dlpack_ref", "dlpack_ref")["instructions"] > 0
    assert doc["producers"][0]["dlpack"]["instructions"] > 0
    assert doc["copies"]["memcpy"]["instructions"] is None   # copies are timed, not counted


def test_valgrind_is_not_used_under_address_sanitizer(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/valgrind")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/gcc/x86_64-linux-gnu/12/libasan.so")
    assert "AddressSanitizer" in callgrind.missing()
    monkeypatch.delenv("LD_PRELOAD")
    assert callgrind.missing() is None


def test_warnings_for_a_loaded_machine_and_a_missing_valgrind(monkeypatch):
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 0.5, 1.0, 1.0))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    rc, out, err = command.run_here(["bench", "--library", "dlpack_ref", "--quick", "--instructions", "--format",
                                     "json"])
    assert rc == 0
    doc = json.loads(out)
    assert doc["machine"]["overloaded"] is True
    assert len(doc["notes"]) == 3
    assert doc["notes"][0].startswith(f"the load average at the start ({cores + 0.5:.2f}) exceeds the {cores} cores")
    assert doc["notes"][1] == "instructions were not counted: valgrind is not installed"
    assert doc["notes"][2].startswith("the load average at the end")
    assert f"warning: {doc['notes'][0]}" in err
    assert _pair(doc, "dlpack_ref", "dlpack_ref")["instructions"] is None


def test_an_interpreter_callgrind_cannot_count_by_is_a_note_not_a_failure(monkeypatch):
    """A stripped interpreter (Debian's, without its debug symbols) gives
    callgrind no loop to count in: the run still completes (exit 0), and
    says why instructions are missing."""
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/valgrind")
    monkeypatch.delenv("LD_PRELOAD", raising=False)

    def stripped(*args, **kwargs):
        raise RuntimeError("callgrind made no dump at sys_getswitchinterval: this interpreter has no symbols to count by")
    monkeypatch.setattr(callgrind, "count", stripped)
    rc, out, err = command.run_here(["bench", "--library", "dlpack_ref", "--quick", "--instructions", "--format",
                                     "json"])
    assert rc == 0
    doc = json.loads(out)
    assert "instructions were not counted: callgrind made no dump at sys_getswitchinterval: " \
           "this interpreter has no symbols to count by" in doc["notes"]
    assert _pair(doc, "dlpack_ref", "dlpack_ref")["instructions"] is None


# --- the quick run, as CI runs it ---------------------------------------------------------------

def test_quick_run_over_every_installed_library(tmp_path, schema):
    """``python -m dlpack_ref bench --quick`` in a fresh interpreter: every
    installed library of ``check`` benchmarked, the JSON valid, the chart
    drawn by this run (where matplotlib is installed)."""
    found, _ = registry.installed()
    png = tmp_path / "exchange.png"
    plot = ["--plot", str(png)] if _installed("matplotlib") else []
    run = subprocess.run([sys.executable, "-m", "dlpack_ref", "bench", "--quick", "--format", "json",
                          "--json", str(tmp_path / "exchange.json"), *plot],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    jsonschema.validate(doc, schema)
    assert json.loads((tmp_path / "exchange.json").read_text()) == doc
    assert [lib["name"] for lib in doc["libraries"]] == ["dlpack_ref"] + [f for f in found if f != "dlpack_ref"]
    # Another library's pair may refuse or even crash (reported, not timed); none is left unexplained.
    assert not [p for p in doc["pairs"] if p["status"] == "error"]
    assert _pair(doc, "dlpack_ref", "dlpack_ref")["status"] == "measured"
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_chart_of_an_overloaded_run_says_so_in_its_title():
    # A chart is often shared alone, without the report's warning beside it.
    from dlpack_ref.bench import chart
    doc = {"machine": {"cpu": "Some CPU", "cores": 2, "load_average": {"start": [5.4, 5.0, 4.0]},
                       "overloaded": True},
           "settings": {"array": {"shape": [16], "dtype": "float32"}, "rounds": 31}}
    title = chart.chart_title(doc)
    assert "load 5.4" in title and "overloaded: these times are unreliable" in title
    doc["machine"].update(overloaded=False, load_average={"start": [0.3, 0.2, 0.1]})
    assert "unreliable" not in chart.chart_title(doc)
