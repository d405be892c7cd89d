"""The checkout whose pages and result files are read (this one, or a
test's folder), and a result file as a Source: its path, its data and the
command that remakes it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from figures import libraries, rules

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = "benchmarks/results"


def _check_command(names: list[str], into: str) -> str:
    """The ``dlpack-ref check`` that writes ``into``: of ``names`` (every installed known library when empty)."""
    return " ".join(["python -m dlpack_ref check", *(f"--library {n}" for n in names), f"--format json > {into}"])


# Environment 2 checks dlpack-ref and NumPy beside the ecosystem lane's libraries
_ECOSYSTEM_2 = ["dlpack_ref", "numpy", *libraries.names("ecosystem")]

# The files a block may cite, each with the command that remakes it (run from
# the repository's root) and what that command needs.
FILES = {
    f"{RESULTS}/exchange.json": (
        (f"dlpack-ref bench --instructions --format markdown --json {RESULTS}/exchange.json "
         f"--plot {RESULTS}/exchange.png"),
        ("the libraries to compare installed; valgrind and an interpreter with its symbols for the counts; "
         "matplotlib for the chart")),
    f"{RESULTS}/copies.json": ("python benchmarks/bench_copies.py", "NumPy, PyTorch, ml_dtypes; matplotlib for the chart"),
    f"{RESULTS}/copies_instructions.json": ("python benchmarks/bench_copies.py --instructions-only",
                                            "NumPy; valgrind and an interpreter with its symbols"),
    f"{RESULTS}/pool_threshold.json": ("python benchmarks/pool_threshold.py", "NumPy; 2 cores or more"),
    f"{RESULTS}/adoption_producer.json": ("python benchmarks/adoption_producer.py",
                                          "the two numkong builds of adoption/run.sh numkong; valgrind for the counts"),
    f"{RESULTS}/adoption_mpi4py.json": ("python benchmarks/adoption_mpi4py.py",
                                        "the two mpi4py builds of adoption/run.sh mpi4py; PyTorch; valgrind for "
                                        "the counts"),
    f"{RESULTS}/callgrind_adopter.json": ("python benchmarks/callgrind_adopter.py",
                                          "valgrind, a C and C++ compiler, Cython, pybind11, nanobind, CMake, NumPy"),
    f"{RESULTS}/reproduction_sizes.json": ("python benchmarks/reproduction_sizes.py", "NumPy"),
    f"{RESULTS}/ecosystem_1.json": (
        _check_command([], f"{RESULTS}/ecosystem_1.json"),
        "the main lane's libraries: " + ", ".join(
            d["distribution"] for d in libraries.known() if d["lane"] == "main" and d["name"] != "dlpack_ref")),
    f"{RESULTS}/ecosystem_2.json": (
        _check_command(_ECOSYSTEM_2, f"{RESULTS}/ecosystem_2.json"),
        "a second environment, the ecosystem lane's: " + " ".join(
            r for d in libraries.known() if d["lane"] == "ecosystem" for r in d["requirements"])),
}


class NoData(Exception):
    """A block's file lacks what the block shows (the message says what)."""


@dataclasses.dataclass
class Source:
    path: str
    data: dict | None

    @property
    def command(self) -> str:
        return FILES[self.path][0]

    def need(self) -> dict:
        if self.data is None:
            raise NoData(f"`{self.path}` is not committed")
        return self.data


def kind(path: str) -> str:
    stem = Path(path).stem
    return "ecosystem" if stem.startswith("ecosystem") else stem


_cache: dict[str, Source] = {}


def use_root(root: Path) -> None:
    """Read the pages and the result files of another checkout (the tests' folders)."""
    global ROOT, DOCS
    ROOT, DOCS = Path(root).resolve(), Path(root).resolve() / "docs"
    _cache.clear()


def source(path: str) -> Source:
    """A result file of FILES, the known libraries' files (libraries.FOLDER) as their declarations, or the
    rules' chapters (rules.FOLDER) as theirs."""
    if path not in _cache:
        f = ROOT / path
        if path == libraries.FOLDER:
            _cache[path] = Source(path, {"libraries": libraries.known(ROOT)})
        elif path == rules.FOLDER:
            _cache[path] = Source(path, {"rules": rules.declared(ROOT)})
        else:
            _cache[path] = Source(path, json.loads(f.read_text(encoding="utf-8")) if f.exists() else None)
    return _cache[path]


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))
