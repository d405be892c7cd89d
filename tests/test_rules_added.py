"""Adding a rule touches one file. A chapter module that declares one rule
and its breaker, added to a copy of the installed package and to nothing
else, is found by ``check`` (the rule runs, after the rules reports already
list), by the docs' table of what is checked (tools/docs_figures.py), and
by the proof: dlpack-ref passes it, its breaker fails exactly it, and the
failure's reproduction shows it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack_ref
from test_rules_proven import as_shown, observed, unaddressed

pytestmark = [pytest.mark.harness]

ROOT = Path(__file__).resolve().parent.parent
RULES = "python/dlpack_ref/conformance/rules"
NEW_RULE = "producer.dtype_int16"
SHOWS = "int16: exported (code, bits, lanes)=(1, 16, 1)"
CHAPTER = f'''"""A chapter added by a test: one rule and the subject that breaks it."""

from __future__ import annotations

from ..breaking.producers import Retyped
from ..table import breaks, rule
from .dtypes import DTYPE_TRIPLES, exported_dtypes


@rule(side="producer", source="header", where="DLDataTypeCode, kDLInt (bits 16)")
def dtype_int16(p) -> str:
    """int16 arrays export with the DLPack type code (int16)"""
    return exported_dtypes(p, ["int16"])


@breaks(dtype_int16, shows={SHOWS!r})
class Int16AsUint16(Retyped):
    """Exports int16 as uint16 (1, 16, 1)."""

    retyped = {{DTYPE_TRIPLES["int16"]: (1, 16, 1)}}
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A copy of the installed package with the new chapter in it: the one file added."""
    folder = tmp_path_factory.mktemp("site")
    package = Path(dlpack_ref.__file__).parent
    shutil.copytree(package, folder / "dlpack_ref", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "dlpack_ref" / "conformance" / "rules" / "chapters" / "added.py").write_text(CHAPTER)
    return folder


def run(site: Path, hooks: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A child process that imports dlpack-ref from ``site``, with tests/ and ``hooks`` importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(hooks), str(ROOT / "tests")]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=env,
                          stdin=subprocess.DEVNULL, cwd=cwd or hooks)


def producer_results(site: Path, hooks: Path, spec: str) -> dict:
    """Rule id -> result (the JSON report's) of every producer rule on ``spec``, in report order."""
    done = run(site, hooks, "-m", "dlpack_ref", "check", "--library", spec, "--rules", "producer.*",
               "--format", "json", "--no-matrix")
    assert done.returncode in (0, 1), f"exit {done.returncode}: {done.stderr[-2000:]}"
    [library] = json.loads(done.stdout)["libraries"]
    return {r["check"]: r for r in library["results"]}


def test_check_runs_the_new_rule_after_the_rules_reports_list(site, tmp_path):
    installed = subprocess.run([sys.executable, "-c", "from dlpack_ref.conformance.rules import entries\n"
                                "print(' '.join(e.rule.id for e in entries()))"],
                               capture_output=True, text=True, check=True).stdout.split()
    assert NEW_RULE not in installed
    results = producer_results(site, tmp_path, "dlpack_ref")
    producer_rules = [r for r in installed if r.startswith("producer.")]
    assert list(results) == producer_rules + [NEW_RULE]
    assert results[NEW_RULE]["status"] == "pass" and results[NEW_RULE]["detail"] == "int16=(0, 16, 1)"


def _docs_figures():
    if "docs_figures" in sys.modules:   # loaded by another test module
        return sys.modules["docs_figures"]
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "tools" / "docs_figures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_docs_read_the_rules_check_imports():
    from dlpack_ref.conformance.rules import entries
    docs_figures = _docs_figures()
    declared = docs_figures.checkout.source(RULES).need()["rules"]
    assert [(r["id"], r["text"], r["source"], r["where"]) for r in declared] == [
        (e.rule.id, e.rule.text, e.rule.source, e.rule.where) for e in entries()]
    assert {r["chapter"] for r in declared} == {e.chapter for e in entries()}


def test_the_docs_table_lists_the_new_rule(tmp_path):
    docs_figures = _docs_figures()
    shutil.copytree(ROOT / RULES, tmp_path / RULES, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "python/dlpack_ref/conformance/model.py", tmp_path / "python/dlpack_ref/conformance")
    (tmp_path / RULES / "chapters" / "added.py").write_text(CHAPTER)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(f"Rules:\n\n<!-- figures: rules-checked producer from {RULES} -->\n<!-- end figures -->\n")
    docs_figures.use_root(tmp_path)
    try:
        assert docs_figures.check(out=io.StringIO()) == 1   # the page lacks the table until generated
        assert docs_figures.main([]) == 0
    finally:
        docs_figures.use_root(ROOT)
    rows = [line for line in page.read_text().splitlines() if line.startswith("| `producer.")]
    assert rows[-1] == ("| `producer.dtype_int16` | int16 arrays export with the DLPack type code (int16) | "
                        "DLPack header: DLDataTypeCode, kDLInt (bits 16) |")
    assert rows[0].startswith("| `producer.legacy_without_max_version` |")


def test_the_proof_finds_the_new_rule_and_its_breaker(site, tmp_path):
    (tmp_path / "brk_added.py").write_text(
        f"from support.breakers import hook\n__dlpack_conformance__ = hook({NEW_RULE!r})\n")
    results = producer_results(site, tmp_path, "brk_added")
    assert results[NEW_RULE]["status"] == "fail" and SHOWS in results[NEW_RULE]["detail"]
    others = {r: f"{res['status']}: {res['detail']}" for r, res in results.items()
              if r != NEW_RULE and res["status"] not in ("pass", "not supported")}
    assert others == {}
    (tmp_path / "repro.py").write_text(results[NEW_RULE]["reproduction"])
    shown = run(site, tmp_path, str(tmp_path / "repro.py"))
    assert shown.returncode == 1, shown.stdout[-500:] + shown.stderr[-1500:]
    assert "expected: int16 arrays export with the DLPack type code (int16)" in shown.stdout.splitlines()
    assert [unaddressed(line) for line in observed(shown)] == [as_shown(results[NEW_RULE])]

