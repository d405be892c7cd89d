"""Build an example adopter (python/dlpack_ref/adopters/, installed as
dlpack_ref/adopters/) the way docs/vendoring.md tells a user to: its
"# build: set-up" block and the adopter's own "# build: <name>" block, run as
printed with bash in a fresh folder, with this interpreter as `python3` and
the installed package's `dlpack-ref-config`. So the sources compiled are the
installed ones, the headers those of dlpack_ref.get_include(), and a recipe
that no longer works as printed fails the tests that build with it. The
check module the tests run the conformance checker on is the page's too.

No pytest here: benchmarks/callgrind_adopter.py builds with it too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "vendoring.md"
ADOPTERS = ("c_adopter", "cpp_adopter", "cython_adopter", "pybind11_adopter", "nanobind_adopter")


def recipe(name: str) -> str:
    """The bash script docs/vendoring.md gives for building adopter `name`:
    its set-up block, then the adopter's block (each a fenced block whose
    first line is ``# build: <what>``)."""
    blocks = dict(re.findall(r"^```bash\n# build: (\S+)\n(.*?)^```", DOCS.read_text(), re.M | re.S))
    return blocks["set-up"] + blocks[name]


def check_module(name: str) -> str:
    """The check module docs/vendoring.md has a user write beside the C
    example (``c_adopter_check.py``, whose ``__dlpack_conformance__`` calls
    the shipped hook), for adopter `name` instead."""
    text = re.search(r"^```python\n# c_adopter_check\.py\n(.*?)^```", DOCS.read_text(), re.M | re.S).group(1)
    return text.replace("c_adopter", name)


def _tools(folder: Path) -> Path:
    """A folder to put first on PATH: `python3` runs this interpreter (a
    script, not a link: a link outside a virtual environment's folder runs
    the interpreter it was made from, without the environment), and
    `dlpack-ref-config` is its installed script or, where the install made
    none, the same tool through `-m`."""
    tools = folder / ".tools"
    tools.mkdir(exist_ok=True)
    commands = {"python3": f'exec "{sys.executable}" "$@"'}
    if not Path(sysconfig.get_path("scripts"), "dlpack-ref-config").exists():
        commands["dlpack-ref-config"] = f'exec "{sys.executable}" -m dlpack_ref._configtool "$@"'
    for command, line in commands.items():
        (tools / command).write_text(f"#!/bin/sh\n{line}\n")
        (tools / command).chmod(0o755)
    return tools


def build_adopter(name: str, folder: Path, cflags: str = "", cxxflags: str = "", ldflags: str = "",
                  ) -> subprocess.CompletedProcess:
    """Run the recipe of adopter `name` in `folder` (which then holds the
    built module), with CFLAGS, CXXFLAGS and LDFLAGS set as given (the
    recipe passes them on, as a user's would be); the finished process, to
    be checked by the caller."""
    path = os.pathsep.join([str(_tools(folder)), sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "CFLAGS": cflags, "CXXFLAGS": cxxflags, "LDFLAGS": ldflags}
    return subprocess.run(["bash", "-e", "-c", recipe(name)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900)


def built_module(name: str, folder: Path) -> Path:
    """The extension module the recipe of `name` built in `folder`."""
    return folder / (name + sysconfig.get_config_var("EXT_SUFFIX"))
