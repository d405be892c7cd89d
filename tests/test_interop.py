"""Round trips between dlpack_ref and NumPy, PyTorch, JAX, array-api-strict
and ml_dtypes, in both directions: ``dlpack_ref.from_dlpack(x)`` and
``lib.from_dlpack(dlpack_ref_array)``, for every dtype each library holds and
for 0-d, size-0, sliced, negative-stride, strided and transposed arrays.
Every exchange must be zero-copy (the same data pointer) and carry the same
values (compared through ``tolist()``, float8/bfloat16/float4 values decoded
by ml_dtypes, NaN equal to NaN and the sign of zero checked).

What the libraries do (measured with numpy 2.4, torch 2.13.0+cpu, jax 0.10.2,
array-api-strict 2.6, ml_dtypes 0.6), and what these tests therefore pin:

* NumPy exchanges every layout both ways, honours READ_ONLY on import, and has
  no DLPack support for ml_dtypes dtypes: ``__dlpack__`` of a bfloat16/float8/
  float4 NumPy array raises BufferError, and ``numpy.from_dlpack`` of such a
  DLPack tensor raises RuntimeError("Unsupported dtype in DLTensor."). Its
  buffer protocol refuses them too (ValueError "cannot include dtype 'E' in a
  buffer"), so ``dlpack_ref.asarray`` of such an array reports NumPy's
  BufferError. The zero-copy route between ml_dtypes arrays and dlpack_ref
  goes through JAX (``numpy.asarray(jax_array)`` is an ml_dtypes array on
  the same memory) or through a byte view in PyTorch.
* PyTorch exchanges bool, all ints incl. uint16-64, floats, bfloat16, complex,
  float8_e4m3fn/e5m2/e4m3fnuz/e5m2fnuz/e8m0fnu and float4_e2m1fn_x2 (exported
  as code 17, bits 4, lanes 2). It cannot hold negative strides, and
  ``torch.from_dlpack`` of any DLPack tensor with a negative stride (NumPy's
  too) aborts the process (c10::Error thrown through a noexcept frame), so
  that case is skipped, not run. It ignores DLPACK_FLAG_BITMASK_READ_ONLY
  (imports read-only memory as a writable tensor, without a warning). An
  empty tensor gets a data pointer of its own.
* JAX (with jax_enable_x64) exports legacy ``dltensor`` capsules only and
  calls ``__dlpack__(stream=None)`` without max_version, so a read-only
  dlpack_ref Array cannot go to JAX (BufferError, legacy has no read-only
  flag). It imports zero-copy only data aligned to 64 bytes (else it copies
  silently under copy=None) and only compact layouts (transposes yes;
  slices, steps and negative strides raise "Only DLPack tensors with trivial
  (compact) striding are supported"). It exports float4_e2m1fn packed, two
  per byte, as (17, 4, 1), but imports no float4 at all, not even its own.
  int4/uint4 and float6 have no DLPack export in JAX.
* array-api-strict wraps NumPy: the same as NumPy for its dtypes (no float16).
"""

from __future__ import annotations

import math

import pytest

import dlpack_ref as dr
from dlpack_ref.testing import read_capsule

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

SHAPE = (4, 6)

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128"]
FLOAT8 = ["float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
          "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]
TORCH_DTYPES = NUMPY_DTYPES + ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                               "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"]
JAX_DTYPES = NUMPY_DTYPES + ["bfloat16"] + FLOAT8
STRICT_DTYPES = [d for d in NUMPY_DTYPES if d != "float16"]

# Raw-code storage of the ml_dtypes types: NumPy holds them one per byte (or
# two bytes for bfloat16); float4_e2m1fn_x2 has no ml_dtypes type and is kept
# as its uint8 bytes (low nibble = lane 0).
ML_STORAGE = {"bfloat16": np.uint16, "float4_e2m1fn": np.uint8, "float4_e2m1fn_x2": np.uint8,
              **{name: np.uint8 for name in FLOAT8}}


# --- reference data -----------------------------------------------------------

def reference(name, shape=SHAPE, seed=0):
    """A NumPy array of ``name`` (an ml_dtypes array for the types NumPy lacks)
    with random values; random raw codes for the ml_dtypes types, so NaNs,
    infinities, signed zeros and subnormals all occur."""
    rng = np.random.default_rng(seed)
    if name in ML_STORAGE:
        storage = ML_STORAGE[name]
        top = 16 if name == "float4_e2m1fn" else np.iinfo(storage).max + 1
        codes = rng.integers(0, top, size=shape, dtype=np.int64).astype(storage)
        return codes if name == "float4_e2m1fn_x2" else codes.view(getattr(ml_dtypes, name))
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    kind = np.dtype(name).kind
    if kind in "iu":
        info = np.iinfo(name)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=name)
    values = rng.standard_normal(shape) * 100
    if kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    out = np.asarray(values).astype(name)
    if kind == "f" and out.size >= 3:
        out.flat[:3] = [-0.0, np.inf, np.nan]
    return out


def numpy_dtype(name):
    return np.dtype(getattr(ml_dtypes, name) if name in ML_STORAGE else name)


def expected_values(ref, name):
    """``ref`` as the nested Python values dlpack_ref's tolist() gives."""
    if name == "float4_e2m1fn_x2":
        lo = (ref & 0xF).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        hi = (ref >> 4).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        pairs = np.empty(ref.shape, dtype=object)
        for idx in np.ndindex(ref.shape):
            pairs[idx] = (float(lo[idx]), float(hi[idx]))
        return pairs.tolist()
    if name in ML_STORAGE:
        return ref.astype(np.float64).tolist()
    return ref.tolist()


def assert_same_values(got, want, where=""):
    """Nested equality with NaN == NaN and -0.0 != 0.0."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_values(g, w, f"{where}[{i}]")
        return
    if isinstance(want, float):
        assert isinstance(got, float), f"{where}: {got!r} is not a float"
        if math.isnan(want):
            assert math.isnan(got), f"{where}: {got!r} != nan"
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want), f"{where}: {got!r} != {want!r}"
        return
    assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


def dr_from_reference(ref, name):
    """A dlpack_ref-allocated (256-byte aligned) Array holding ``ref``: NumPy
    dtypes copied in from a zero-copy import, the others encoded by
    dlpack_ref from their values."""
    a = dr.empty(ref.shape, dtype=name)
    a[...] = expected_values(ref, name) if name in ML_STORAGE else dr.from_dlpack(ref)
    return a


# --- layouts: name -> view, the same on the dlpack_ref Array and the reference --

LAYOUTS = ["contiguous", "0d", "size0", "sliced", "negative", "stepped", "transposed", "newaxis"]


def view_of(x, layout):
    """The view ``layout`` of a 2-d array ``x`` of any library (0-d: a
    separately allocated scalar, so that it is aligned like a fresh array)."""
    if layout == "contiguous":
        return x
    if layout == "size0":
        return x[2:2, ...]
    if layout == "sliced":
        return x[1:3, 2:5]
    if layout == "negative":
        return x[::-1, ::-2]
    if layout == "stepped":
        return x[::2, 1::3]
    if layout == "transposed":
        return x.T
    if layout == "newaxis":
        return x[None, 0, ...]
    raise AssertionError(layout)


def dr_and_reference(name, layout, seed=0):
    """(dlpack_ref view, reference NumPy view with the same elements)."""
    if layout == "0d":
        ref = reference(name, (), seed)
        return dr_from_reference(ref, name), ref
    ref = reference(name, SHAPE, seed)
    return view_of(dr_from_reference(ref, name), layout), view_of(ref, layout)


def exported_strides(x):
    """The strides, in elements, that ``x.__dlpack__`` hands a consumer; a
    NULL strides pointer means row-major."""
    info = read_capsule(x.__dlpack__(max_version=(1, 3)))
    if info["strides"] is not None:
        return tuple(info["strides"])
    return tuple(math.prod(info["shape"][i + 1:]) for i in range(info["ndim"]))


def check_shared(ptr_a, ptr_b, size):
    """Zero-copy means the same data pointer. DLPack gives no meaning to the
    pointer of an empty tensor (PyTorch substitutes its own), so size-0
    arrays are compared by shape and dtype only."""
    if size:
        assert ptr_a == ptr_b, f"not zero-copy: {ptr_a:#x} != {ptr_b:#x}"


# --- NumPy ----------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_numpy_from_dlpack_ref(name, layout):
    a, ref = dr_and_reference(name, layout)
    n = np.from_dlpack(a)
    assert n.dtype == np.dtype(name) and n.shape == a.shape == ref.shape
    check_shared(n.ctypes.data, a.data_ptr, a.size)
    if a.size:
        assert n.strides == tuple(s * n.itemsize for s in a.strides)
    assert_same_values(n.tolist(), expected_values(ref, name))
    assert_same_values(a.tolist(), expected_values(ref, name))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_dlpack_ref_from_numpy(name, layout):
    ref = reference(name, () if layout == "0d" else SHAPE)
    n = ref if layout == "0d" else view_of(ref, layout)
    a = dr.from_dlpack(n)
    assert a.dtype == dr.as_dtype(name) and a.shape == n.shape and not a.readonly
    check_shared(a.data_ptr, n.ctypes.data, n.size)
    if n.size:
        # The import keeps the strides the producer wrote (row-major when it
        # wrote NULL); those agree with NumPy's on every axis that addresses
        # elements. A size-1 axis addresses none, and NumPy versions export
        # different strides (or NULL) for it.
        assert a.strides == exported_strides(n)
        assert all(sa * n.itemsize == sn for sa, sn, extent in zip(a.strides, n.strides, n.shape) if extent != 1)
    assert_same_values(a.tolist(), expected_values(n, name))
    # Writes through the import land in NumPy's memory.
    if n.size and n.ndim:
        idx = (0,) * n.ndim
        a[idx] = 0
        assert n[idx] == 0


def test_numpy_read_only_both_ways():
    n = np.arange(6, dtype=np.int32)
    n.flags.writeable = False
    a = dr.from_dlpack(n)
    assert a.readonly and a.data_ptr == n.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1
    back = np.from_dlpack(a)
    assert not back.flags.writeable and back.ctypes.data == n.ctypes.data
    b = dr.asarray(b"\x01\x02\x03")
    nb = np.from_dlpack(b)
    assert not nb.flags.writeable and nb.ctypes.data == b.data_ptr


def test_numpy_from_dlpack_keeps_source_alive():
    a = dr.asarray(list(range(1000)), dtype="int64")
    n = np.from_dlpack(a)
    ptr = a.data_ptr
    del a
    assert n.ctypes.data == ptr and n[999] == 999


# --- ml_dtypes (NumPy arrays of ml_dtypes dtypes) -------------------------------

@pytest.mark.parametrize("name", ["bfloat16", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"] + FLOAT8)
def test_ml_dtypes_numpy_has_no_dlpack_or_buffer(name):
    """NumPy's __dlpack__ refuses ml_dtypes dtypes (BufferError) and so does
    its buffer protocol; dlpack_ref.asarray passes NumPy's BufferError on.
    If NumPy learns to export them, the export must be zero-copy and exact."""
    ml = np.zeros(4, dtype=getattr(ml_dtypes, name))
    try:
        cap = ml.__dlpack__(max_version=(1, 3))
    except BufferError as exc:
        with pytest.raises(BufferError) as info:
            dr.asarray(ml)
        assert str(info.value) == str(exc)
        with pytest.raises(ValueError, match="buffer"):
            memoryview(ml)
    else:
        a = dr.from_dlpack(cap)
        assert a.dtype == dr.as_dtype(name) and a.data_ptr == ml.ctypes.data


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn"])
def test_numpy_from_dlpack_refuses_ml_dtypes(name):
    """The reverse: NumPy cannot import a bfloat16/float8 DLPack tensor."""
    a = dr.zeros((3,), dtype=name)
    try:
        n = np.from_dlpack(a)
    except RuntimeError as exc:
        assert "Unsupported dtype" in str(exc)
    else:
        assert n.ctypes.data == a.data_ptr and n.dtype == np.dtype(getattr(ml_dtypes, name))


# --- PyTorch --------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def torch_dtype(torch, name):
    return getattr(torch, name)


def torch_from_reference(torch, ref, name):
    """A torch tensor (own memory) with the values of ``ref``; the ml_dtypes
    types go through their raw bytes."""
    if name in ML_STORAGE:
        raw = np.array(ref, copy=True).view(ML_STORAGE[name])
        t = torch.from_numpy(raw)
        return t.view(torch_dtype(torch, name))
    return torch.from_numpy(np.array(ref, copy=True))


def torch_values(torch, t, name):
    """A torch tensor as a reference NumPy array (ml_dtypes for its exotic
    types) sharing its memory."""
    if name in ML_STORAGE:
        storage = torch.uint16 if ML_STORAGE[name] is np.uint16 else torch.uint8
        raw = t.view(storage).numpy()
        return raw if name == "float4_e2m1fn_x2" else raw.view(getattr(ml_dtypes, name))
    return t.numpy()


def torch_layouts(layout):
    if layout == "negative":
        pytest.skip("torch 2.13 has no negative strides; torch.from_dlpack of one aborts the process")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_from_dlpack_ref(torch, name, layout):
    torch_layouts(layout)
    a, ref = dr_and_reference(name, layout)
    t = torch.from_dlpack(a)
    assert t.dtype == torch_dtype(torch, name) and tuple(t.shape) == a.shape
    check_shared(t.data_ptr(), a.data_ptr, a.size)
    if a.size:
        assert tuple(t.stride()) == a.strides
    assert_same_values(expected_values(torch_values(torch, t, name), name), expected_values(ref, name))
    assert_same_values(a.tolist(), expected_values(ref, name))


@pytest.mark.parametrize("layout", [lay for lay in LAYOUTS if lay != "negative"])
@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_dlpack_ref_from_torch(torch, name, layout):
    ref = reference(name, () if layout == "0d" else SHAPE)
    base = torch_from_reference(torch, ref, name)
    t = base if layout == "0d" else view_of(base, layout)
    a = dr.from_dlpack(t)
    assert a.dtype == dr.as_dtype(torch_dtype(torch, name)) and a.shape == tuple(t.shape)
    assert not a.readonly
    check_shared(a.data_ptr, t.data_ptr(), a.size)
    if a.size:
        assert a.strides == tuple(t.stride())
    assert_same_values(a.tolist(), expected_values(torch_values(torch, t, name), name))
    want = ref if layout == "0d" else view_of(ref, layout)
    assert_same_values(a.tolist(), expected_values(want, name))


def test_torch_float4_x2_is_lanes_2(torch):
    t = torch.tensor([0x21, 0xF5], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert dr.inspect(t)["dtype"] == (17, 4, 2)
    a = dr.from_dlpack(t)
    assert a.dtype is dr.float4_e2m1fn_x2 and a.shape == (2,) and a.nbytes == 2
    assert a.tolist() == [(0.5, 1.0), (3.0, -6.0)]
    assert a.data_ptr == t.data_ptr()
    # dlpack_ref builds the same bytes from the same lane values.
    b = dr.asarray(a.tolist(), dtype=dr.float4_e2m1fn_x2)
    back = torch.from_dlpack(b)
    assert back.data_ptr() == b.data_ptr and back.view(torch.uint8).tolist() == [0x21, 0xF5]


def test_torch_ignores_read_only(torch):
    """torch 2.13 imports a READ_ONLY tensor as writable; dlpack_ref still
    exports it zero-copy with the flag set (checked on the capsule)."""
    a = dr.asarray(bytes(range(4)))
    assert dr.inspect(a)["read_only"] is True
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr and t.tolist() == [0, 1, 2, 3]


def test_torch_to_ml_dtypes_zero_copy_chain(torch):
    """dlpack_ref -> torch -> byte view -> NumPy -> ml_dtypes array, all on
    the same memory: ml_dtypes decodes dlpack_ref's bytes to the same values."""
    ref = reference("float8_e4m3fn", (8,))
    a = dr_from_reference(ref, "float8_e4m3fn")
    ml = torch_values(torch, torch.from_dlpack(a), "float8_e4m3fn")
    assert ml.ctypes.data == a.data_ptr and ml.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert_same_values(a.tolist(), ml.astype(np.float64).tolist())


# --- JAX ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def jax_xfail_layout(exc, layout):
    if "trivial (compact) striding" in str(exc):
        pytest.xfail(f"JAX imports only compact layouts, not {layout!r}: {exc}")
    raise exc


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", JAX_DTYPES)
def test_jax_from_dlpack_ref(jax, name, layout):
    a, ref = dr_and_reference(name, layout)
    try:
        j = jax.numpy.from_dlpack(a)
    except Exception as exc:  # noqa: BLE001 - JaxRuntimeError is not public API
        jax_xfail_layout(exc, layout)
    assert j.dtype == numpy_dtype(name) and j.shape == a.shape
    check_shared(j.unsafe_buffer_pointer(), a.data_ptr, a.size)
    host = np.asarray(j)
    assert_same_values(expected_values(host, name), expected_values(ref, name))
    assert_same_values(a.tolist(), expected_values(ref, name))


@pytest.mark.parametrize("layout", ["contiguous", "0d", "size0", "transposed"])
@pytest.mark.parametrize("name", JAX_DTYPES + ["float4_e2m1fn"])
def test_dlpack_ref_from_jax(jax, name, layout):
    """JAX arrays are always compact (a transpose is a new array)."""
    ref = reference(name, () if layout == "0d" else SHAPE)
    j = jax.numpy.asarray(ref)
    if layout not in ("0d", "contiguous"):
        j = view_of(j, layout)
    a = dr.from_dlpack(j)
    assert a.dtype == dr.as_dtype(name) and a.shape == j.shape
    check_shared(a.data_ptr, j.unsafe_buffer_pointer(), a.size)
    want = ref if layout in ("0d", "contiguous") else view_of(ref, layout)
    assert_same_values(a.tolist(), expected_values(want, name))


def test_jax_float4_is_packed_lanes_1(jax):
    j = jax.numpy.array([0.5, 1, 1.5, 2, -6, 3], dtype=jax.numpy.float4_e2m1fn)
    info = dr.inspect(j)
    assert info["name"] == "dltensor" and info["dtype"] == (17, 4, 1)
    a = dr.from_dlpack(j)
    assert a.data_ptr == j.unsafe_buffer_pointer()
    assert not a.subbyte_padded and a.nbytes == 3
    assert a.tolist() == [0.5, 1.0, 1.5, 2.0, -6.0, 3.0]
    # JAX 0.10 imports no float4, its own export included; whenever it
    # does, the import must be exact.
    try:
        back = jax.numpy.from_dlpack(a)
    except Exception as exc:
        assert "default layout" in str(exc), exc
    else:
        assert back.astype(jax.numpy.float32).tolist() == [0.5, 1.0, 1.5, 2.0, -6.0, 3.0]


def test_jax_to_ml_dtypes_zero_copy_chain(jax):
    """dlpack_ref -> JAX -> numpy.asarray: an ml_dtypes array on our memory."""
    for name in ["bfloat16"] + FLOAT8:
        ref = reference(name, (16,))
        a = dr_from_reference(ref, name)
        ml = np.asarray(jax.numpy.from_dlpack(a))
        assert ml.dtype == np.dtype(getattr(ml_dtypes, name)) and ml.ctypes.data == a.data_ptr, name
        assert_same_values(a.tolist(), ml.astype(np.float64).tolist(), name)


def test_jax_cannot_take_read_only(jax):
    """JAX 0.10 asks for a legacy capsule, which cannot say read-only, so
    dlpack_ref refuses; a JAX that asks for a versioned one gets the data."""
    a = dr.asarray(bytes(8))
    try:
        j = jax.numpy.from_dlpack(a)
    except BufferError as exc:
        assert "read-only" in str(exc) and "legacy" in str(exc), exc
    else:
        assert j.tolist() == [0] * 8


def test_jax_needs_aligned_data(jax):
    """dlpack_ref allocates 256-byte aligned, so its own arrays go to JAX
    zero-copy; JAX 0.10 copies a view 8 bytes in, and then must refuse it
    under copy=False (a JAX that takes it in place must do so under copy=False)."""
    a = dr.zeros((32,), dtype="float64")
    assert jax.numpy.from_dlpack(a).unsafe_buffer_pointer() == a.data_ptr
    v = a[1:]
    if jax.numpy.from_dlpack(v).unsafe_buffer_pointer() != v.data_ptr:
        with pytest.raises(ValueError, match="copy"):
            jax.numpy.from_dlpack(v, copy=False)
    else:
        assert jax.numpy.from_dlpack(v, copy=False).unsafe_buffer_pointer() == v.data_ptr


# --- array-api-strict -----------------------------------------------------------

@pytest.fixture(scope="module")
def xp():
    return pytest.importorskip("array_api_strict")


def strict_pointer(x):
    # array-api-strict exposes no pointer; NumPy (which it wraps) reads it zero-copy.
    return np.from_dlpack(x).ctypes.data


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", STRICT_DTYPES)
def test_strict_from_dlpack_ref(xp, name, layout):
    a, ref = dr_and_reference(name, layout)
    x = xp.from_dlpack(a)
    assert x.dtype == getattr(xp, name) and x.shape == a.shape
    check_shared(strict_pointer(x), a.data_ptr, a.size)
    assert_same_values(np.from_dlpack(x).tolist(), expected_values(ref, name))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", STRICT_DTYPES)
def test_dlpack_ref_from_strict(xp, name, layout):
    ref = reference(name, () if layout == "0d" else SHAPE)
    base = xp.asarray(ref, copy=True)
    x = base if layout == "0d" else view_of(base, layout)
    a = dr.from_dlpack(x)
    assert a.dtype == dr.as_dtype(name) and a.shape == x.shape
    check_shared(a.data_ptr, strict_pointer(x), a.size)
    want = ref if layout == "0d" else view_of(ref, layout)
    assert_same_values(a.tolist(), expected_values(want, name))


# --- chains across libraries ----------------------------------------------------

def test_chain_numpy_torch_dlpack_ref_numpy(torch):
    n = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    t = torch.from_dlpack(n)
    a = dr.from_dlpack(t)
    back = np.from_dlpack(a)
    assert n.ctypes.data == t.data_ptr() == a.data_ptr == back.ctypes.data
    # Written through dlpack_ref: NumPy before 2.2 imports every tensor read-only.
    a[0, 0] = -1
    assert n[0, 0] == -1 and back[0, 0] == -1 and t[0, 0].item() == -1.0
