"""How each library makes arrays, reads values and imports DLPack: the
adapters the CLI, the exchange matrix and the runner's workers use.
``subject(spec)`` builds a :class:`Subject` for a known library by name
(``numpy``, ``torch``, ...) or for any importable module through the generic
array-API adapter (``module`` or ``module:from_dlpack``), importing it on
first use."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import math
from typing import Callable

from dlpack_ref._dtypes import DTYPES

from .model import Consumer, CudaProducer, NotSupported, Producer, Subject

#: CLI name -> import name, in the order reports list them.
KNOWN = {
    "dlpack_ref": "dlpack_ref",
    "numpy": "numpy",
    "torch": "torch",
    "jax": "jax",
    "cupy": "cupy",
    "array_api_strict": "array_api_strict",
    "tvm_ffi": "tvm_ffi",
    "cuda.core": "cuda.core",
    "pyarrow": "pyarrow",
    "mlx": "mlx.core",
    "paddle": "paddle",
    "tensorflow": "tensorflow",
    "onnxruntime": "onnxruntime",
    "mpi4py": "mpi4py.MPI",
}
_DISTRIBUTIONS = {"tvm_ffi": "apache-tvm-ffi", "cuda.core": "cuda-core", "dlpack_ref": "dlpack-ref",
                  "array_api_strict": "array-api-strict", "paddle": "paddlepaddle"}


def installed() -> tuple[list[str], list[str]]:
    """Known libraries that can be imported here and those that cannot, both
    in report order (found without importing them)."""
    found, missing = [], []
    for name, module in KNOWN.items():
        try:
            present = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            present = False
        (found if present else missing).append(name)
    return found, missing


def version_of(spec: str) -> str:
    """The installed version of the library a spec names (imports it)."""
    module_name = KNOWN.get(spec, spec.partition(":")[0])
    top = module_name.split(".")[0]
    for dist in [_DISTRIBUTIONS.get(spec)] + importlib.metadata.packages_distributions().get(top, []):
        if dist:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                pass
    module = importlib.import_module(module_name)
    return str(getattr(module, "__version__", "?"))


@functools.lru_cache(maxsize=None)
def subject(spec: str) -> Subject:
    """The Subject a spec names: a known library (``numpy``, ...) or any
    importable module (``mylib``, ``mylib.sub:from_dlpack``).

    Raises
    ------
    ImportError
        When the module cannot be imported.
    LookupError
        When ``module:attr`` names nothing.
    """
    if spec in _BUILDERS:
        producer, consumer = _BUILDERS[spec]()
    else:
        producer, consumer = _hooked(spec) or _generic(spec)
    cuda = _CUDA_BUILDERS[spec]() if spec in _CUDA_BUILDERS else None
    return Subject(spec, version_of(spec), producer, consumer, spec, cuda)


def _arange_values(n: int, dtype: str) -> list:
    if dtype == "bool":
        return [bool(i % 2) for i in range(n)]
    if dtype.startswith(("float4_", "float6_")):  # not float64
        return [float(i % 4) / 2 for i in range(n)]
    if dtype.startswith("float8_e8m0"):
        return [float(2 ** (i % 4)) for i in range(n)]
    if dtype.startswith("complex"):
        return [complex(i, -i) for i in range(n)]
    return list(range(n))


def _nested(flat: list, shape: tuple):
    if not shape:
        return flat[0]
    step = len(flat) // shape[0]
    return [_nested(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _own_tolist(x):
    """The library's own reading, for libraries whose arrays have ``tolist``."""
    return x.tolist()


def _numpy_dtype(dtype: str):
    import numpy as np
    if dtype in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128"):
        return np.dtype(dtype)
    import ml_dtypes
    if not hasattr(ml_dtypes, dtype):
        raise NotSupported(f"neither NumPy nor ml_dtypes has {dtype}")
    return np.dtype(getattr(ml_dtypes, dtype))


def _numpy_array(dtype: str, shape: tuple, readonly: bool = False):
    import numpy as np
    n = math.prod(shape)
    a = np.array(_arange_values(n, dtype)).astype(_numpy_dtype(dtype)).reshape(shape)
    if readonly:
        a.flags.writeable = False
    return a


# --- dlpack_ref ----------------------------------------------------------------

def _dlpack_ref():
    import dlpack_ref as dr

    def factory(dtype, shape, readonly=False):
        n = math.prod(shape)
        if n == 0:
            a = dr.zeros(shape, dtype=dtype)
        else:
            a = dr.asarray(_nested(_arange_values(n, dtype), shape), dtype=dtype)
        if readonly:
            fmt = DTYPES[dtype].format
            if fmt is None or len(fmt) != 1:
                raise NotSupported(f"read-only dlpack_ref arrays of {dtype} are not made here")
            # a read-only buffer: asarray keeps it read-only, in place
            a = dr.asarray(memoryview(memoryview(a).tobytes()).cast(fmt, shape))
        return a

    def views():
        x = dr.asarray([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        m = dr.asarray([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": m.T}

    producer = Producer("dlpack_ref", factory, tolist=_own_tolist, views=views, unexportable=lambda: {})
    consumer = Consumer("dlpack_ref", dr.from_dlpack, tolist=_own_tolist, data_ptr=lambda r: r.data_ptr,
                        readonly=lambda r: r.readonly, cpu_device="cpu", spec="dlpack_ref")
    return producer, consumer


# --- NumPy -------------------------------------------------------------------------

def _numpy():
    import numpy as np

    def views():
        x = np.arange(6.0)
        z = np.array([1 + 2j, 3 - 4j, -5 + 6j])
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape(2, 3).T, "imaginary part z.imag": z.imag,
                "real part z.real": z.real}

    def unexportable():
        return {"big-endian int32": np.arange(3, dtype=">i4"),
                "datetime64": np.array([1], dtype="M8[s]"),
                "object": np.array([None, 1], dtype=object)}

    producer = Producer("numpy", _numpy_array, tolist=_own_tolist, views=views, scalar=lambda: np.float64(1.5),
                        unexportable=unexportable)
    consumer = Consumer("numpy", np.from_dlpack, tolist=_own_tolist, data_ptr=lambda r: r.__array_interface__["data"][0],
                        readonly=lambda r: not r.flags.writeable, cpu_device="cpu", spec="numpy")
    return producer, consumer


# --- PyTorch -----------------------------------------------------------------------

def _torch_dtype(dtype: str):
    import torch
    t = getattr(torch, dtype, None)
    if not isinstance(t, torch.dtype):
        raise NotSupported(f"torch has no {dtype}")
    return t


def _torch():
    import torch

    def factory(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("torch has no read-only tensors")
        t = _torch_dtype(dtype)
        n = math.prod(shape)
        if dtype == "float4_e2m1fn_x2":
            return torch.zeros(shape, dtype=torch.uint8).view(t)
        if dtype.startswith("float8"):
            return torch.tensor(_arange_values(n, dtype), dtype=torch.float32).to(t).reshape(shape)
        return torch.tensor(_arange_values(n, dtype)).to(t).reshape(shape)

    def tolist(x):
        return x.resolve_conj().resolve_neg().tolist()

    def views():
        x = torch.arange(6.0, dtype=torch.float64)
        z = torch.tensor([1 + 2j, 3 - 4j, -5 + 6j])
        return {"negated torch._neg_view(x)": torch._neg_view(x), "conjugated z.conj()": z.conj(),
                "conjugated, resolved z.conj().resolve_conj()": z.conj().resolve_conj(),
                "offset x[1:]": x[1:], "strided x[::2]": x[::2], "transposed m.T": x.reshape(2, 3).T,
                "imaginary part z.imag": z.imag}

    def unexportable():
        return {"meta tensor": torch.empty(3, device="meta"),
                "sparse COO tensor": torch.eye(2).to_sparse()}

    producer = Producer("torch", factory, tolist=tolist, views=views, unexportable=unexportable)
    consumer = Consumer("torch", torch.from_dlpack, tolist=tolist, data_ptr=lambda r: r.data_ptr(),
                        readonly=lambda r: False, cpu_device=torch.device("cpu"), spec="torch")
    return producer, consumer


# --- JAX ------------------------------------------------------------------------------

def _jax():
    import jax
    # float64 and complex128 arrays need x64 mode; without it JAX silently
    # makes float32 / complex64 ones. (This sets JAX's global config.)
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    def factory(dtype, shape, readonly=False):
        # JAX arrays are immutable: every one is read-only data.
        return jnp.asarray(_numpy_array(dtype, shape))

    def tolist(x):
        return np.asarray(x).tolist()

    def views():
        x = jnp.arange(6.0)
        return {"offset x[1:] (a copy in JAX)": x[1:], "reversed x[::-1] (a copy in JAX)": x[::-1],
                "transposed m.T (a copy in JAX)": x.reshape(2, 3).T}

    def unexportable():
        return {"int4 array": jnp.arange(4, dtype=jnp.int4)}

    def data_ptr(r):
        return r.unsafe_buffer_pointer()

    producer = Producer("jax", factory, tolist=tolist, views=views, unexportable=unexportable)
    consumer = Consumer("jax", jnp.from_dlpack, tolist=tolist, data_ptr=data_ptr, readonly=lambda r: True,
                        cpu_device=jax.devices("cpu")[0], spec="jax")
    return producer, consumer


# --- CuPy (GPU arrays; a CPU-only machine has none to make) ------------------------------

def _cupy():
    import cupy as cp

    def factory(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("cupy has no read-only arrays")
        return cp.asarray(_numpy_array(dtype, shape))

    producer = Producer("cupy", factory, tolist=lambda x: x.get().tolist())
    consumer = Consumer("cupy", cp.from_dlpack, tolist=lambda r: r.get().tolist(),
                        data_ptr=lambda r: r.data.ptr, readonly=lambda r: False, spec="cupy")
    return producer, consumer


# --- array-api-strict ----------------------------------------------------------------------

def _array_api_strict():
    import array_api_strict as xp
    import numpy as np

    def factory(dtype, shape, readonly=False):
        if not hasattr(xp, dtype):
            raise NotSupported(f"array-api-strict has no {dtype}")
        a = xp.asarray(_numpy_array(dtype, shape))
        if readonly:
            a._array.flags.writeable = False  # array-api-strict wraps a NumPy array
        return a

    def tolist(x):
        return np.asarray(x._array).tolist()

    def views():
        x = xp.arange(6.0)
        return {"offset x[1:]": x[1:], "strided x[::2]": x[::2],
                "transposed m.T": xp.reshape(x, (2, 3)).T}

    producer = Producer("array_api_strict", factory, tolist=tolist, views=views)
    consumer = Consumer("array_api_strict", xp.from_dlpack, tolist=tolist,
                        data_ptr=lambda r: r._array.__array_interface__["data"][0],
                        readonly=lambda r: not r._array.flags.writeable, cpu_device=xp.Device("CPU_DEVICE"),
                        spec="array_api_strict")
    return producer, consumer


# --- tvm-ffi --------------------------------------------------------------------------------

def _tvm_ffi():
    import numpy as np
    import tvm_ffi

    def factory(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("tvm_ffi.Tensor has no read-only tensors")
        return tvm_ffi.from_dlpack(_numpy_array(dtype, shape))

    def tolist(x):
        return np.from_dlpack(x).tolist()

    producer = Producer("tvm_ffi", factory, tolist=tolist, views=lambda: {})
    consumer = Consumer("tvm_ffi", tvm_ffi.from_dlpack, tolist=tolist, spec="tvm_ffi")
    return producer, consumer


# --- cuda.core --------------------------------------------------------------------------------

def cuda_core_from_dlpack(x, **kwargs):
    """cuda.core's DLPack import: StridedMemoryView.from_dlpack, without
    stream ordering (stream_ptr=-1; no stream exists for CPU data)."""
    from cuda.core.utils import StridedMemoryView
    if kwargs:
        raise TypeError(f"StridedMemoryView.from_dlpack has no keyword argument {next(iter(kwargs))!r}")
    return StridedMemoryView.from_dlpack(x, stream_ptr=-1)


def _cuda_core():
    import numpy as np

    def factory(dtype, shape, readonly=False):
        a = _numpy_array(dtype, shape, readonly)
        return cuda_core_from_dlpack(a)

    def tolist(v):
        return np.from_dlpack(v).tolist()

    producer = Producer("cuda.core", factory, tolist=tolist, views=lambda: {})
    consumer = Consumer("cuda.core", cuda_core_from_dlpack, tolist=tolist, data_ptr=lambda r: r.ptr,
                        readonly=lambda r: bool(r.readonly), spec="cuda.core")
    return producer, consumer


# --- pyarrow (1-D, immutable arrays; a producer only) ------------------------------------------

def _pyarrow():
    import numpy as np
    import pyarrow as pa

    def factory(dtype, shape, readonly=False):
        # Arrow arrays are immutable: every one is read-only data.
        if len(shape) != 1:
            raise NotSupported(f"pyarrow arrays are 1-D; no array of shape {shape}")
        try:
            arrow_type = pa.from_numpy_dtype(_numpy_dtype(dtype))
        except (NotImplementedError, pa.ArrowNotImplementedError, TypeError) as e:
            raise NotSupported(f"pyarrow has no {dtype}", e) from e
        return pa.array(np.asarray(_arange_values(shape[0], dtype)).astype(_numpy_dtype(dtype)), type=arrow_type)

    def views():
        x = pa.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        return {"offset x.slice(1)": x.slice(1), "offset x.slice(2, 3)": x.slice(2, 3)}

    def unexportable():
        return {"with nulls": pa.array([1.0, None]), "strings": pa.array(["a", "b"])}

    return Producer("pyarrow", factory, tolist=lambda x: x.to_pylist(), views=views,
                    unexportable=unexportable), None


# --- MLX (the CPU build, mlx[cpu]) ------------------------------------------------------------

def _mlx():
    import mlx.core as mx

    def dtype_of(dtype):
        t = getattr(mx, "bool_" if dtype == "bool" else dtype, None)
        if not isinstance(t, mx.Dtype):
            raise NotSupported(f"mlx has no {dtype}")
        return t

    def factory(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("mlx has no read-only arrays")
        return mx.array(_arange_values(math.prod(shape), dtype), dtype=dtype_of(dtype)).reshape(shape)

    def views():
        x = mx.arange(6, dtype=mx.float64)
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape(2, 3).T}

    producer = Producer("mlx", factory, tolist=_own_tolist, views=views, unexportable=lambda: {})
    consumer = Consumer("mlx", mx.from_dlpack, tolist=_own_tolist, readonly=lambda r: False, spec="mlx")
    return producer, consumer


# --- PaddlePaddle ------------------------------------------------------------------------------

def _paddle():
    import numpy as np
    import paddle

    def factory(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("paddle has no read-only tensors")
        values = np.array(_arange_values(math.prod(shape), dtype))
        source = "float32" if dtype.startswith(("float8", "bfloat16")) else dtype
        return paddle.to_tensor(values.astype(source), place=paddle.CPUPlace()).astype(dtype).reshape(list(shape))

    def tolist(x):
        # paddle's tolist of bfloat16 and float8 gives their bit patterns
        narrow = str(x.dtype).startswith(("paddle.bfloat16", "paddle.float8"))
        return (x.astype("float32") if narrow else x).tolist()

    def views():
        x = paddle.arange(6, dtype="float64")
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape([2, 3]).T}

    def unexportable():
        indices, values = paddle.to_tensor([[0, 1], [1, 0]]), paddle.to_tensor([1.0, 2.0])
        return {"tensor that requires grad": paddle.to_tensor([1.0], stop_gradient=False),
                "sparse COO tensor": paddle.sparse.sparse_coo_tensor(indices, values, [2, 2])}

    producer = Producer("paddle", factory, tolist=tolist, views=views, unexportable=unexportable)
    consumer = Consumer("paddle", paddle.from_dlpack, tolist=tolist, data_ptr=lambda r: r.data_ptr(),
                        readonly=lambda r: False, cpu_device="cpu", spec="paddle")
    return producer, consumer


# --- TensorFlow (tf.experimental.dlpack: legacy capsules only) ----------------------------------

def _tensorflow():
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # no start-up banner in every worker's output
    import tensorflow as tf

    def factory(dtype, shape, readonly=False):
        # TensorFlow tensors are immutable: every one is read-only data.
        t = getattr(tf, dtype, None)
        if not isinstance(t, tf.DType):
            raise NotSupported(f"tensorflow has no {dtype}")
        n = math.prod(shape)
        source = tf.float32 if dtype == "bfloat16" else t
        return tf.reshape(tf.cast(tf.constant(_arange_values(n, dtype), dtype=source), t), shape)

    def tolist(x):
        return x.numpy().tolist()

    def views():
        x = tf.range(6, dtype=tf.float64)
        return {"offset x[1:] (a copy in TensorFlow)": x[1:], "reversed x[::-1] (a copy in TensorFlow)": x[::-1],
                "transposed tf.transpose(m) (a copy in TensorFlow)": tf.transpose(tf.reshape(x, (2, 3)))}

    def unexportable():
        return {"string tensor": tf.constant(["a", "b"])}

    producer = Producer("tensorflow", factory, tolist=tolist, views=views, unexportable=unexportable)
    consumer = Consumer("tensorflow", tf.experimental.dlpack.from_dlpack, tolist=tolist, readonly=lambda r: True,
                        spec="tensorflow", capsule_request={})
    return producer, consumer


# --- ONNX Runtime (OrtValue: a pre-1.0 producer and consumer) -----------------------------------

def _onnxruntime():
    import onnxruntime as ort

    def factory(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("onnxruntime has no read-only OrtValues")
        try:
            return ort.OrtValue.ortvalue_from_numpy(_numpy_array(dtype, shape))
        except RuntimeError:
            pass  # a type NumPy has only through ml_dtypes: ORT's own DLPack import makes it
        import dlpack_ref as dr
        return ort.OrtValue.from_dlpack(dr.zeros(shape, dtype=dtype))

    producer = Producer("onnxruntime", factory, tolist=lambda v: v.numpy().tolist(), views=lambda: {},
                        unexportable=lambda: {})
    consumer = Consumer("onnxruntime", ort.OrtValue.from_dlpack, tolist=lambda v: v.numpy().tolist(),
                        data_ptr=lambda v: v.data_ptr(), spec="onnxruntime")
    return producer, consumer


# --- mpi4py (a consumer: message buffers from __dlpack__) ---------------------------------------

def _mpi4py():
    from mpi4py import MPI

    # MPI.buffer(x) imports x's DLPack export as a byte buffer (as every
    # message call does): no shape, no dtype, so its results are compared
    # as bytes; it has no copy or device keywords.
    return None, Consumer("mpi4py", MPI.buffer, tolist=lambda b: b.tobytes(), data_ptr=lambda b: b.address,
                          readonly=lambda b: b.readonly, spec="mpi4py", shapeless=True)


# --- CUDA arrays (the cuda.* checks) ----------------------------------------------------------
# Each touches CUDA only when a check asks for an array; a library that cannot
# make one (no GPU, a CPU build) raises and the check says "not supported".

_DLPACK_REF_DEVICES = {"cuda": "cuda:0", "managed": "cuda_managed:0", "pinned": "cpu_pinned"}


def _dlpack_ref_cuda():
    import dlpack_ref as dr

    def factory(kind, values):
        return dr.asarray(values, device=_DLPACK_REF_DEVICES[kind])

    def write(kind, values, stream):
        return dr.asarray(values).to_device(_DLPACK_REF_DEVICES[kind], stream=stream)

    return CudaProducer("dlpack_ref", factory, write)


def _cupy_cuda():
    import cupy as cp

    def factory(kind, values):
        if kind == "pinned":
            raise NotSupported("CuPy has no pinned ndarray (its pinned allocations are NumPy arrays)")
        if kind == "managed":
            with cp.cuda.using_allocator(cp.cuda.malloc_managed):
                a = cp.asarray(values)
        else:
            a = cp.asarray(values)
        cp.cuda.get_current_stream().synchronize()
        return a

    def write(kind, values, stream):
        if kind != "cuda":
            raise NotSupported(f"the CuPy adapter writes only device memory on a stream, not {kind}")
        s = cp.cuda.ExternalStream(stream)
        with s:
            a = cp.empty(values.shape, dtype=values.dtype)
            a.set(values, stream=s)
        return a

    return CudaProducer("cupy", factory, write, export_scope=cp.cuda.ExternalStream)


def _torch_cuda():
    import torch

    def usable(kind):
        if not torch.cuda.is_available():
            raise NotSupported("torch has no CUDA device here (a CPU build, or no GPU)")
        if kind == "managed":
            raise NotSupported("PyTorch does not allocate tensors in managed memory")

    def factory(kind, values):
        usable(kind)
        t = torch.from_numpy(values.copy())
        out = t.pin_memory() if kind == "pinned" else t.to("cuda:0")
        torch.cuda.synchronize()
        return out

    def write(kind, values, stream):
        usable(kind)
        if kind != "cuda":
            raise NotSupported(f"the PyTorch adapter writes only device memory on a stream, not {kind}")
        src = torch.from_numpy(values.copy()).pin_memory()
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            return src.to("cuda:0", non_blocking=True)

    def export_scope(stream):
        return torch.cuda.stream(torch.cuda.ExternalStream(stream))

    return CudaProducer("torch", factory, write, export_scope)


def _jax_cuda():
    import jax

    def factory(kind, values):
        if kind != "cuda":
            raise NotSupported(f"JAX does not allocate arrays in {kind} memory")
        try:
            gpu = jax.devices("gpu")[0]
        except RuntimeError as e:
            raise NotSupported("JAX has no GPU backend here", e) from e
        return jax.device_put(values, gpu).block_until_ready()

    # No write: JAX enqueues its work on streams of its own that it does not expose.
    return CudaProducer("jax", factory)


_CUDA_BUILDERS: dict[str, Callable] = {
    "dlpack_ref": _dlpack_ref_cuda, "cupy": _cupy_cuda, "torch": _torch_cuda, "jax": _jax_cuda,
}


# --- any library, through the array API ---------------------------------------------------------

#: The factory hook: a module that defines this (a callable returning a
#: ``(Producer | None, Consumer | None)`` pair) is checked through it, so a
#: library that is no array-API namespace (an adopter of the vendored header,
#: a test double) says itself how arrays are made and read:
#: ``--library mymodule`` (docs/conformance.md, "Checking any library").
HOOK = "__dlpack_conformance__"


def _hooked(spec: str):
    """The pair the factory hook of module ``spec`` gives, or None when
    ``spec`` is ``module:attr`` or its module has no hook."""
    if ":" in spec:
        return None
    hook = getattr(importlib.import_module(spec), HOOK, None)
    if hook is None:
        return None
    producer, consumer = hook()
    return producer, consumer


def _generic(spec: str):
    """Producer and Consumer of any module, from the array API alone:
    ``asarray``, ``reshape`` and the dtype attributes make arrays; values are
    read element by element (no ``tolist``) and, for the consumer's results,
    through DLPack."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    from_dlpack = module
    for part in (attr or "from_dlpack").split("."):
        from_dlpack = getattr(from_dlpack, part, None)
    if attr and from_dlpack is None:
        raise LookupError(f"{module_name} has no attribute {attr!r}")
    asarray = getattr(module, "asarray", None)
    producer = None
    if asarray is not None and hasattr(module, "reshape"):
        def factory(dtype, shape, readonly=False):
            if readonly:
                raise NotSupported("the array API has no read-only arrays")
            dt = getattr(module, dtype, None)
            if dt is None:
                raise NotSupported(f"{module_name} has no {dtype}")
            return module.reshape(asarray(_arange_values(math.prod(shape), dtype), dtype=dt), shape)

        def views():
            x = asarray([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], dtype=getattr(module, "float64"))
            return {"offset x[1:]": x[1:], "strided x[::2]": x[::2], "reversed x[::-1]": x[::-1],
                    "transposed m.T": module.reshape(x, (2, 3)).T}

        producer = Producer(spec, factory, views=views)
    consumer = None
    if callable(from_dlpack):
        cpu = getattr(asarray([0]), "device", None) if asarray is not None else None
        consumer = Consumer(spec, from_dlpack, cpu_device=cpu, spec=spec)
    return producer, consumer


_BUILDERS: dict[str, Callable] = {
    "dlpack_ref": _dlpack_ref, "numpy": _numpy, "torch": _torch, "jax": _jax, "cupy": _cupy,
    "array_api_strict": _array_api_strict, "tvm_ffi": _tvm_ffi, "cuda.core": _cuda_core, "pyarrow": _pyarrow,
    "mlx": _mlx, "paddle": _paddle, "tensorflow": _tensorflow, "onnxruntime": _onnxruntime, "mpi4py": _mpi4py,
}
