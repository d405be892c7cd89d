"""A known library's name is written once, in its own file of
dlpack_ref/harness/libraries/ (``KNOWN = Known(...)``, with the CI lane that
installs it and its pip requirements): the ecosystem lane, the benchmarks'
run_all.sh, the docs' list and the figures tools take their lists from
those declarations (the registry's command, or tools/figures/libraries.py,
which reads the same lines as source). No other tracked file lists known
libraries by hand outside a generated block."""

from __future__ import annotations

import importlib.util
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlpack_ref.harness.libraries._common import Known
from dlpack_ref.harness.registry import KNOWN, in_lane

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from figures import libraries as declared  # noqa: E402
from figures.markers import BLOCK, INLINE  # noqa: E402

if "docs_figures" in sys.modules:   # loaded by tests/test_docs_figures.py
    docs_figures = sys.modules["docs_figures"]
else:
    _spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "tools" / "docs_figures.py")
    docs_figures = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = docs_figures   # its dataclasses look their module up
    _spec.loader.exec_module(docs_figures)

# The folders whose files say which libraries to install, check, show or test.
SCANNED = ("docs/", ".ci/", "benchmarks/", "tools/", "tests/", "README.md")
# A log of past changes names what each change touched; result files are data.
NOT_SCANNED = ("docs/changelog.md", "benchmarks/results/")
# dlpack-ref itself and NumPy, its one dependency, are in every lane and named
# everywhere as the baseline: a list is of the other known libraries.
BASELINE = ("dlpack_ref", "numpy")
# Where the lists are read by machines (what a lane installs and checks, what a
# run remakes, what a test runs on), this many names within WINDOW lines are a
# list; elsewhere (pages, other tests and scripts, which name a few libraries
# to compare them), PROSE_LIST are.
MACHINE_FILES = (".ci/", "benchmarks/run_all.sh", "tools/", "tests/test_conformance_ecosystem.py")
MACHINE_LIST, PROSE_LIST, WINDOW = 3, 5, 2


def _spellings(library) -> list[str]:
    """How a file may write a known library: its name, its distribution, its pip requirements."""
    k = library.KNOWN
    return sorted({k.name, k.distribution, *(re.sub(r"\[.*", "", r) for r in k.requirements)})


# Spelled exactly, as commands, code and requirements take them: prose that
# compares libraries by what they do names them as people write them (MLX,
# PaddlePaddle, PyTorch) and is not a list the registry could give.
PATTERNS = {name: re.compile("|".join(rf"(?<![\w.-]){re.escape(s)}(?![\w-])" for s in _spellings(library)))
            for name, library in KNOWN.items() if name not in BASELINE}


def named_in(text: str) -> set[str]:
    return {name for name, pattern in PATTERNS.items() if pattern.search(text)}


def without_generated_blocks(text: str) -> str:
    """The text with each generated block's body blanked (its lines kept, so line numbers hold)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return INLINE.sub(blank, BLOCK.sub(blank, text))


def hand_lists(path: str, text: str) -> list[str]:
    """Each line of ``path`` that starts a hand-written list of known libraries."""
    lines = without_generated_blocks(text).splitlines()
    machine = path.startswith(MACHINE_FILES)
    found = []
    for i, line in enumerate(lines):
        first = named_in(line)
        if not first:
            continue
        names = named_in(" ".join(lines[i:i + WINDOW]))
        if len(names) >= (MACHINE_LIST if machine else PROSE_LIST):
            found.append(f"{path}:{i + 1}: names {', '.join(sorted(names))}: {line.strip()[:100]}")
    return found


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *SCANNED], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.splitlines() if not p.startswith(NOT_SCANNED) and p != "tests/test_library_names.py"]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_no_file_lists_known_libraries_by_hand():
    found = []
    for path in _tracked():
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        found += hand_lists(path, text)
    assert found == [], ("known libraries listed by hand: take the list from the registry "
                         "(python -m dlpack_ref.harness.registry) or a generated block:\n" + "\n".join(found))


def test_a_hand_list_is_found_in_a_script_and_a_page_but_not_in_a_generated_block():
    eco = in_lane("ecosystem")
    script = "set -e\nfor lib in " + " ".join(eco[:3]) + "; do :; done\n"
    assert [f.split(":")[1] for f in hand_lists(".ci/lanes/new.sh", script)] == ["2"]
    page = "Intro.\n\nWe check " + ", ".join(f"`{n}`" for n in eco[:5]) + " here.\n"
    assert [f.split(":")[1] for f in hand_lists("docs/new.md", page)] == ["3"]
    # two names on a page compare two libraries; a list needs more
    assert hand_lists("docs/new.md", f"`{eco[0]}` and `{eco[1]}` differ.\n") == []
    spec = f"known-libraries from {declared.FOLDER}"
    generated = f"We check <!-- figure: {spec} -->" + ", ".join(eco) + "<!-- end figure --> here.\n"
    assert hand_lists("docs/new.md", generated) == []


def test_the_figures_read_the_declarations_the_registry_imports():
    assert [(d["name"], d["lane"], tuple(d["requirements"]), d["distribution"], d["order"]) for d in declared.known()] \
        == [(n, k.KNOWN.lane, k.KNOWN.requirements, k.KNOWN.distribution, k.KNOWN.order) for n, k in KNOWN.items()]


def _registry(*args):
    return subprocess.run([sys.executable, "-m", "dlpack_ref.harness.registry", *args], capture_output=True,
                          text=True, timeout=60)


def test_the_registry_command_prints_a_lane_for_the_scripts():
    ecosystem = [n for n, k in KNOWN.items() if k.KNOWN.lane == "ecosystem"]
    assert ecosystem and ecosystem == in_lane("ecosystem")
    names = _registry("--lane", "ecosystem", "--names")
    assert (names.returncode, names.stdout.split()) == (0, ecosystem)
    requirements = _registry("--lane", "ecosystem", "--requirements")
    assert requirements.stdout.split() == [r for n in ecosystem for r in KNOWN[n].KNOWN.requirements]
    # a requirement differs from the distribution where the lane installs a build of it (extras, a CPU wheel)
    assert len(requirements.stdout.split()) >= len(ecosystem)
    everything = _registry("--names")
    assert everything.stdout.split() == list(KNOWN)
    # dlpack-ref comes from its checkout or wheel, never from a requirement
    assert KNOWN["dlpack_ref"].KNOWN.distribution not in _registry("--lane", "main", "--requirements").stdout.split()


def test_the_registry_command_refuses_an_unknown_lane_and_a_missing_question():
    bad = _registry("--lane", "gpu", "--names")
    assert bad.returncode == 2 and "invalid choice: 'gpu'" in bad.stderr
    assert _registry("--lane", "main").returncode == 2


def test_a_library_declares_a_lane_it_can_be_installed_in():
    with pytest.raises(ValueError, match="lane 'gpu' is not"):
        Known("x", module="x", distribution="x", order=99, lane="gpu")
    assert Known("x", module="x", distribution="x-dist", order=99).requirements == ("x-dist",)


def test_a_new_library_file_is_in_the_pages_list(tmp_path):
    shutil.copytree(ROOT / declared.FOLDER, tmp_path / declared.FOLDER)
    (tmp_path / declared.FOLDER / "newlib.py").write_text(
        'from ._common import Known\n\nKNOWN = Known("newlib", module="newlib", distribution="newlib-py", order=99,\n'
        '              lane="ecosystem", requirements=("newlib-py[cpu]",))\n')
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(f"Known: <!-- figure: known-libraries ecosystem from {declared.FOLDER} -->x<!-- end figure -->.\n")
    docs_figures.use_root(tmp_path)
    try:
        out = io.StringIO()
        assert docs_figures.check(out=out) == 1, out.getvalue()   # the page lacks it until regenerated
        assert "docs/page.md:1: block 'known-libraries ecosystem" in out.getvalue()
        assert docs_figures.main([]) == 0
        assert page.read_text().endswith(f", `{in_lane('ecosystem')[-1]}` and `newlib`<!-- end figure -->.\n")
        assert docs_figures.check(out=io.StringIO()) == 0
    finally:
        docs_figures.use_root(ROOT)
