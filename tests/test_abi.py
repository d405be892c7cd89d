"""ABI checks for include/dlpack.h against the upstream DLPack header.

A probe program is generated from the single table below (NAMES), compiled
with the system C and C++ compilers against our header and against each
upstream dlpack.h shipped inside an installed wheel, and run.  It prints the
size and alignment of every type, the offset, size and (in C++) the exact type
of every struct field, every enumerator and every macro.  The outputs must be
identical.  Our header tracks upstream's main branch, which has added the
enumerators of AFTER_1_3 since the 1.3 release; a header of that release
(what the wheels ship until they update) is compared on the names it has.  The probe also asserts at compile time that every field and every
function-pointer typedef has the type the table gives it, so a missing or
mistyped name fails compilation.
"""

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------
# The table: every name in the DLPack 1.3 header, with its expected type or
# value.  Struct fields are listed in declaration order.
# ---------------------------------------------------------------------------
NAMES = {
    "structs": {
        "DLPackVersion": [
            ("major", "uint32_t"),
            ("minor", "uint32_t"),
        ],
        "DLDevice": [
            ("device_type", "DLDeviceType"),
            ("device_id", "int32_t"),
        ],
        "DLDataType": [
            ("code", "uint8_t"),
            ("bits", "uint8_t"),
            ("lanes", "uint16_t"),
        ],
        "DLTensor": [
            ("data", "void*"),
            ("device", "DLDevice"),
            ("ndim", "int32_t"),
            ("dtype", "DLDataType"),
            ("shape", "int64_t*"),
            ("strides", "int64_t*"),
            ("byte_offset", "uint64_t"),
        ],
        "DLManagedTensor": [
            ("dl_tensor", "DLTensor"),
            ("manager_ctx", "void*"),
            ("deleter", "void (*)(DLManagedTensor*)"),
        ],
        "DLManagedTensorVersioned": [
            ("version", "DLPackVersion"),
            ("manager_ctx", "void*"),
            ("deleter", "void (*)(DLManagedTensorVersioned*)"),
            ("flags", "uint64_t"),
            ("dl_tensor", "DLTensor"),
        ],
        "DLPackExchangeAPIHeader": [
            ("version", "DLPackVersion"),
            ("prev_api", "DLPackExchangeAPIHeader*"),
        ],
        "DLPackExchangeAPI": [
            ("header", "DLPackExchangeAPIHeader"),
            ("managed_tensor_allocator", "DLPackManagedTensorAllocator"),
            ("managed_tensor_from_py_object_no_sync",
             "DLPackManagedTensorFromPyObjectNoSync"),
            ("managed_tensor_to_py_object_no_sync",
             "DLPackManagedTensorToPyObjectNoSync"),
            ("dltensor_from_py_object_no_sync",
             "DLPackDLTensorFromPyObjectNoSync"),
            ("current_work_stream", "DLPackCurrentWorkStream"),
        ],
    },
    "enums": {
        "DLDeviceType": {
            "kDLCPU": 1, "kDLCUDA": 2, "kDLCUDAHost": 3, "kDLOpenCL": 4,
            "kDLVulkan": 7, "kDLMetal": 8, "kDLVPI": 9, "kDLROCM": 10,
            "kDLROCMHost": 11, "kDLExtDev": 12, "kDLCUDAManaged": 13,
            "kDLOneAPI": 14, "kDLWebGPU": 15, "kDLHexagon": 16,
            "kDLMAIA": 17, "kDLTrn": 18, "kDLTPU": 19, "kDLTPUHost": 20,
            "kDLAscend": 21,
        },
        "DLDataTypeCode": {
            "kDLInt": 0, "kDLUInt": 1, "kDLFloat": 2, "kDLOpaqueHandle": 3,
            "kDLBfloat": 4, "kDLComplex": 5, "kDLBool": 6,
            "kDLFloat8_e3m4": 7, "kDLFloat8_e4m3": 8,
            "kDLFloat8_e4m3b11fnuz": 9, "kDLFloat8_e4m3fn": 10,
            "kDLFloat8_e4m3fnuz": 11, "kDLFloat8_e5m2": 12,
            "kDLFloat8_e5m2fnuz": 13, "kDLFloat8_e8m0fnu": 14,
            "kDLFloat6_e2m3fn": 15, "kDLFloat6_e3m2fn": 16,
            "kDLFloat4_e2m1fn": 17, "kDLBcomplex": 18,
        },
    },
    # typedef name -> the function-pointer type it must be
    "function_types": {
        "DLPackManagedTensorAllocator":
            "int (*)(DLTensor*, DLManagedTensorVersioned**, void*,"
            " void (*)(void*, const char*, const char*))",
        "DLPackManagedTensorFromPyObjectNoSync":
            "int (*)(void*, DLManagedTensorVersioned**)",
        "DLPackDLTensorFromPyObjectNoSync":
            "int (*)(void*, DLTensor*)",
        "DLPackCurrentWorkStream":
            "int (*)(DLDeviceType, int32_t, void**)",
        "DLPackManagedTensorToPyObjectNoSync":
            "int (*)(DLManagedTensorVersioned*, void**)",
    },
    # macros with a numeric value
    "value_macros": {
        "DLPACK_MAJOR_VERSION": 1,
        "DLPACK_MINOR_VERSION": 3,
        "DLPACK_FLAG_BITMASK_READ_ONLY": 1 << 0,
        "DLPACK_FLAG_BITMASK_IS_COPIED": 1 << 1,
        "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED": 1 << 2,
    },
    # macros without a numeric value: compared by their expansion
    "other_macros": ["DLPACK_DLPACK_H_", "DLPACK_EXTERN_C", "DLPACK_DLL"],
}

ALL_TYPES = (
    list(NAMES["structs"]) + list(NAMES["enums"]) + list(NAMES["function_types"])
)
ALL_ENUMERATORS = {
    name: value for members in NAMES["enums"].values()
    for name, value in members.items()
}
ALL_MACROS = set(NAMES["value_macros"]) | set(NAMES["other_macros"])
# Enumerators upstream's main branch has added since the 1.3 release (its
# minor still 3): dmlc/dlpack#187 (kDLBcomplex), #188 (kDLTPU, kDLTPUHost),
# #189 (kDLAscend). A header of the release lacks them.
AFTER_1_3 = {"kDLBcomplex", "kDLTPU", "kDLTPUHost", "kDLAscend"}

ROOT_INCLUDE = Path(__file__).resolve().parents[1] / "include"

# (package, path of the header relative to the package directory)
UPSTREAM = {
    "cuda.core": "_include/dlpack.h",
    "tvm_ffi": "include/dlpack/dlpack.h",
}


# ---------------------------------------------------------------------------
# Locating headers and compilers
# ---------------------------------------------------------------------------
def _upstream_header(package):
    try:
        spec = importlib.util.find_spec(package)
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed; no upstream dlpack.h from it")
    rel = UPSTREAM[package]
    for location in spec.submodule_search_locations:
        header = Path(location) / rel
        if header.is_file():
            return header
    pytest.fail(f"{package} is installed but ships no {rel}")


def _installed_header():
    try:
        import dlpack_ref
    except ImportError as exc:
        pytest.skip(f"dlpack_ref is not importable ({exc})")
    header = Path(dlpack_ref.get_include()) / "dlpack.h"
    assert header.is_file(), f"dlpack_ref.get_include() has no dlpack.h: {header}"
    return header


OURS = ["repo", "installed"]


def _header(which):
    if which == "repo":
        return ROOT_INCLUDE / "dlpack.h"
    if which == "installed":
        return _installed_header()
    return _upstream_header(which)


LANGS = {
    # lang: (compiler, file suffix, flags)
    "c": ("cc", ".c", ["-std=c11"]),
    "c++": ("c++", ".cpp", ["-std=c++11"]),
}
WARN_FLAGS = ["-Wall", "-Wextra", "-pedantic", "-Werror"]


def _compile_and_run(source, lang, include_dir, workdir, name="probe"):
    compiler, suffix, std = LANGS[lang]
    exe_compiler = shutil.which(compiler)
    if exe_compiler is None:
        pytest.skip(f"no {compiler} compiler on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / (name + suffix)
    exe = workdir / name
    src.write_text(source)
    cmd = [exe_compiler, *std, *WARN_FLAGS, "-I", str(include_dir), str(src),
           "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, (
        f"compiling the probe failed ({' '.join(cmd)}):\n{proc.stderr}"
    )
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return run.stdout


# ---------------------------------------------------------------------------
# The probe
# ---------------------------------------------------------------------------
PRELUDE = r"""
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include "dlpack.h"

#ifndef DLPACK_DLPACK_H_
#error "include guard DLPACK_DLPACK_H_ is not defined"
#endif

#define PROBE_STR_(x) #x
#define PROBE_STR(x) PROBE_STR_(x)

#ifdef __cplusplus
#include <typeinfo>
#include <type_traits>
#define PROBE_ALIGNOF(T) alignof(T)
#define PROBE_SAME_TYPE(A, B) \
  static_assert(std::is_same<A, B>::value, #A " is not " #B)
#define PROBE_TYPEOF(expr) decltype(expr)
#else
#define PROBE_ALIGNOF(T) _Alignof(T)
#define PROBE_SAME_TYPE(A, B) \
  _Static_assert(__builtin_types_compatible_p(A, B), #A " is not " #B)
#define PROBE_TYPEOF(expr) __typeof__(expr)
#endif

#define PROBE_FIELD_TYPE(S, f) PROBE_TYPEOF(((S*)0)->f)
"""


def _probe_source(enumerators=None):
    """The probe, printing every enumerator of the table, or only those of
    ``enumerators`` (the names a header of the 1.3 release has)."""
    decls, body = [], []
    out = body.append

    for typedef, fptr in NAMES["function_types"].items():
        decls.append(f"PROBE_SAME_TYPE({typedef}, {fptr});")
    for struct, fields in NAMES["structs"].items():
        for field, ctype in fields:
            decls.append(
                f"PROBE_SAME_TYPE(PROBE_FIELD_TYPE({struct}, {field}), {ctype});"
            )

    for t in ALL_TYPES:
        out(f'printf("sizeof {t} %zu\\n", sizeof({t}));')
        out(f'printf("alignof {t} %zu\\n", (size_t)PROBE_ALIGNOF({t}));')
        out("#ifdef __cplusplus")
        out(f'printf("typeid {t} %s\\n", typeid({t}).name());')
        out("#endif")
    for struct, fields in NAMES["structs"].items():
        for field, _ in fields:
            key = f"{struct}.{field}"
            out(f'printf("offsetof {key} %zu\\n", offsetof({struct}, {field}));')
            out(f'printf("sizeof {key} %zu\\n", '
                f'sizeof(((({struct}*)0)->{field})));')
            out("#ifdef __cplusplus")
            out(f'printf("typeid {key} %s\\n", '
                f'typeid(PROBE_FIELD_TYPE({struct}, {field})).name());')
            out("#endif")
    for enum, members in NAMES["enums"].items():
        out("#ifdef __cplusplus")
        out(f'printf("underlying {enum} %s\\n", '
            f'typeid(std::underlying_type<{enum}>::type).name());')
        out("#endif")
        for name in members:
            if enumerators is not None and name not in enumerators:
                continue
            out(f'printf("enum {name} %lld\\n", (long long)({name}));')
            out(f'printf("sizeof {name} %zu\\n", sizeof({name}));')
            out("#ifdef __cplusplus")
            out(f'printf("typeid {name} %s\\n", typeid({name}).name());')
            out("#endif")
    for name in NAMES["value_macros"]:
        out(f'printf("macro {name} %llu\\n", (unsigned long long)({name}));')
        out(f'printf("sizeof {name} %zu\\n", sizeof({name}));')
        out(f'printf("unsigned {name} %d\\n", (int)((({name}) * 0 - 1) > 0));')
        out("#ifdef __cplusplus")
        out(f'printf("typeid {name} %s\\n", typeid({name}).name());')
        out("#endif")
    for name in NAMES["other_macros"]:
        decls.append(f'#ifndef {name}\n#error "{name} is not defined"\n#endif')
        out(f'printf("expansion {name} [%s]\\n", PROBE_STR({name}));')

    return (PRELUDE + "\n".join(decls)
            + "\n\nint main(void) {\n" + "\n".join(body)
            + "\nreturn 0;\n}\n")


def _parse(output):
    result = {}
    for line in output.splitlines():
        kind, name, value = line.split(" ", 2)
        key = (kind, name)
        assert key not in result, f"probe printed {key} twice"
        result[key] = value
    return result


_probe_cache = {}


def _probe(header, lang, tmp_path_factory, enumerators=None):
    key = (str(header), lang, None if enumerators is None else frozenset(enumerators))
    if key not in _probe_cache:
        workdir = tmp_path_factory.mktemp("probe")
        _probe_cache[key] = _parse(
            _compile_and_run(_probe_source(enumerators), lang, header.parent, workdir)
        )
    return _probe_cache[key]


def _upstream_enumerators(header):
    """The enumerators of an upstream header: every name of the table, or
    all but those added after the 1.3 release."""
    enumerators = _header_names(header)[1]
    assert set(ALL_ENUMERATORS) - AFTER_1_3 <= enumerators <= set(ALL_ENUMERATORS), (
        sorted(enumerators ^ set(ALL_ENUMERATORS)))
    return enumerators


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("lang", list(LANGS))
@pytest.mark.parametrize("which", OURS)
def test_our_header_matches_table(which, lang, tmp_path_factory):
    """Our header compiles in the probe and has the values in the table."""
    got = _probe(_header(which), lang, tmp_path_factory)
    for name, value in ALL_ENUMERATORS.items():
        assert got[("enum", name)] == str(value), name
    for name, value in NAMES["value_macros"].items():
        assert got[("macro", name)] == str(value), name
    for t in ALL_TYPES:
        assert ("sizeof", t) in got
    for struct, fields in NAMES["structs"].items():
        for field, _ in fields:
            assert ("offsetof", f"{struct}.{field}") in got
    # DLPACK_FLAG_BITMASK_* are unsigned long, as upstream
    assert got[("unsigned", "DLPACK_FLAG_BITMASK_READ_ONLY")] == "1"


@pytest.mark.parametrize("lang", list(LANGS))
@pytest.mark.parametrize("upstream", list(UPSTREAM))
@pytest.mark.parametrize("which", OURS)
def test_abi_identical_to_upstream(which, upstream, lang, tmp_path_factory):
    """sizeof/alignof/offsetof/types/values are identical to upstream's, for
    every name both headers have."""
    names = _upstream_enumerators(_header(upstream))
    theirs = _probe(_header(upstream), lang, tmp_path_factory, names)
    ours = _probe(_header(which), lang, tmp_path_factory, names)
    assert set(ours) == set(theirs)
    diff = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    assert not diff, f"differs from {upstream} (ours, theirs): {diff}"


@pytest.mark.parametrize("which", OURS + list(UPSTREAM))
def test_device_type_is_int32_in_cxx(which, tmp_path):
    source = (
        '#include <stdio.h>\n#include <stdint.h>\n#include <type_traits>\n'
        '#include "dlpack.h"\n'
        "static_assert(sizeof(DLDeviceType) == 4, \"sizeof(DLDeviceType)\");\n"
        "static_assert(std::is_same<std::underlying_type<DLDeviceType>::type,"
        " int32_t>::value, \"underlying type of DLDeviceType\");\n"
        'int main(void) { printf("%zu\\n", sizeof(DLDeviceType)); return 0; }\n'
    )
    out = _compile_and_run(source, "c++", _header(which).parent, tmp_path)
    assert out.strip() == "4"


# --- textual comparison of the names each header defines -----------------
def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _header_names(path):
    text = _strip_comments(path.read_text())
    defines = set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", text, re.M))
    enumerators = set(re.findall(r"\b(kDL\w+)\s*=", text))
    typedefs = set(re.findall(r"\}\s*(\w+)\s*;", text))
    typedefs |= set(re.findall(r"typedef[^;{}]*?\(\s*\*\s*(\w+)\s*\)", text))
    fields = {}
    for name_, body, name in re.findall(
        r"typedef\s+struct\s*(\w*)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S
    ):
        names = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            fptr = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
            names.append(fptr.group(1) if fptr else re.findall(r"\w+", decl)[-1])
        fields[name] = names
    return defines, enumerators, typedefs, fields


@pytest.mark.parametrize("which", OURS + list(UPSTREAM))
def test_table_covers_every_name(which):
    """The table names everything the header declares, so the probe does
    (an upstream header of the 1.3 release: all but AFTER_1_3)."""
    defines, enumerators, typedefs, fields = _header_names(_header(which))
    assert defines == ALL_MACROS
    if which in OURS:
        assert enumerators == set(ALL_ENUMERATORS)
    else:
        assert enumerators == _upstream_enumerators(_header(which))
    assert typedefs == set(ALL_TYPES)
    assert fields == {
        struct: [f for f, _ in members]
        for struct, members in NAMES["structs"].items()
    }


@pytest.mark.parametrize("upstream", list(UPSTREAM))
@pytest.mark.parametrize("which", OURS)
def test_same_defines_and_enumerators_as_upstream(which, upstream):
    ours = _header_names(_header(which))
    theirs = _header_names(_header(upstream))
    assert ours[0] == theirs[0], "#define names differ"
    assert theirs[1] <= ours[1] and ours[1] - theirs[1] <= AFTER_1_3, "enumerator names differ"
    assert ours[2] == theirs[2], "typedef names differ"
    assert ours[3] == theirs[3], "struct fields differ"


@pytest.mark.parametrize("lang", list(LANGS))
@pytest.mark.parametrize("upstream", list(UPSTREAM))
def test_headers_are_interchangeable(upstream, lang, tmp_path):
    """Same include guard: including both in either order compiles."""
    ours = _header("repo")
    theirs = _header(upstream)
    for first, second in ((ours, theirs), (theirs, ours)):
        source = (
            f'#include "{first}"\n#include "{second}"\n'
            "int main(void) { DLManagedTensorVersioned t;"
            " t.version.major = DLPACK_MAJOR_VERSION; return (int)t.version.major - 1; }\n"
        )
        _compile_and_run(source, lang, ours.parent, tmp_path, name="both")
