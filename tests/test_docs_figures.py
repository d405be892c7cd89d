"""The measured figures of the documentation pages come from the committed
result files of the runs that made them (tools/docs_figures.py): every
generated block of every page agrees with its file, no page quotes a
measurement outside a block, the findings of the ecosystem page cite rules
some library still fails, and each file cited carries a full run on a quiet
machine (its machine, load, settings and versions). The generator itself is
tested on small pages and files made here."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "tools" / "docs_figures.py")
figures = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = figures   # its dataclasses look their module up
_spec.loader.exec_module(figures)


@pytest.fixture(autouse=True)
def _this_checkout():
    figures.use_root(ROOT)
    yield
    figures.use_root(ROOT)


# ---------------------------------------------------------------------------
# This checkout


def test_every_page_agrees_with_its_result_files(capsys):
    status = figures.check()
    assert status == 0, capsys.readouterr().out


def test_the_check_runs_from_the_command_line():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "docs_figures.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_page_with_numbers_has_generated_blocks():
    cited = {name for name in ("benchmarks.md", "ecosystem.md", "vendoring.md", "conformance.md")
             if figures.blocks_of(ROOT / "docs" / name)}
    assert cited == {"benchmarks.md", "ecosystem.md", "vendoring.md", "conformance.md"}


def test_one_fact_in_one_place():
    # The alignment JAX needs is stated on the vendoring page only; the others link there.
    docs = ROOT / "docs"
    alignment = re.compile(r"\d+-byte aligned|aligned to \d+ bytes")
    stating = {p.name for p in docs.glob("*.md") if p.name != "changelog.md"
               for para in p.read_text().split("\n\n") if "JAX" in para and alignment.search(para)}
    assert stating == {"vendoring.md"}
    for name in ("benchmarks.md", "ecosystem.md"):
        assert "vendoring.md#jax-and-memory-alignment" in (docs / name).read_text()
    # The adopter counts (and their loop count) are on the vendoring page only.
    tables = [p.name for p in docs.glob("*.md") if "figures: adopter-" in p.read_text()]
    assert tables == ["vendoring.md"]


@pytest.mark.parametrize("path", sorted(figures.FILES))
def test_each_result_file_holds_a_full_run(path):
    """A full run on a quiet machine with its metadata, and every figure the
    pages show from it; the failure names the command that makes it."""
    problems = figures.needs_run(path)
    assert problems == [], f"{path}: {'; '.join(problems)}; make it: {figures.FILES[path][0]}"


# ---------------------------------------------------------------------------
# The generator, on pages and files made here

RUN = {"command": "python benchmarks/pool_threshold.py", "date": "2026-01-02",
       "machine": {"cpu": "Test CPU", "cores": 4, "load_average": {"start": [0.25, 0, 0], "end": [0.5, 0, 0]},
                   "overloaded": False},
       "environment": {}, "versions": {"python": "3.11.7", "dlpack_ref": "0.1.0", "numpy": "2.4.6"}}


def pool_file(gain=524288, grain=262144, quick=False):
    rows = [{"bytes_moved": n, "case": c, "ratio": r} for n, r in ((262144, 1.2), (524288, 0.7))
            for c in ("copy", "transpose")]
    return {**RUN, "settings": {"quick": quick, "threads": 2, "runs": 5, "rounds": 21},
            "core_grain_bytes": grain, "gain_from_bytes_moved": gain, "break_even_from_bytes_moved": gain,
            "threshold_bytes_moved": gain, "geomean_by_size": {"262144": 1.2, "524288": 0.7}, "rows": rows}


PAGE = """# Page

Some text.

<!-- figures: pool-run from benchmarks/results/pool_threshold.json -->
<!-- end figures -->

<!-- figures: pool-table from benchmarks/results/pool_threshold.json -->
<!-- end figures -->

The threshold: <!-- figure: summary-line numpy from benchmarks/results/ecosystem_1.json --><!-- end figure -->.
"""


def check_report(libraries):
    return {"schema_version": 1, "date": "2026-01-02", "tool": {"version": "0.1.0"},
            "environment": {"implementation": "CPython", "python": "3.11.7", "machine": "x86_64",
                            "platform": "Linux"},
            "libraries": libraries, "exchange": [{"producer": "numpy", "consumer": "numpy", "works": True,
                                                  "zero_copy": True, "values_ok": True}]}


def numpy_lib(fail_rule="consumer.data_null"):
    return {"name": "numpy", "version": "2.4.6", "checked": True, "note": "",
            "summary": {"pass": 1, "fail": 1, "not supported": 0, "error": 0, "allowed": 0},
            "results": [{"check": "producer.zero_dim", "status": "pass", "crash": None},
                        {"check": fail_rule, "status": "fail", "crash": None}]}


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "docs").mkdir()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "docs" / "page.md").write_text(PAGE)
    (results / "pool_threshold.json").write_text(json.dumps(pool_file()))
    (results / "ecosystem_1.json").write_text(json.dumps(check_report([numpy_lib()])))
    figures.use_root(tmp_path)
    return tmp_path


def run(tree, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "docs_figures.py"), "--root", str(tree), *args],
                          capture_output=True, text=True, check=False)


def test_a_page_is_written_from_its_files_and_then_agrees(tree):
    assert run(tree, "--check").returncode == 1          # the blocks are empty: they differ
    assert run(tree).returncode == 0
    text = (tree / "docs" / "page.md").read_text()
    assert "Test CPU, 4 cores, load average 0.25 at the start and 0.50 at the end" in text
    assert "numpy 2.4.6" in text and "5 sweeps of 21 interleaved rounds" in text
    assert "| 256 KiB | 1.20 | 1.20 | 1.20 |" in text and "median of 5 sweeps" in text
    assert "`numpy 2.4.6: 1 pass, 1 fail, 0 error, 0 not supported; 0 of the failures allowed`" in text
    done = run(tree, "--check")
    assert done.returncode == 0, done.stdout


def test_a_page_that_differs_from_its_file_is_named_with_its_block(tree):
    assert run(tree).returncode == 0
    page = tree / "docs" / "page.md"
    page.write_text(page.read_text().replace("| 512 KiB | 0.70 |", "| 512 KiB | 0.71 |"))
    done = run(tree, "--check")
    assert done.returncode == 1
    assert re.search(r"docs/page.md:\d+: block 'pool-table from benchmarks/results/pool_threshold.json' "
                     r"differs", done.stdout)
    assert "pool-run" not in done.stdout
    # a new run of the file, the page untouched, is found the same way
    assert run(tree).returncode == 0
    rerun = pool_file()
    rerun["rows"][2]["ratio"] = 0.6
    (tree / "benchmarks" / "results" / "pool_threshold.json").write_text(json.dumps(rerun))
    done = run(tree, "--check")
    assert done.returncode == 1 and "block 'pool-table" in done.stdout


def test_a_run_without_its_metadata_says_so_on_the_page_and_in_the_status(tree):
    bare = {k: v for k, v in pool_file().items() if k not in ("command", "machine", "versions", "settings")}
    (tree / "benchmarks" / "results" / "pool_threshold.json").write_text(json.dumps(bare))
    assert run(tree).returncode == 0
    text = (tree / "docs" / "page.md").read_text()
    assert "the machine and its load were not recorded" in text and "the versions were not recorded" in text
    problems = figures.needs_run("benchmarks/results/pool_threshold.json")
    assert any("records no command, machine, versions, settings" in p for p in problems)
    assert run(tree, "--strict").returncode == 1


def test_a_quick_or_loaded_run_is_marked(tree):
    loaded = pool_file(quick=True)
    loaded["machine"] = {**loaded["machine"], "overloaded": True}
    (tree / "benchmarks" / "results" / "pool_threshold.json").write_text(json.dumps(loaded))
    assert run(tree).returncode == 0
    text = (tree / "docs" / "page.md").read_text()
    assert "**A quick run**" in text and "the times mean little" in text
    problems = figures.needs_run("benchmarks/results/pool_threshold.json")
    assert any("quick" in p for p in problems) and any("overloaded" in p for p in problems)


def test_a_threshold_the_core_does_not_use_is_a_problem(tree):
    (tree / "benchmarks" / "results" / "pool_threshold.json").write_text(json.dumps(pool_file(gain=1 << 22)))
    assert any("not twice the core's grain" in p for p in figures.needs_run("benchmarks/results/pool_threshold.json"))


def test_a_file_without_the_figures_says_so_on_the_page(tree):
    (tree / "docs" / "page.md").write_text(
        "# P\n\n<!-- figures: instructions from benchmarks/results/exchange.json -->\n<!-- end figures -->\n")
    assert run(tree).returncode == 0
    text = (tree / "docs" / "page.md").read_text()
    assert "No figures here yet: `benchmarks/results/exchange.json` is not committed" in text
    assert "dlpack-ref bench --instructions" in text
    assert run(tree, "--check").returncode == 0      # the page says what its files give
    done = run(tree, "--status")
    assert done.returncode == 1 and "benchmarks/results/exchange.json: NEEDS A RUN" in done.stdout


@pytest.mark.parametrize("sentence", [
    "It takes 12 ms here.", "A call costs 2,345 instructions.", "dlpack-ref is 1.5x faster.",
    "About 4 % more.", "The suite: 3,544 passed.", "| a | 1898 (0.69) | 2904 (1.06) |",
    "| case | ms | GB/s |", "| p | 634 | 2097 | 224291 |"])
def test_a_measurement_outside_a_block_fails_the_check(tree, sentence):
    assert run(tree).returncode == 0
    page = tree / "docs" / "page.md"
    page.write_text(page.read_text() + "\n" + sentence + "\n")
    done = run(tree, "--check")
    assert done.returncode == 1 and "outside a generated block" in done.stdout


@pytest.mark.parametrize("text", [
    "```bash\npython x.py   # 12 ms\n```", "<!-- 12 ms, a comment -->", "| semantics | 1 | kDLCPU |",
    "Python 3.11, NumPy 2.4."])
def test_code_comments_and_plain_numbers_are_not_measurements(tree, text):
    assert run(tree).returncode == 0
    page = tree / "docs" / "page.md"
    page.write_text(page.read_text() + "\n" + text + "\n")
    done = run(tree, "--check")
    assert done.returncode == 0, done.stdout


def test_settings_are_allowed_where_listed_and_a_stale_allowance_fails(tree, monkeypatch):
    page = tree / "docs" / "page.md"
    page.write_text(page.read_text() + "\nWorkers poll for\n200 µs.\n")
    monkeypatch.setattr(figures, "SETTINGS", {"page.md": ["Workers poll for 200 µs"]})
    figures.main(["--root", str(tree)])
    figures.use_root(tree)
    with open(os.devnull, "w") as devnull:
        assert figures.check(out=devnull) == 0
    monkeypatch.setattr(figures, "SETTINGS", {"page.md": ["Workers poll for 200 µs", "a phrase gone"]})
    assert figures.stale_settings() == ["docs/page.md: 'a phrase gone'"]


def test_markers_in_code_are_examples_not_figures(tree):
    page = tree / "docs" / "page.md"
    page.write_text("# P\n\n```markdown\n<!-- figures: pool-table from benchmarks/results/pool_threshold.json -->\n"
                    "<!-- end figures -->\n```\n\nWritten `<!-- figure: NAME from FILE -->` ... "
                    "`<!-- end figure -->`.\n")
    assert figures.blocks_of(page) == []
    assert run(tree, "--check").returncode == 0


def test_an_inline_figure_may_not_start_a_line(tree):
    page = tree / "docs" / "page.md"
    page.write_text("# P\n\n<!-- figure: summary-line numpy from benchmarks/results/ecosystem_1.json -->"
                    "<!-- end figure -->\n")
    done = run(tree, "--check")
    assert done.returncode != 0 and "must not start a line" in (done.stdout + done.stderr)


@pytest.mark.parametrize("spec, error", [
    ("nonsense from benchmarks/results/pool_threshold.json", "unknown figure"),
    ("pool-table from benchmarks/results/other.json", "not a result file this script knows"),
    ("pool-table from benchmarks/results/copies.json", "is not made from"),
    ("pool-table", "no 'from FILE'")])
def test_a_bad_marker_is_named(tree, spec, error):
    (tree / "docs" / "page.md").write_text(f"# P\n\n<!-- figures: {spec} -->\n<!-- end figures -->\n")
    done = run(tree, "--check")
    assert done.returncode != 0 and error in (done.stdout + done.stderr)


def test_the_ecosystem_findings_cite_rules_some_library_fails(tree, monkeypatch):
    results = tree / "benchmarks" / "results"
    (results / "ecosystem_2.json").write_text(json.dumps(check_report([numpy_lib("consumer.byte_offset")])))
    findings = ("# E\n\n## What the findings mean for you\n\n- x (`consumer.data_null`, `consumer.byte_offset`)\n"
                "- y (`producer.zero_dim`)\n\n## Per library\n")
    (tree / "docs" / "ecosystem.md").write_text(findings)
    figures.use_root(tree)
    assert figures.stale_findings() == [
        ("docs/ecosystem.md: the findings cite `producer.zero_dim`, which no library fails in "
         "benchmarks/results/ecosystem_1.json, benchmarks/results/ecosystem_2.json")]


def test_two_check_reports_make_one_summary_and_a_matrix_each(tree):
    results = tree / "benchmarks" / "results"
    eco = numpy_lib()
    mlx = {**numpy_lib(), "name": "mlx", "version": "0.32.4"}
    (results / "ecosystem_2.json").write_text(json.dumps(check_report([eco, mlx])))
    sources = [figures.source("benchmarks/results/ecosystem_1.json"),
               figures.source("benchmarks/results/ecosystem_2.json")]
    summary = figures.ecosystem_summary(sources, [])
    assert "| numpy | 2.4.6 | 1 |" in summary and "| mlx | 0.32.4 | 2 |" in summary
    assert summary.count("| numpy |") == 1
    rules = figures.ecosystem_rules(sources, [])
    assert "Run 1:" in rules and "Run 2:" in rules and "| rule | mlx |" in rules
    assert figures.ecosystem_exchange(sources, []).count("producer \\\\ consumer") == 2


def test_the_ecosystem_page_marks_a_result_as_the_ecosystem_table_does(tree):
    # One cell function: the page's rule matrix and `python -m
    # dlpack_ref.conformance.ecosystem` write a result the same way.
    from dlpack_ref.conformance import ecosystem
    render_ecosystem = sys.modules["figures.render_ecosystem"]
    assert render_ecosystem.cell is ecosystem.cell
    crashed = numpy_lib()
    crashed["results"][0].update(status="fail", crash="killed by SIGSEGV")
    (tree / "benchmarks" / "results" / "ecosystem_2.json").write_text(json.dumps(check_report([crashed])))
    rules = figures.ecosystem_rules([figures.source("benchmarks/results/ecosystem_2.json")], [])
    assert f"| {ecosystem.cell(crashed['results'][0])} |" in rules


def test_slim_drops_the_reproductions_and_keeps_the_rest(tmp_path):
    report = check_report([numpy_lib()])
    report["libraries"][0]["results"][1]["reproduction"] = "import numpy\n" * 100
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert figures.main(["--slim", str(path)]) == 0
    slim = json.loads(path.read_text())
    assert slim["libraries"][0]["results"][1]["reproduction"] is None
    assert slim["libraries"][0]["summary"] == report["libraries"][0]["summary"]


# ---------------------------------------------------------------------------
# The writers of the result files


def test_runinfo_records_the_machine_the_load_the_settings_and_the_versions():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import runinfo
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    began = runinfo.start()
    rec = runinfo.record(began, settings={"rounds": 3}, modules=["numpy", "no_such_module_here"])
    assert set(rec) == {"command", "date", "machine", "environment", "versions", "settings"}
    assert rec["machine"]["cores"] >= 1 and rec["machine"]["cpu"]
    assert set(rec["machine"]["load_average"]) == {"start", "end"}
    assert rec["versions"]["dlpack_ref"] and rec["versions"]["no_such_module_here"] is None
    assert rec["settings"] == {"rounds": 3}


@pytest.mark.parametrize("script", ["bench_copies.py", "pool_threshold.py", "callgrind_exchange.py"])
def test_each_script_writes_its_run_into_its_file(script):
    text = (ROOT / "benchmarks" / script).read_text()
    assert "runinfo.start()" in text and "runinfo.record(" in text


def test_the_alignment_jax_needs_is_what_the_vendoring_page_states():
    """The one place that states it (docs/vendoring.md, "JAX and memory
    alignment") against the installed JAX: memory aligned to the stated
    bytes and no more is imported in place, memory aligned to half of them
    is copied (and refused under copy=False)."""
    np = pytest.importorskip("numpy")
    jnp = pytest.importorskip("jax.numpy")
    text = (ROOT / "docs" / "vendoring.md").read_text()
    stated = int(re.search(r"zero-copy only when its data pointer is (\d+)-byte aligned", text).group(1))
    buf = np.zeros(8 * stated, np.uint8)

    def view(align):   # float32 data aligned to `align` bytes and not to twice that
        off = next(o for o in range(0, 4 * stated, 4) if (buf.ctypes.data + o) % align == 0
                   and (buf.ctypes.data + o) % (2 * align) != 0)
        return buf[off:off + 64].view(np.float32)
    fits, short = view(stated), view(stated // 2)
    assert jnp.from_dlpack(fits).unsafe_buffer_pointer() == fits.ctypes.data
    assert jnp.from_dlpack(short).unsafe_buffer_pointer() != short.ctypes.data
    with pytest.raises(ValueError, match="align"):
        jnp.from_dlpack(short, copy=False)
