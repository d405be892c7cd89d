"""dlpack_ref.testing.reader.verdict, the oracle independent of the core:
on hand-built capsules it refuses exactly what from_dlpack refuses, and it
reads through the ctypes mirror, not through dlpack_ref.inspect."""

import ast
import inspect as pyinspect

import pytest

import dlpack_ref
from dlpack_ref._devices import SUPPORTED
from dlpack_ref.testing import (
    FLAG_IS_SUBBYTE_TYPE_PADDED, INT64_MAX, NAME_USED_VERSIONED, CapsuleFactory, reader, verdict,
)

F64 = (2, 64, 1)
# (label, make kwargs, refused); the device policy's own cases are POLICY_ONLY
CORPUS = [
    ("valid", {}, False),
    ("legacy", {"versioned": False}, False),
    ("bad name", {"name": b"not_a_dltensor"}, True),
    ("used name", {"name": NAME_USED_VERSIONED}, True),
    ("NULL name", {"name": "null"}, True),
    ("major 2", {"version": (2, 0)}, True),
    ("major 0", {"version": (0, 9)}, True),
    ("minor 99", {"version": (1, 99)}, False),
    ("ndim -1", {"ndim": -1}, True),
    ("ndim 65", {"shape": (1,) * 65}, True),
    ("ndim 64", {"shape": (1,) * 64}, False),
    ("0-d", {"shape": ()}, False),
    ("NULL shape", {"shape_null": True}, True),
    ("NULL shape, 0-d", {"shape": (), "shape_null": True}, False),
    ("negative extent", {"shape": (2, -3)}, True),
    ("extent overflow", {"shape": (2 ** 62, 8)}, True),
    ("extent overflow before a 0", {"shape": (2 ** 62, 8, 0)}, False),
    ("0 before a huge extent", {"shape": (0, 2 ** 62, 8)}, False),
    ("INT64_MAX // 8 bytes", {"shape": (INT64_MAX // 8,), "dtype": (1, 8, 1), "data": 0x1000}, False),
    ("INT64_MAX bytes: bits overflow", {"shape": (INT64_MAX,), "dtype": (1, 8, 1), "data": 0x1000}, True),
    ("bits overflow", {"shape": (INT64_MAX // 4,), "dtype": (2, 64, 1), "data": 0x1000}, True),
    ("stride span overflow", {"shape": (3, 3), "strides": (2 ** 62, 1)}, True),
    ("stride INT64_MAX, extent 1", {"shape": (1,), "strides": (INT64_MAX,)}, True),
    ("stride INT64_MAX, empty", {"shape": (0,), "strides": (INT64_MAX,)}, False),
    ("stride INT64_MAX, extent 2", {"shape": (2,), "strides": (INT64_MAX,)}, True),
    ("stride -INT64_MAX-1, extent 2", {"shape": (2,), "strides": (-INT64_MAX - 1,)}, True),
    ("huge stride, empty", {"shape": (0, 3), "strides": (INT64_MAX, 1)}, False),
    ("negative strides", {"shape": (3,), "strides": (-1,), "byte_offset": 16}, False),
    ("NULL strides 1.3", {"strides": "null"}, True),
    ("NULL strides 1.1", {"strides": "null", "version": (1, 1)}, False),
    ("NULL strides legacy", {"strides": "null", "versioned": False}, False),
    ("NULL strides 0-d 1.3", {"shape": (), "strides": "null"}, False),
    ("NULL data", {"data": None}, True),
    ("NULL data, empty", {"shape": (0, 3), "data": None}, False),
    ("byte_offset > INT64_MAX", {"byte_offset": INT64_MAX + 1, "data": 0x1000}, True),
    ("byte_offset > INT64_MAX, empty", {"shape": (0,), "byte_offset": INT64_MAX + 1, "data": None}, True),
    ("dtype code 99", {"dtype": (99, 32, 1)}, True),
    ("float24", {"dtype": (2, 24, 1)}, True),
    ("lanes 4", {"dtype": (2, 32, 4)}, True),
    ("opaque handle", {"dtype": (3, 64, 1)}, True),
    ("float4 x2", {"dtype": (17, 4, 2), "shape": (4,)}, False),
    ("float4 padded", {"dtype": (17, 4, 1), "shape": (4,), "flags": FLAG_IS_SUBBYTE_TYPE_PADDED}, False),
    ("device 99", {"device": (99, 0), "data": 0x1000}, True),
    ("device 5", {"device": (5, 0), "data": 0x1000}, True),
    ("device_id -1", {"device": (1, -1)}, True),
    ("CUDA", {"device": (2, 0), "data": 0x1000}, False),
]
POLICY_ONLY = [("OpenCL", {"device": (4, 0), "data": 0x1000}), ("ROCm", {"device": (10, 0), "data": 0x1000})]


def _from_dlpack_refuses(capsule) -> bool:
    try:
        a = dlpack_ref.from_dlpack(capsule)
    except BufferError:
        return True
    del a
    return False


@pytest.mark.parametrize("label, make, refused", CORPUS, ids=[c[0] for c in CORPUS])
def test_verdict_decides_as_from_dlpack(label, make, refused):
    f = CapsuleFactory()
    reason = verdict(f.make(**{"shape": (2, 3), "dtype": F64, **make}))
    assert (reason is not None) == refused, reason
    assert _from_dlpack_refuses(f.make(**{"shape": (2, 3), "dtype": F64, **make})) == refused


@pytest.mark.parametrize("label, make", POLICY_ONLY, ids=[c[0] for c in POLICY_ONLY])
def test_device_policy_is_reported_separately(label, make):
    f = CapsuleFactory()
    assert verdict(f.make(dtype=F64, **make), devices=None) is None
    assert "policy" in verdict(f.make(dtype=F64, **make))
    assert _from_dlpack_refuses(f.make(dtype=F64, **make))


def test_verdict_consumes_nothing_and_names_the_rule():
    f = CapsuleFactory()
    cap = f.make(shape=(2, -3), dtype=F64)
    assert verdict(cap) == "shape[1]=-3 is negative"
    assert dlpack_ref.testing.capsule_name(cap) == b"dltensor_versioned"
    del cap
    assert f.deleter_calls == 1


def test_verdict_of_a_non_capsule_is_a_typeerror():
    with pytest.raises(TypeError):
        verdict(42)


def test_reader_is_independent_of_the_core():
    """Only the Python tables and the ctypes mirror: no import of the extension."""
    tree = ast.parse(pyinspect.getsource(reader))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert imported <= {"__future__", "ctypes", "math", "struct", "_devices", "_dtypes", "abi"}, imported


def _shared_corpus():
    from support.malformed import MALFORMED, POLICY_ONLY, VALID
    for case, kwargs, _, legacy in MALFORMED:
        for versioned in (True, False) if legacy else (True,):
            yield pytest.param(kwargs, versioned, False, case in POLICY_ONLY, id=f"{case}-{versioned}")
    for case, kwargs, legacy in VALID:
        for versioned in (True, False) if legacy else (True,):
            yield pytest.param(kwargs, versioned, True, False, id=f"{case}-{versioned}")


@pytest.mark.parametrize("kwargs, versioned, valid, policy_only", list(_shared_corpus()))
def test_verdict_on_the_shared_malformed_corpus(factory, kwargs, versioned, valid, policy_only):
    """tests/support/malformed.py, the corpus from_dlpack and the vendorable
    API are held to: the universal verdict and the policy verdict."""
    cap = factory.make(versioned=versioned, **kwargs)
    universal = verdict(cap, devices=None)
    assert (universal is None) == (valid or policy_only), universal
    with_policy = verdict(cap)
    device_type = kwargs.get("device", (1, 0))[0]
    assert (with_policy is None) == ((valid or policy_only) and device_type in SUPPORTED), with_policy
    assert _from_dlpack_refuses(cap) == (with_policy is not None)


def test_read_values_widens_bcomplex32_and_reads_tpu_pinned_memory(factory):
    """bcomplex32: two bfloat16, real part first, each widened exactly; memory
    on kDLTPUHost is host memory, read in place."""
    import struct
    halves = [0x3F80, 0xC040, 0x0000, 0x8000, 0x7F80, 0x3EAA]   # 1, -3; 0, -0; inf, 0.33203125
    cap = factory.make(shape=(3,), dtype=(18, 32, 1), device=(20, 0), fill=struct.pack("<6H", *halves))
    assert reader.read_values(cap) == [1 - 3j, complex(0.0, -0.0), complex(float("inf"), 0.33203125)]
    assert verdict(cap) is None
