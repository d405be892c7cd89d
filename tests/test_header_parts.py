"""The vendorable headers are generated from their parts, as SQLite's
amalgamation: include/dlpack_ref/*.h holds one concept a file, and
dlpack_ref.h (every part), dlpack_ref_consumer.h and dlpack_ref_producer.h
(one side and the parts it calls) are exactly what tools/gen_header.py makes
of them, in the repository, in the build and in the installed package. Each
side compiles alone, and both together, as C99 and C++17 with every warning
an error."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

import dlpack_ref

ROOT = Path(__file__).resolve().parents[1]
HEADERS = ("dlpack_ref.h", "dlpack_ref_consumer.h", "dlpack_ref_producer.h")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_header", ROOT / "tools" / "gen_header.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _functions(text: str) -> list[str]:
    return re.findall(r"^static inline [^;{()]*?\b(\w+)\s*\(", text, re.M)


@pytest.mark.parametrize("header", HEADERS)
def test_the_committed_header_is_exactly_the_concatenation_of_its_parts(header):
    generated = _generator().generate()[header]
    assert (ROOT / "include" / header).read_text() == generated, (
        f"include/{header} is not what its parts make: run python tools/gen_header.py include")


@pytest.mark.parametrize("header", HEADERS)
def test_the_installed_package_ships_the_generated_header(header):
    shipped = Path(dlpack_ref.get_include(), header)
    assert shipped.read_text() == (ROOT / "include" / header).read_text()


def test_every_part_is_in_the_full_header_once_in_order():
    full = (ROOT / "include" / "dlpack_ref.h").read_text()
    gen = _generator()
    marks = re.findall(r"^#ifndef DLPACK_REF_PART_(\w+)$", full, re.M)
    assert marks == [name.upper() for name, _ in gen.PARTS]
    on_disk = {p.stem for p in (ROOT / "include" / "dlpack_ref").glob("*.h")} - {"prologue"}
    assert on_disk == {name for name, _ in gen.PARTS}, "a part file the generator does not list, or the reverse"


def test_a_part_that_uses_a_later_part_is_refused(tmp_path, monkeypatch):
    gen = _generator()
    texts = gen.read_parts()
    texts["checks"] += "\nstatic inline int dlref_uses_later(void) { return dlpack_ref_take(NULL, NULL); }\n"
    with pytest.raises(SystemExit, match="checks.h uses names of a later part"):
        gen.dependencies(texts)


def test_each_side_holds_its_own_calls_and_not_the_other_side_s():
    consumer = set(_functions((ROOT / "include" / "dlpack_ref_consumer.h").read_text()))
    producer = set(_functions((ROOT / "include" / "dlpack_ref_producer.h").read_text()))
    full = set(_functions((ROOT / "include" / "dlpack_ref.h").read_text()))
    assert {"dlpack_ref_import", "dlpack_ref_consumer_take", "dlpack_ref_take", "dlpack_check_tensor"} <= consumer
    assert {"dlpack_ref_producer_dlpack", "dlpack_ref_dlpack_device", "dlpack_ref_export_versioned"} <= producer
    assert "dlpack_ref_producer_dlpack" not in consumer and "dlpack_ref_take" not in producer
    assert consumer | producer < full
    assert len(consumer) < len(full) and len(producer) < len(full)


def _probe(headers: tuple[str, ...]) -> str:
    functions: list[str] = []
    for header in headers:
        functions += [f for f in _functions((ROOT / "include" / header).read_text()) if f not in functions and "priv" not in f]
    includes = "".join(f'#include "{h}"\n' for h in headers)
    table = ",\n    ".join(f"(any_fn){f}" for f in functions)
    return f"#include <Python.h>\n{includes}\ntypedef void (*any_fn)(void);\nany_fn dlref_probe_table[] = {{\n    {table}\n}};\n"


@pytest.mark.parametrize("headers", [("dlpack_ref_consumer.h",), ("dlpack_ref_producer.h",),
                                     ("dlpack_ref_consumer.h", "dlpack_ref_producer.h"),
                                     ("dlpack_ref_producer.h", "dlpack_ref.h")])
@pytest.mark.parametrize("compiler, std, suffix", [("gcc", "-std=c99", ".c"), ("g++", "-std=c++17", ".cpp")])
def test_a_side_compiles_alone_and_beside_the_other(tmp_path, headers, compiler, std, suffix):
    _compile_probe(tmp_path, headers, compiler, std, suffix)


def _compile_probe(tmp_path, headers, compiler, std, suffix, defines=()):
    """The probe of `headers`, vendored alone, compiled with every warning an error."""
    if shutil.which(compiler) is None:
        pytest.skip(f"no {compiler}")
    vendored = tmp_path / "vendored"
    vendored.mkdir()
    for name in ("dlpack.h", "dlpack_ref_tables.h", *headers):
        shutil.copy(Path(dlpack_ref.get_include(), name), vendored / name)
    source = tmp_path / ("probe" + suffix)
    source.write_text(_probe(headers))
    out = subprocess.run([compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wno-cast-function-type",
                          *defines, "-isystem", sysconfig.get_paths()["include"], f"-I{vendored}", "-c",
                          str(source), "-o", str(tmp_path / "probe.o")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


@pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")) or bool(sysconfig.get_config_var("Py_TRACE_REFS")),
                    reason="CPython's Python.h refuses the limited API on a free-threaded or Py_TRACE_REFS build")
@pytest.mark.parametrize("limited_api", ["0x030B0000", "0x030C0000"])
@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("compiler, std, suffix", [("gcc", "-std=c99", ".c"), ("g++", "-std=c++17", ".cpp")])
def test_each_header_compiles_under_the_limited_api(tmp_path, header, limited_api, compiler, std, suffix):
    """abi3 adopters define Py_LIMITED_API (3.11's stable ABI and 3.12's,
    where vectorcall joins it): every call the header makes must be there."""
    _compile_probe(tmp_path, (header,), compiler, std, suffix, [f"-DPy_LIMITED_API={limited_api}"])
