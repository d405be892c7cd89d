"""Facts the docs state in more than one place say the same thing, and
the snippets a newcomer copies run as written: the README's after its own
set-up command, the CI workflow installs exactly what it builds, and the
site keeps inline code whole in its sidebar."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import command

pytestmark = pytest.mark.harness

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _plain(text: str) -> str:
    """Markdown as read: links as their text, no backticks, one space."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return " ".join(text.replace("`", "").split())


def _installed_by(setup: str) -> set[str]:
    """The modules the README's set-up command installs: the package itself
    (``.``) and every distribution named after it on the same pip line."""
    [line] = [line for line in setup.splitlines() if line.startswith("pip install")]
    names = line.split("&&")[0].split()[2:]
    return {"dlpack_ref" if name == "." else name.replace("-", "_") for name in names}


def test_the_readmes_use_snippet_runs_after_its_set_up():
    readme = (ROOT / "README.md").read_text()
    setup = _blocks(readme.split("## Set-up on a fresh machine")[1], "bash")[0]
    [use] = _blocks(readme.split("## Use")[1].split("\n## ")[0], "python")
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(use))
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])}
    assert imported <= _installed_by(setup), f"the Use snippet imports {imported - _installed_by(setup)}"
    done = subprocess.run([sys.executable, "-c", use], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _exit_rows(text: str) -> dict[str, str]:
    return {m.group(1): _plain(m.group(2)) for m in re.finditer(r"^\| ([0-3]) \| (.*) \|$", text, re.M)}


def test_the_exit_statuses_read_the_same_on_both_pages():
    conformance = _exit_rows((DOCS / "conformance.md").read_text())
    yardstick = _exit_rows((DOCS / "ci_yardstick.md").read_text())
    assert sorted(conformance) == ["0", "1", "2", "3"]
    assert yardstick == conformance
    assert "error" in yardstick["1"]


def test_what_the_generic_adapter_needs_reads_the_same_everywhere():
    rc, help_text, _ = command.run(["check", "--help"], timeout=60)
    texts = {"conformance.md": (DOCS / "conformance.md").read_text(),
             "ci_yardstick.md": (DOCS / "ci_yardstick.md").read_text(), "check --help": help_text}
    for where, text in texts.items():
        plain = _plain(text)
        assert "asarray and reshape" in plain, where
        assert "from_dlpack of NumPy arrays" in plain, where
        assert "asarray, from_dlpack" not in plain, where


def test_the_workflow_example_installs_exactly_what_it_builds():
    [workflow] = [b for b in _blocks((DOCS / "ci_yardstick.md").read_text(), "yaml") if "jobs:" in b]
    assert re.search(r'python-version: "3\.\d+"', workflow)
    # A wheel picked by a glob may be one built for another Python (a cp311
    # wheel in a 3.12 job): the step builds dlpack-ref for the job's own.
    assert ".whl" not in workflow
    [install] = [line.strip() for line in workflow.splitlines() if line.strip().startswith("run: python -m pip install")]
    assert install == "run: python -m pip install . ./ci/dlpack-ref"


def test_the_sidebar_keeps_inline_code_whole():
    css = (DOCS / "_static" / "dlpack-ref.css").read_text()
    [rule] = re.findall(r"\.bd-sidebar-primary code,\s*\.bd-sidebar-primary code \.pre \{(.*?)\}", css, re.S)
    assert "white-space: nowrap" in rule
    assert "anywhere" not in rule and "break-all" not in rule
