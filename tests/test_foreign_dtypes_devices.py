"""as_dtype / as_device with other libraries' dtype and device objects
(data-apis/array-api#972 completed): array-api-strict, torch and JAX. The
oracle is each library's own DLPack export: the dtype and device dlpack-ref
reads from a library's array must be what it makes of that library's dtype
or device object."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

import dlpack_ref as dr
from dlpack_ref import Device


# --- array-api-strict ------------------------------------------------------------

def test_array_api_strict_dtypes_are_what_its_arrays_export():
    xp = pytest.importorskip("array_api_strict")
    dtypes = xp.__array_namespace_info__().dtypes()
    assert len(dtypes) >= 13
    for name, dtype in dtypes.items():
        exported = dr.from_dlpack(xp.zeros((2,), dtype=dtype)).dtype
        assert dr.as_dtype(dtype) is exported is dr.DTYPES[name], name


def test_array_api_strict_devices_are_where_its_arrays_live():
    xp = pytest.importorskip("array_api_strict")
    for device in xp.__array_namespace_info__().devices():
        x = xp.asarray([1.0, 2.0], device=device)
        assert dr.as_device(device) == dr.as_device(x) == Device("cpu", 0)
    assert dr.as_device(xp.Device("CPU_DEVICE")) == Device("cpu", 0)


def test_creation_takes_array_api_strict_dtypes_and_devices():
    xp = pytest.importorskip("array_api_strict")
    a = dr.empty((2, 3), dtype=xp.float32, device=xp.Device("CPU_DEVICE"))
    assert a.dtype is dr.float32 and a.shape == (2, 3) and a.device == Device("cpu", 0)
    assert np.from_dlpack(a).dtype == np.float32
    b = dr.asarray([1, 2], dtype=xp.int16)
    assert b.dtype is dr.int16 and b.tolist() == [1, 2]
    assert dr.zeros((2,), dtype=xp.complex64).tolist() == [0j, 0j]


# --- torch ---------------------------------------------------------------------------

def test_torch_dtypes_are_what_its_tensors_export():
    torch = pytest.importorskip("torch")
    for dtype in (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                  torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                  torch.complex128):
        exported = dr.from_dlpack(torch.zeros(2, dtype=dtype)).dtype
        assert dr.as_dtype(dtype) is exported, dtype


def test_torch_devices_by_type_and_index():
    torch = pytest.importorskip("torch")
    cpu = torch.device("cpu")
    assert dr.as_device(cpu) == dr.as_device(torch.zeros(1, device=cpu)) == Device("cpu", 0)
    assert dr.as_device(torch.device("cuda:1")) == Device("cuda", 1)
    # No index: id 0, as the string "cuda" means here.
    assert dr.as_device(torch.device("cuda")) == dr.as_device("cuda") == Device("cuda", 0)
    assert dr.as_device(torch.device("mps")) == Device("metal", 0)
    assert dr.as_device(torch.device("xpu", 2)) == Device("one_api", 2)


def test_a_torch_device_dlpack_cannot_describe_is_refused_by_name():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"is a 'meta' device, for which DLPack 1.3 has no device type"):
        dr.as_device(torch.device("meta"))


def test_a_rocm_build_of_torch_makes_cuda_devices_rocm(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    assert dr.as_device(torch.device("cuda:3")) == Device("rocm", 3)


def test_creation_takes_torch_devices_and_dtypes():
    torch = pytest.importorskip("torch")
    a = dr.asarray([1.0, 2.0], device=torch.device("cpu"), dtype=torch.float64)
    assert a.device == Device("cpu", 0) and a.dtype is dr.float64 and a.tolist() == [1.0, 2.0]
    t = torch.from_dlpack(dr.empty((3,), dtype=torch.bfloat16, device=torch.device("cpu")))
    assert t.dtype == torch.bfloat16 and t.shape == (3,)


# --- JAX ------------------------------------------------------------------------------

def test_jax_dtypes_are_what_its_arrays_export():
    jnp = pytest.importorskip("jax.numpy")
    for dtype in (jnp.bool_, jnp.int8, jnp.int32, jnp.uint16, jnp.float16, jnp.bfloat16,
                  jnp.float32, jnp.complex64):
        exported = dr.from_dlpack(jnp.zeros(2, dtype=dtype)).dtype
        assert dr.as_dtype(dtype) is exported is dr.as_dtype(jnp.dtype(dtype)), dtype


def test_jax_devices_are_where_its_arrays_live():
    jax = pytest.importorskip("jax")
    for device in jax.devices():
        x = jax.device_put(jax.numpy.zeros(1), device)
        assert dr.as_device(device) == dr.as_device(x), device
    a = dr.asarray([1.0], device=jax.devices()[0])
    assert a.device == dr.as_device(jax.devices()[0])


class _JaxLikeDevice:
    """The documented attributes of a jax.Device on a machine we do not have."""

    def __init__(self, platform, id, local_hardware_id, platform_version=""):
        self.platform, self.id, self.local_hardware_id = platform, id, local_hardware_id
        self.client = types.SimpleNamespace(platform_version=platform_version)


def test_a_jax_gpu_device_uses_its_local_hardware_id():
    assert dr.as_device(_JaxLikeDevice("gpu", 5, 1, "cuda 12.8")) == Device("cuda", 1)
    assert dr.as_device(_JaxLikeDevice("gpu", 2, None)) == Device("cuda", 2)
    assert dr.as_device(_JaxLikeDevice("gpu", 0, 0, "rocm 6.3")) == Device("rocm", 0)
    assert dr.as_device(_JaxLikeDevice("tpu", 4, 1)) == Device("tpu", 1)
    with pytest.raises(ValueError, match="is a 'quantum' device, for which DLPack 1.3 has no device type"):
        dr.as_device(_JaxLikeDevice("quantum", 0, 0))


# --- any array API library, without importing it --------------------------------

class _Info:
    def __init__(self, dtypes, devices):
        self._dtypes, self._devices = dtypes, devices

    def dtypes(self):
        return self._dtypes

    def devices(self):
        return self._devices


def _fake_namespace(monkeypatch):
    """An array API namespace 'fake_xp' whose dtype and device objects are
    plain instances, registered in sys.modules (never imported by dlpack-ref)."""
    ns = types.ModuleType("fake_xp")

    class FakeDType:
        __module__ = "fake_xp._dtypes"

        def __init__(self, name):
            self.name = name

    class FakeDevice:
        __module__ = "fake_xp._devices"

    f8, text, dev = FakeDType("float64"), FakeDType("string"), FakeDevice()
    ns.__array_namespace_info__ = lambda: _Info({"float64": f8, "string": text}, [dev])
    # An "array" on dev reports managed memory of GPU 1 through its __dlpack_device__.
    ns.empty = lambda shape, device=None: types.SimpleNamespace(
        __dlpack_device__=lambda: (13, 1) if device is dev else (1, 0))
    monkeypatch.setitem(sys.modules, "fake_xp", ns)
    return ns, f8, text, dev, FakeDType, FakeDevice


def test_any_array_api_namespace_lends_its_names_and_devices(monkeypatch):
    ns, f8, text, dev, FakeDType, FakeDevice = _fake_namespace(monkeypatch)
    assert dr.as_dtype(f8) is dr.float64
    # The device is what the namespace's own empty array reports.
    assert dr.as_device(dev) == Device("cuda_managed", 1)
    with pytest.raises(TypeError, match=r"\(string\) has no DLPack equivalent in dlpack-ref"):
        dr.as_dtype(text)
    # Not listed by the namespace: not a dtype or device of it.
    with pytest.raises(TypeError, match="cannot interpret .* as a dtype"):
        dr.as_dtype(FakeDType("float64"))
    with pytest.raises(TypeError, match="cannot interpret .* as a device"):
        dr.as_device(FakeDevice())


def test_an_object_with_a_type_but_no_index_is_not_a_torch_device():
    with pytest.raises(TypeError, match="cannot interpret .* as a device"):
        dr.as_device(types.SimpleNamespace(type="cuda"))


def test_foreign_objects_are_read_without_importing_their_library():
    code = (
        "import sys, types, dlpack_ref as dr\n"
        "class device:\n"
        "    __module__ = 'torch'\n"
        "    type, index = 'cuda', 2\n"
        "assert dr.as_device(device()) == dr.Device('cuda', 2)\n"
        "assert dr.as_device(types.SimpleNamespace(platform='cpu', id=0)) == dr.Device('cpu', 0)\n"
        "loaded = [m for m in ('torch', 'jax', 'jaxlib', 'array_api_strict', 'numpy') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
