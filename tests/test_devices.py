"""DeviceType, C_ENUMERATORS, Device parsing and errors, and the in-place
access table of docs/semantics.md (can_access)."""

from __future__ import annotations

import itertools
import pickle

import pytest

import dlpack_ref as dr
from dlpack_ref import Device, DeviceType

# docs/semantics.md "Devices": name -> (value, C enumerator of dlpack.h).
TABLE = {
    "CPU": (1, "kDLCPU"), "CUDA": (2, "kDLCUDA"), "CPU_PINNED": (3, "kDLCUDAHost"),
    "OPENCL": (4, "kDLOpenCL"), "VULKAN": (7, "kDLVulkan"), "METAL": (8, "kDLMetal"),
    "VPI": (9, "kDLVPI"), "ROCM": (10, "kDLROCM"), "ROCM_PINNED": (11, "kDLROCMHost"),
    "EXT_DEV": (12, "kDLExtDev"), "CUDA_MANAGED": (13, "kDLCUDAManaged"),
    "ONE_API": (14, "kDLOneAPI"), "WEBGPU": (15, "kDLWebGPU"), "HEXAGON": (16, "kDLHexagon"),
    "MAIA": (17, "kDLMAIA"), "TRN": (18, "kDLTrn"), "TPU": (19, "kDLTPU"),
    "TPU_PINNED": (20, "kDLTPUHost"), "ASCEND": (21, "kDLAscend"),
}


def test_device_type_table():
    assert {m.name: int(m) for m in DeviceType} == {name: v for name, (v, _) in TABLE.items()}
    assert issubclass(DeviceType, int)
    assert DeviceType.CPU == 1 and DeviceType(2) is DeviceType.CUDA


def test_c_enumerators():
    assert {m.name: c for m, c in dr.C_ENUMERATORS.items()} == {name: c for name, (_, c) in TABLE.items()}


@pytest.mark.parametrize("spec, expected", [
    ("cpu", (DeviceType.CPU, 0)),
    ("cuda:1", (DeviceType.CUDA, 1)),
    ("cuda_managed:0", (DeviceType.CUDA_MANAGED, 0)),
    ("cpu_pinned", (DeviceType.CPU_PINNED, 0)),
    ("CUDA:2", (DeviceType.CUDA, 2)),
    (" rocm_pinned:3 ", (DeviceType.ROCM_PINNED, 3)),
    ("tpu:1", (DeviceType.TPU, 1)),
    ("tpu_pinned", (DeviceType.TPU_PINNED, 0)),
    ("ascend:2", (DeviceType.ASCEND, 2)),
    ("gpu", (DeviceType.CUDA, 0)),
    ((2, 3), (DeviceType.CUDA, 3)),
    (("cuda", 1), (DeviceType.CUDA, 1)),
    ((DeviceType.ROCM, 0), (DeviceType.ROCM, 0)),
    (Device("metal", 2), (DeviceType.METAL, 2)),
])
def test_as_device_parses(spec, expected):
    d = dr.as_device(spec)
    assert isinstance(d, Device) and d.__dlpack_device__() == expected
    assert (d.type, d.id) == expected and type(d.type) is DeviceType


def test_device_constructor():
    assert Device("cuda:1") == Device("cuda", 1) == Device(2, 1) == Device(DeviceType.CUDA, 1)
    assert Device("cpu").id == 0
    assert str(Device("cuda_managed", 4)) == "cuda_managed:4"
    assert repr(Device("cuda", 1)) == "Device('cuda', 1)"


def test_objects_with_dlpack_device():
    np = pytest.importorskip("numpy")
    assert dr.as_device(np.zeros(2)) == Device("cpu")
    assert dr.as_device(dr.zeros(1)) == Device("cpu")
    assert dr.as_device(Device("cuda", 5)) == Device("cuda", 5)


def test_torch_tensor_has_a_device_torch_device_is_read_by_its_attributes():
    torch = pytest.importorskip("torch")
    assert dr.as_device(torch.zeros(1)) == Device("cpu")
    # torch.device carries no __dlpack_device__ (torch 2.13): read by .type and
    # .index (tests/test_foreign_dtypes_devices.py has the rest).
    assert not hasattr(torch.device("cpu"), "__dlpack_device__")
    assert dr.as_device(torch.device("cpu")) == Device("cpu")


class BadProtocol:
    def __dlpack_device__(self):
        return [1, 0]


@pytest.mark.parametrize("spec, exc, message", [
    ("quantum", ValueError, "unknown device type 'quantum'; expected one of \\['ascend', 'cpu', 'cpu_pinned', 'cuda'"),
    ("cuda:x", ValueError, "cannot parse device 'cuda:x': the id after ':' must be a non-negative integer"),
    ("cuda:-1", ValueError, "cannot parse device 'cuda:-1'"),
    ("cuda:1:2", ValueError, "cannot parse device 'cuda:1:2'"),
    ((1,), ValueError, "a device tuple must be \\(device_type, device_id\\), got \\(1,\\)"),
    ((5, 0), ValueError, "5 is not a DLPack 1.3 device type; expected one of \\[1, 2, 3, 4, 7"),
    ((6, 0), ValueError, "6 is not a DLPack 1.3 device type"),
    ((2, -1), ValueError, "device id must be in \\[0, 2\\*\\*31\\), got -1"),
    ((2, 2 ** 31), ValueError, "device id must be in \\[0, 2\\*\\*31\\), got 2147483648"),
    (("cuda", 1.0), TypeError, "device id must be an int, not 1.0"),
    ((True, 0), TypeError, "device type must be a DeviceType, an int or a name, not True"),
    ((1.0, 0), TypeError, "device type must be a DeviceType, an int or a name, not 1.0"),
    (3, TypeError, "cannot interpret 3 \\(type int\\) as a device"),
    (None, TypeError, "cannot interpret None \\(type NoneType\\) as a device"),
    (BadProtocol(), ValueError, "__dlpack_device__\\(\\) of BadProtocol returned \\[1, 0\\], not \\(type, id\\)"),
])
def test_as_device_errors(spec, exc, message):
    with pytest.raises(exc, match=message):
        dr.as_device(spec)


def test_hash_and_equality():
    a, b, c = Device("cuda", 1), Device(2, 1), Device("cuda", 2)
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c, Device("cpu")}) == 3
    assert (Device("cpu") == (1, 0)) is False  # Devices compare equal to Devices only
    assert pickle.loads(pickle.dumps(a)) == a


# --- can_access: the table of docs/semantics.md ------------------------------------------

def in_place(device, memory):
    """docs/semantics.md, written out: CPU reads CPU, CPU_PINNED, CUDA_MANAGED,
    ROCM_PINNED and TPU_PINNED memory; CUDA:k reads CUDA:k, CUDA_MANAGED and
    CPU_PINNED; every device reads its own memory (same type and id; one
    host, so any CPU id); ROCm and TPU are analogous to CUDA."""
    d, m = device, memory
    if d.type == m.type and (d.id == m.id or d.type == DeviceType.CPU):
        return True
    readers = {
        DeviceType.CPU_PINNED: {DeviceType.CPU, DeviceType.CUDA, DeviceType.CPU_PINNED},
        DeviceType.CUDA_MANAGED: {DeviceType.CPU, DeviceType.CUDA, DeviceType.CUDA_MANAGED},
        DeviceType.ROCM_PINNED: {DeviceType.CPU, DeviceType.ROCM, DeviceType.ROCM_PINNED},
        DeviceType.TPU_PINNED: {DeviceType.CPU, DeviceType.TPU, DeviceType.TPU_PINNED},
    }
    return d.type in readers.get(m.type, ())


ALL_DEVICES = [Device(t, i) for t in DeviceType for i in (0, 1)]


def test_can_access_whole_table():
    wrong = [(d, m) for d, m in itertools.product(ALL_DEVICES, ALL_DEVICES)
             if dr.can_access(d, m) != in_place(d, m)]
    assert not wrong


@pytest.mark.parametrize("device, memory, expected", [
    ("cpu", "cpu", True), ("cpu", "cpu_pinned", True), ("cpu", "cuda_managed:1", True),
    ("cpu", "rocm_pinned", True), ("cpu", "cuda:0", False), ("cpu", "rocm:0", False),
    ("cuda:0", "cuda:0", True), ("cuda:0", "cuda:1", False), ("cuda:1", "cuda_managed:0", True),
    ("cuda:1", "cpu_pinned", True), ("cuda:0", "cpu", False), ("cuda:0", "rocm_pinned", False),
    ("rocm:0", "rocm_pinned", True), ("rocm:0", "cpu_pinned", False), ("vulkan:0", "cpu", False),
    ("cpu", "tpu_pinned", True), ("cpu:3", "tpu_pinned:0", True), ("tpu:1", "tpu_pinned", True),
    ("tpu_pinned", "tpu_pinned", True), ("cpu", "tpu:0", False), ("cuda:0", "tpu_pinned", False),
    ("tpu:0", "cpu", False), ("tpu_pinned", "cpu", False), ("cpu", "ascend:0", False),
    ("ascend:0", "ascend:0", True),
])
def test_can_access_rows(device, memory, expected):
    assert dr.can_access(device, memory) is expected
    assert dr.can_access(dr.as_device(device), dr.as_device(memory).__dlpack_device__()) is expected


def test_can_access_accepts_arrays_and_rejects_junk():
    assert dr.can_access(dr.zeros(1), "cpu") is True
    with pytest.raises(TypeError, match="cannot interpret 1.5"):
        dr.can_access(1.5, "cpu")
    with pytest.raises(ValueError, match="unknown device type 'quantum'"):
        dr.can_access("cpu", "quantum")
