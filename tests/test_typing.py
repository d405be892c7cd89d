"""The typed public surface: py.typed and the .pyi stubs let a user script
type-check with mypy and pyright, with real types (no Any) for the dtypes,
from_dlpack and Array.shape; the stub's dtype names are the dtype table's."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack_ref

HERE = Path(__file__).parent
SCRIPT = HERE / "typing" / "user_script.py"
PACKAGE = Path(dlpack_ref.__file__).parent

# What reveal_type must print, per checker, for the three revealed names.
EXPECTED = {
    "dr.float32": "DType",
    "dr.from_dlpack": "Array",
    "a.shape": "tuple[int, ...]",
}


def test_package_ships_py_typed_and_stubs():
    for name in ("py.typed", "__init__.pyi", "_dlpack_ref.pyi"):
        assert (PACKAGE / name).is_file(), name


def test_stub_names_every_dtype_and_nothing_else():
    tree = ast.parse((PACKAGE / "__init__.pyi").read_text())
    declared = {node.target.id for node in tree.body
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and "DType" in ast.unparse(node.annotation)}
    assert declared == set(dlpack_ref.DTYPES)
    for name in dlpack_ref.DTYPES:
        assert getattr(dlpack_ref, name) is dlpack_ref.DTYPES[name]


def test_stubs_declare_what_the_core_exports():
    tree = ast.parse((PACKAGE / "_dlpack_ref.pyi").read_text())
    declared = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    declared |= {node.target.id for node in tree.body if isinstance(node, ast.AnnAssign)}
    public = {name for name in dir(dlpack_ref._dlpack_ref) if not name.startswith("_")}
    assert public <= declared | {"Array"}, sorted(public - declared)
    array_members = {n for n in dir(dlpack_ref.Array) if not n.startswith("_")}
    stub_array = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Array")
    stub_members = {n.name for n in stub_array.body if isinstance(n, ast.FunctionDef)}
    assert array_members <= stub_members, sorted(array_members - stub_members)


def _revealed(output: str) -> dict[str, str]:
    lines = [line for line in output.splitlines() if "evealed type" in line or "Type of" in line]
    assert len(lines) == len(EXPECTED), output
    return dict(zip(EXPECTED, lines))


def test_mypy_strict_passes_with_real_types():
    pytest.importorskip("mypy")
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SCRIPT)],
                         capture_output=True, text=True, cwd=HERE)
    assert run.returncode == 0, run.stdout + run.stderr
    for expr, line in _revealed(run.stdout).items():
        assert EXPECTED[expr] in line and "Any" not in line.split("->")[-1], line
    assert "Revealed type is \"Any\"" not in run.stdout


def test_pyright_passes_with_real_types():
    exe = shutil.which("pyright") or str(Path(sys.executable).with_name("pyright"))
    if not os.path.exists(exe):
        pytest.skip("pyright is not installed")
    try:
        run = subprocess.run([exe, "--pythonpath", sys.executable, str(SCRIPT)], capture_output=True,
                             text=True, cwd=HERE, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.skip("pyright did not start in time (it fetches its engine on first use)")
    if run.returncode != 0 and "error" not in run.stdout:
        pytest.skip(f"pyright could not run here: {(run.stdout + run.stderr)[-300:]}")
    assert re.search(r"\b0 errors\b", run.stdout), run.stdout
    for expr, line in _revealed(run.stdout).items():
        assert EXPECTED[expr] in line and "Any" not in line.split("->")[-1], line
