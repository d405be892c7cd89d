"""What a reproduction and a report weigh, for where the docs send them: a
reproduction carries only the definitions its rule's code reaches, the
sizes docs/conformance.md gives are the real ones, a Markdown report of one
library fits a pull-request comment (65,536 characters) and one of every
library a job summary (1 MiB), and ``--repro-dir`` writes the reproductions
beside the report instead."""

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dlpack_ref.conformance import report
from dlpack_ref.conformance.gate import AllowList
from dlpack_ref.conformance.model import Result, Status
from dlpack_ref.conformance.reproduce import reproduction, reproduction_lines
from dlpack_ref.conformance.rules import entries
from dlpack_ref.harness.output import EXIT_FAILED, EXIT_USAGE
from dlpack_ref.harness.registry import KNOWN
from support import command

pytestmark = pytest.mark.harness

DOCS = Path(__file__).resolve().parent.parent / "docs"
BROKEN = "support.broken_consumer:from_dlpack"
PR_COMMENT, JOB_SUMMARY = 65_536, 1 << 20


@pytest.fixture(scope="module", autouse=True)
def _support_importable():
    """The checker's children import the test doubles by spec, from tests/ on PYTHONPATH."""
    with command.support_importable():
        yield


def _lines(spec: str, rule_id: str, adapter: str = "known") -> list[str]:
    entry = {e.rule.id: e for e in entries()}[rule_id]
    return reproduction(spec, Result(entry.rule, Status.FAIL, "x"), adapter).splitlines()


def test_a_reproduction_carries_only_what_its_rule_reaches():
    source = "\n".join(_lines("numpy", "producer.dlpack_device_type"))
    # a producer rule makes no capsule and reads none: no factory, no reader
    for absent in ("class CapsuleFactory", "def read_values", "def read_capsule", "class ForeignProducer"):
        assert absent not in source
    # of the Producer, the method the rule calls, not those it does not
    assert "def make(self, dtype: str, shape: tuple, readonly: bool = False):" in source
    assert "def exports_once(self)" not in source and "def twice(self" not in source
    assert len(source.splitlines()) <= 250


def test_a_reproduction_carries_its_rules_side_of_the_adapter_alone():
    consumer_rule = "\n".join(_lines("numpy", "consumer.byte_offset"))
    # the producer NumPy's file makes (its views, its unexportable objects, the Producer class) is not built
    for absent in ("class Producer", "def producer():", "def views():", "def numpy_array"):
        assert absent not in consumer_rule, absent
    assert "def consumer():" in consumer_rule and consumer_rule.endswith(
        "checked_consumer = consumer()\n# the library's import may have taken the capsule factory's deleter hook: "
        "take it back\n_DELETER_ADDRESS, _CAPSULE_DESTRUCTOR_ADDRESS = _trampolines(_dispatch)\n"
        "show(RULE, outcome(byte_offset, checked_consumer))")
    producer_rule = "\n".join(_lines("numpy", "producer.dlpack_device_type"))
    for absent in ("class Consumer", "def consumer():", "np.from_dlpack"):
        assert absent not in producer_rule, absent
    assert producer_rule.endswith("checked_producer = producer()\nshow(RULE, outcome(dlpack_device_type, "
                                  "checked_producer))")
    # a side the library has no function for is given as None, as the checker gives it
    assert "checked_consumer = None\n" in "\n".join(_lines("pyarrow", "consumer.byte_offset"))
    assert "checked_producer = None\n" in "\n".join(_lines("mpi4py", "producer.dlpack_device_type"))


def test_what_a_librarys_sides_share_is_printed_with_them_comments_and_all():
    source = "\n".join(_lines("jax", "producer.dlpack_device_type"))
    checked = source[source.index("# --- what the checker ran"):]
    assert "def producer():" in checked and "def _tolist(x):" in checked
    assert "def _x64_mode():\n    import jax\n    # float64 and complex128 arrays need x64 mode" in checked
    # what the side does not call is not carried
    assert "def consumer():" not in source and "unsafe_buffer_pointer" not in source


SIZES = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "reproduction_sizes.json"


def test_the_committed_sizes_the_docs_give_are_the_real_ones():
    # docs/conformance.md renders them from this file (tools/docs_figures.py --check holds the page to it)
    committed = json.loads(SIZES.read_text(encoding="utf-8"))
    assert {side: reproduction_lines(lib)[side] for side, lib in committed["libraries"].items()} == committed["lines"], \
        "reproductions changed size: rerun python benchmarks/reproduction_sizes.py, then python tools/docs_figures.py"
    for side, lines in committed["lines"].items():
        s = committed["sides"][side]
        assert (s["min"], s["median"], s["max"]) == (min(lines.values()), statistics.median(lines.values()),
                                                   max(lines.values()))
    page = (DOCS / "conformance.md").read_text(encoding="utf-8")
    assert "<!-- figure: reproduction-sizes from benchmarks/results/reproduction_sizes.json -->" in page


def test_reproductions_carry_what_their_rule_reaches_and_no_more():
    medians = {side: statistics.median(lines.values()) for side, lines in reproduction_lines("numpy").items()}
    cuda = statistics.median(reproduction_lines("dlpack_ref")["cuda"].values())
    # the helpers' comments, the other side's adapter and the fallbacks of the options NumPy's adapter gives
    # are left out, and a CUDA rule calls cuda() alone (before: producer 328, consumer 936; CUDA 415 with
    # dlpack-ref's adapter); a consumer rule carries only the capsule options it gives (before: 699), and
    # a rule only its side's function of the adapter (before: producer 322, consumer 597), and a consumer
    # rule keeps the capsule it hands out only where it reads the capsule's name (before: consumer 540); the
    # factory reads a dtype and a device with one helper and names its counts apart from `live` (before: 535)
    assert medians["producer"] <= 310 and medians["consumer"] <= 520 and cuda <= 310, (medians, cuda)


def test_a_consumer_rule_carries_only_the_capsule_options_it_gives():
    plain = "\n".join(_lines("numpy", "consumer.byte_offset"))
    # no NULL strides, custom name, ndim override, NULL data or deleter, no raising or legacy-only producer,
    # no elements written, no reader of the capsule's fields: each is its own statement, left out
    for absent in ("def _given_strides", "def _given_name", "def _ndim_override", "def _given_data",
                   "if shape_null:", "if not deleter:", "if self.legacy_only:", "if self.raises is not None:",
                   "def read_capsule", "class FillingProducer", "class KeepingProducer", "if needs_versioned:"):
        assert absent not in plain, absent
    assert "def _allocated" in plain and "tensor.byte_offset = int(byte_offset)" in plain
    # the rule that gives an option carries its statement and helper
    assert "def _given_strides" in "\n".join(_lines("numpy", "consumer.null_strides_v1_3"))
    assert "if not deleter:" in "\n".join(_lines("numpy", "consumer.null_deleter"))
    assert "class FillingProducer" in "\n".join(_lines("numpy", "consumer.negative_strides"))
    # the producer that keeps its capsule, to read its name after the import, only where the rule reads it
    assert "class KeepingProducer" in "\n".join(_lines("numpy", "consumer.capsule_renamed"))


def test_a_consumer_rule_carries_none_of_the_fallbacks_numpys_adapter_replaces():
    source = "\n".join(_lines("numpy", "consumer.bad_name"))
    for absent in ("def read_values", "def result_values", "def data_pointer", "def keywords_taken",
                   "def elementwise_values", "    def make(self, dtype: str, shape: tuple"):
        assert absent not in source, absent
    assert "    def values(self, r):\n        return self.tolist(r)\n" in source
    # a library checked through the generic adapter may leave any option out: its fallbacks stay
    generic = "\n".join(_lines("numpy", "consumer.bad_name", "generic"))
    assert "def result_values" in generic and "def read_values" in generic


def _synthetic_run(libraries: list[str]) -> report.Run:
    """Every rule failing for each of ``libraries`` (their known adapters),
    with a full exchange matrix: the largest report they can make."""
    rules = [e.rule for e in entries()]
    runs = {lib: report.LibraryRun(lib, "1.0", [Result(rule, Status.FAIL, "the detail of a failure, as long as a "
                                                       "real one: " + "x" * 80, "TypeError", "y" * 120, lib)
                                                for rule in rules]) for lib in libraries}
    matrix = {(p, c): {"works": True, "zero_copy": True, "values_ok": True} for p in libraries for c in libraries}
    failed = [r for lr in runs.values() for r in lr.results]
    return report.Run(runs, [], {}, matrix, AllowList(), None, failed, [], EXIT_FAILED)


def test_every_library_failing_every_rule_fits_a_job_summary():
    text = report.render(_synthetic_run(list(KNOWN)), "markdown")
    assert len(text) < JOB_SUMMARY
    assert "<details>" not in text   # no room left: each failure named with the command that prints it
    assert "- numpy: consumer.shape\\_null: python -m dlpack\\_ref check --library numpy --explain " \
           "consumer.shape\\_null" in text


def test_one_library_failing_every_rule_fits_a_pull_request_comment():
    text = report.render(_synthetic_run(["numpy"]), "markdown")
    assert len(text) <= report.MARKDOWN_LIMIT < PR_COMMENT
    folded = re.findall(r"<details><summary>numpy: (\S+)</summary>", text)
    named = re.findall(r"^- numpy: (\S+): python -m dlpack\\_ref check", text, re.M)
    assert folded and named   # some fit, the others are named
    assert [r.replace("\\_", "_") for r in folded + named] == [e.rule.id for e in entries()]


def test_a_librarys_markdown_report_fits_a_pull_request_comment():
    pytest.importorskip("numpy")
    rc, out, err = command.run(["check", "--library", "numpy", "--format", "markdown"])
    assert rc in (0, 1), err[-2000:]
    assert len(out) < PR_COMMENT
    if rc == 1:
        assert "## Reproductions" in out and "<details>" in out


def test_repro_dir_writes_each_reproduction_beside_the_report(tmp_path):
    folder, json_file = tmp_path / "repros", tmp_path / "report.json"
    rc, out, err = command.run(["check", "--library", BROKEN, "--no-matrix", "--format", "markdown",
                                "--repro-dir", str(folder), "--json", str(json_file)])
    assert rc == EXIT_FAILED, err[-2000:]
    [lib] = json.loads(json_file.read_text())["libraries"]
    wanted = {r["check"]: r["reproduction"] for r in lib["results"] if r["reproduction"]}
    assert sorted(wanted) == ["consumer.copy_true", "consumer.shape_null"]
    for rule, source in wanted.items():
        path = folder / f"support.broken_consumer_from_dlpack.{rule}.py"
        assert path.read_text() == source
        assert report.md_escape(f"- {BROKEN}: {rule}: {path}") in out
    assert "<details>" not in out
    run = subprocess.run([sys.executable, str(folder / "support.broken_consumer_from_dlpack.consumer.copy_true.py")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout.splitlines()[-1] == "observed: copy=True imported in place (same pointer)"


def test_a_repro_dir_that_cannot_be_made_is_a_usage_error_before_anything_runs(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc, out, err = command.run(["check", "--library", "dlpack_ref", "--repro-dir", str(blocker / "repros")])
    assert rc == EXIT_USAGE and out == ""
    assert f"error: --repro-dir {blocker / 'repros'}: Not a directory" in err
    assert "checks" not in err
