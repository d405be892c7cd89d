"""include/dlpack_ref.h, the vendorable protocol in C, compiles on its own as
C99 and as C++17 with every warning an error, from nothing but the files a
vendoring library copies (dlpack.h, dlpack_ref.h, dlpack_ref_tables.h) and
Python.h; and the core and the shipped copy are that very header."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import dlpack_ref

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ("dlpack.h", "dlpack_ref.h", "dlpack_ref_tables.h")

# Every function of the header referenced, so that an unused-function or
# a C++-only error in any of them cannot hide behind `static inline`.
PROBE = r"""
#include <Python.h>
#include "dlpack_ref.h"

typedef void (*any_fn)(void);
any_fn dlref_probe_table[] = {
    (any_fn)dlpack_ref_storage_bits, (any_fn)dlpack_ref_nbytes, (any_fn)dlpack_ref_element_count,
    (any_fn)dlpack_ref_span, (any_fn)dlpack_check_ndim, (any_fn)dlpack_check_dtype,
    (any_fn)dlpack_check_device, (any_fn)dlpack_check_shape, (any_fn)dlpack_check_strides,
    (any_fn)dlpack_check_extents, (any_fn)dlpack_check_span, (any_fn)dlpack_check_data,
    (any_fn)dlpack_check_byte_offset, (any_fn)dlpack_check_tensor, (any_fn)dlpack_check_version,
    (any_fn)dlpack_check_managed, (any_fn)dlpack_ref_api_release_block,
    (any_fn)dlpack_ref_api_delete_versioned, (any_fn)dlpack_ref_api_delete_legacy,
    (any_fn)dlpack_ref_api_destroy_versioned, (any_fn)dlpack_ref_api_destroy_legacy,
    (any_fn)dlpack_ref_api_versioned_block, (any_fn)dlpack_ref_api_new_versioned,
    (any_fn)dlpack_ref_api_new_legacy, (any_fn)dlpack_ref_export_versioned, (any_fn)dlpack_ref_export_legacy,
    (any_fn)dlpack_ref_release, (any_fn)dlpack_ref_adopt, (any_fn)dlpack_ref_claim, (any_fn)dlpack_ref_take,
    (any_fn)dlpack_ref_exchange_api, (any_fn)dlpack_ref_exchange_api_ref, (any_fn)dlpack_ref_exchange_api_memo,
    (any_fn)dlpack_ref_exchange_api_memo_ref, (any_fn)dlpack_ref_import, (any_fn)dlpack_ref_to_array,
    (any_fn)dlpack_ref_view, (any_fn)dlpack_ref_export_versioned_released, (any_fn)dlpack_ref_export_legacy_released,
    (any_fn)dlpack_ref_export_plan_capsule_released, (any_fn)dlpack_ref_dlpack_args, (any_fn)dlpack_ref_dlpack_device,
    (any_fn)dlpack_ref_stream_none, (any_fn)dlpack_ref_stream_parse, (any_fn)dlpack_ref_stream_converter,
};
"""


@pytest.fixture(scope="module")
def vendored(tmp_path_factory):
    """A folder holding only the vendored files, as an adopter's tree would."""
    folder = tmp_path_factory.mktemp("vendored")
    for name in VENDORED:
        shutil.copy(Path(dlpack_ref.get_include(), name), folder / name)
    return folder


@pytest.mark.parametrize("compiler, std, suffix", [("gcc", "-std=c99", ".c"), ("g++", "-std=c++17", ".cpp")])
def test_the_header_compiles_alone_with_every_warning_an_error(tmp_path, vendored, compiler, std, suffix):
    if shutil.which(compiler) is None:
        pytest.skip(f"no {compiler}")
    source = tmp_path / ("probe" + suffix)
    # C++ forbids casting function pointers to void(*)(void) only with
    # -Wcast-function-type, which is in -Wextra: a reinterpret is the point.
    source.write_text(PROBE)
    # Python.h comes in as a system header: its own pedantic warnings (which
    # vary by CPython version) are not this header's.
    cmd = [compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wno-cast-function-type",
           "-isystem", sysconfig.get_paths()["include"], f"-I{vendored}", "-c", str(source),
           "-o", str(tmp_path / "probe.o")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


def test_the_header_compiles_where_c_library_headers_come_before_python_h(tmp_path, vendored):
    # A library may include <math.h> and <string.h> before Python.h (numkong
    # does) and build as strict C11: the C library is then read without the
    # POSIX names Python.h would have asked for, such as SSIZE_MAX.
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    (tmp_path / "probe.c").write_text("#include <math.h>\n#include <string.h>\n" + PROBE)
    out = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-isystem", sysconfig.get_paths()["include"],
                          f"-I{vendored}", "-c", str(tmp_path / "probe.c"), "-o", str(tmp_path / "probe.o")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


def test_the_header_needs_nothing_but_the_vendored_files(tmp_path, vendored):
    # Without the generated tables beside it the header does not compile:
    # the three files are the whole set, and the tables one of them.
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("dlpack.h", "dlpack_ref.h"):
        shutil.copy(vendored / name, partial / name)
    (tmp_path / "probe.c").write_text(PROBE)
    out = subprocess.run(["gcc", "-std=c99", "-isystem", sysconfig.get_paths()["include"], f"-I{partial}",
                          "-c", str(tmp_path / "probe.c"), "-o", str(tmp_path / "probe.o")],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "dlpack_ref_tables.h" in out.stderr


def _header_functions(text: str) -> set[str]:
    """The names of the header's functions (every one is static inline)."""
    return set(re.findall(r"static inline [^;{()]*?\b(\w+)\s*\(", text))


def _header_structs(text: str) -> dict[str, list[str]]:
    """Each `typedef struct ... name;` of the header: its field names."""
    structs = {}
    for m in re.finditer(r"typedef struct \w+ \{(.*?)\} (\w+);", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
        fields = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            pointer = re.search(r"\(\*\s*(\w+)\)", decl)
            fields.append(pointer.group(1) if pointer else re.findall(r"\w+", decl)[-1])
        structs[m.group(2)] = fields
    return structs


def _pxd_declarations(pxd: str) -> tuple[list[str], dict[str, list[str]]]:
    """The functions of the pxd's `cdef extern from` blocks (the Cython
    names, each with the C name it stands for) and its structs' fields
    (None for an opaque `pass` struct)."""
    functions = []
    for m in re.finditer(r'^    (?!ctypedef|#)[^\n(]*?\b(\w+)(?:\s+"(\w+)")?\(', pxd, re.M):
        functions.append((m.group(1), m.group(2) or m.group(1)))
    structs = {}
    for m in re.finditer(r"^    ctypedef struct (\w+):\n((?:        .*\n|\n)+)", pxd, re.M):
        fields = []
        for line in m.group(2).splitlines():
            if line.startswith(" " * 9):
                continue   # a declaration's continuation
            line = line.split("#")[0].strip()
            if not line or line == "pass":
                continue
            pointer = re.search(r"\(\*\s*(\w+)\)", line)
            fields.append(pointer.group(1) if pointer else re.findall(r"\w+", line)[-1])
        structs[m.group(1)] = fields or None
    return functions, structs


def _compile_pxd_probe(pxd_text: str, build: Path) -> subprocess.CompletedProcess:
    """Compile a module that takes the address of every function and struct
    field the pxd declares into a variable of the type Cython gives it
    (inferred from the declaration): the C compiler then holds each Cython
    declaration to the header's own, and any signature or field type that
    differs is an incompatible-pointer error."""
    pytest.importorskip("Cython")
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    functions, structs = _pxd_declarations(pxd_text)
    body = [f"    cdef {name} s_{name}" for name, fields in structs.items() if fields]
    body += [f"    f_{i} = {name}" for i, (name, _) in enumerate(functions)]
    body += [f"    p_{name}_{field} = &s_{name}.{field}" for name, fields in structs.items() for field in fields or ()]
    (build / "pxd").mkdir()
    shutil.copy(ROOT / "src" / "dlpack.pxd", build / "pxd" / "dlpack.pxd")
    (build / "pxd" / "dlpack_ref_api.pxd").write_text(pxd_text)
    (build / "probe.pyx").write_text("# cython: language_level=3, infer_types=True\n"
                                     "from dlpack cimport *\nfrom dlpack_ref_api cimport *\n\n"
                                     "cdef void _probe() noexcept:\n" + "\n".join(body) + "\n")
    out = subprocess.run([sys.executable, "-m", "cython", "-3", f"-I{build / 'pxd'}", str(build / "probe.pyx"),
                          "-o", str(build / "probe.c")], capture_output=True, text=True)
    if out.returncode != 0:
        return out
    return subprocess.run(["gcc", "-c", "-fPIC", "-Werror=incompatible-pointer-types", "-Werror=int-conversion",
                           "-isystem", sysconfig.get_paths()["include"], f"-I{ROOT / 'include'}",
                           f"-I{dlpack_ref.get_include()}", str(build / "probe.c"), "-o", str(build / "probe.o")],
                          capture_output=True, text=True)


def test_the_header_lists_its_parts_and_each_part_opens_with_its_concept():
    header = (ROOT / "include" / "dlpack_ref.h").read_text()
    listed = re.findall(r"^ \*   (\w+)\.h: ", header, re.M)
    parts = sorted(p.stem for p in (ROOT / "include" / "dlpack_ref").glob("*.h") if p.stem != "prologue")
    assert sorted(listed) == parts
    for part in parts:
        first = (ROOT / "include" / "dlpack_ref" / f"{part}.h").read_text().splitlines()[0]
        assert first.startswith("/* --- "), f"{part}.h opens with no concept banner: {first!r}"


def test_the_cython_api_declares_the_header_and_writes_no_rule_of_its_own():
    pxd = (ROOT / "src" / "dlpack_ref_api.pxd").read_text()
    # No Cython function bodies and no verbatim C: declarations only.
    assert "cdef inline" not in pxd and '"""' not in pxd, "dlpack_ref_api.pxd writes code; put it in dlpack_ref.h"
    assert 'cdef extern from "dlpack_ref.h"' in pxd


def test_the_cython_api_declares_every_function_and_struct_of_the_header():
    header = (ROOT / "include" / "dlpack_ref.h").read_text()
    tables = Path(dlpack_ref.get_include(), "dlpack_ref_tables.h").read_text()
    functions, structs = _pxd_declarations((ROOT / "src" / "dlpack_ref_api.pxd").read_text())
    declared = {c_name for _, c_name in functions}
    public = {name for name in _header_functions(header) if "priv" not in name}
    python_api = {"PyErr_Occurred", "PyErr_Clear"}   # declared under other names, for the hot paths
    assert public - declared == set(), "functions of dlpack_ref.h missing from dlpack_ref_api.pxd"
    assert declared - public - _header_functions(tables) - python_api == set(), "declared, but not in the headers"
    header_structs = _header_structs(header)
    for name, fields in structs.items():
        assert name in header_structs, name
        assert fields is None or fields == header_structs[name], name
    assert {name for name in header_structs if "priv" not in name} == set(structs)


def test_every_declaration_of_the_cython_api_has_the_header_s_c_type(tmp_path):
    out = _compile_pxd_probe((ROOT / "src" / "dlpack_ref_api.pxd").read_text(), tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]


def test_a_declaration_that_differs_from_the_header_fails_the_check(tmp_path):
    pxd = (ROOT / "src" / "dlpack_ref_api.pxd").read_text()
    for i, (old, new) in enumerate([("int dlpack_check_ndim(int32_t ndim)", "int dlpack_check_ndim(int64_t ndim)"),
                                    ("void* dlpack_ref_claim(object capsule, bint* versioned)",
                                     "void* dlpack_ref_claim(object capsule, int64_t* versioned)"),
                                    ("        uint64_t flags              #", "        uint32_t flags              #")]):
        assert old in pxd
        (tmp_path / str(i)).mkdir()
        out = _compile_pxd_probe(pxd.replace(old, new, 1), tmp_path / str(i))
        assert out.returncode != 0 and "incompatible pointer type" in out.stderr, (new, out.stderr[-2000:])


STREAM_PROBE = r"""
#include <Python.h>
#include "dlpack_ref.h"

/* stream_value(stream, cuda_memory, owner): the header's stream rule. */
static PyObject* stream_value(PyObject* self, PyObject* args) {
    PyObject *stream, *owner;
    int cuda;
    int64_t out;
    DLDevice cpu = {kDLCPU, 0};
    (void)self;
    if (!PyArg_ParseTuple(args, "OpO", &stream, &cuda, &owner)) return NULL;
    if (dlpack_ref_stream_value(stream, cuda, cpu, owner, &out) < 0) return NULL;
    return PyLong_FromLongLong((long long)out);
}

static PyMethodDef methods[] = {{"stream_value", stream_value, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
"""


class _Proto:
    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


STREAMS = [None, 1, 2, 3, 2**40, 2**64 - 1, -1, 0, -2, -(2**70), True, False, 1.0, "1", object(),
           _Proto((0, 0)), _Proto((0, 7)), _Proto((1, 7)), _Proto((0, -1)), _Proto((0, True)), _Proto([0, 7])]


# The stream rule's answers, written out: a value, or the exception's type
# and a word of its message (CUDA-family memory; CPU memory takes None only).
STREAM_ANSWERS = [
    (None, 1), (1, 1), (2, 2), (3, 3), (2**40, 2**40), (2**64 - 2, 2**64 - 2), (-1, -1),
    (2**64 - 1, (ValueError, "below 2**64 - 1")), (2**70, (ValueError, "below 2**64 - 1")),
    (0, (ValueError, "ambiguous")), (-2, (ValueError, "is not valid")), (-(2**70), (ValueError, "is not valid")),
    (True, (TypeError, "not bool")), (False, (TypeError, "not bool")), (1.0, (TypeError, "not float")),
    ("1", (TypeError, "not str")), (object(), (TypeError, "not object")),
    (_Proto((0, 0)), 1), (_Proto((0, 7)), 7), (_Proto((1, 7)), (ValueError, "protocol version 0")),
    (_Proto((0, -1)), (ValueError, "from 0 to 2**64 - 2")), (_Proto((0, True)), (ValueError, "from 0 to 2**64 - 2")),
    (_Proto((0, 2**64 - 1)), (ValueError, "from 0 to 2**64 - 2")), (_Proto((0, 2**64 - 2)), 2**64 - 2),
    (_Proto([0, 7]), (ValueError, "expected (0, handle)")),
]


def _stream_outcome(fn, expected):
    try:
        return fn()
    except Exception as e:  # the answer compared is the exception
        return (type(e), expected[1] if isinstance(expected, tuple) and expected[1] in str(e) else str(e))


def test_the_stream_rule_of_the_header_answers_as_written(tmp_path, vendored):
    """The header's rule, through a vendoring extension and through the
    core's binding of it (what dlpack_ref.cuda.stream checks its value
    with): the same value, or the same exception type and message."""
    from dlpack_ref._dlpack_ref import _stream_fields

    def stream_handle(stream):   # the header's int, from the fields cuda.stream keeps
        sync, handle = _stream_fields(stream)
        return handle if sync else -1
    from support.build_ext import load_c_probe

    probe = load_c_probe("stream_probe", STREAM_PROBE, tmp_path, c_include=[vendored])
    owner = dlpack_ref.zeros(1)
    for stream, expected in STREAM_ANSWERS:
        header = _stream_outcome(lambda: probe.stream_value(stream, True, owner), expected)
        if isinstance(header, int) and header < -1:
            header += 2**64   # the header keeps a handle's 64 bits in an int64
        assert header == expected, (stream, header)
        assert _stream_outcome(lambda: stream_handle(stream), expected) == expected, stream
        # CPU memory: None only; an int or a stream object is a ValueError naming the array.
        cpu = _stream_outcome(lambda: probe.stream_value(stream, False, owner), None)
        if stream is None:
            assert cpu == 1
        elif isinstance(stream, int) or hasattr(stream, "__cuda_stream__"):
            assert cpu[0] is ValueError and "passed to Array.__dlpack__ for memory on cpu:0; only stream=None" in cpu[1], (stream, cpu)
        else:
            assert cpu[0] is TypeError and "stream must be None for CPU memory" in cpu[1], (stream, cpu)
