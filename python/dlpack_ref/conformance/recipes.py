"""Each known library's arrays, views and ``from_dlpack`` as Python source:
what a reproduction (:mod:`.reproduce`) pastes so that it runs with that
library alone. The adapters (:mod:`.adapters`) make the same objects at run
time; ``tests/test_conformance_ecosystem.py`` runs every reproduction of a
failure and confirms it shows what the checker saw, which keeps the two in
step.

A :class:`Recipe` is source text only: building one imports nothing."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from .adapters import _arange_values, _nested

#: dtype names that NumPy has without ml_dtypes.
_NUMPY_DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float16", "float32", "float64", "complex64", "complex128"])


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How a library's objects are written in a reproduction.

    ``imports``: the import lines. ``array(dtype, shape)``: an expression of
    an array holding ``0, 1, 2, ...`` (as the adapter's factory makes it), or
    None when the recipe cannot write that dtype or shape. ``readonly``:
    statements that make the array ``x`` read-only ("" when every array is,
    None when the library has none). ``own_values``: the library's own
    reading of an array ``{}``. ``views`` / ``unexportable``: statements
    ending in ``views = {...}`` / ``unexportable = {...}``, labelled as the
    adapter labels them. ``from_dlpack``: the consumer callable;
    ``cpu_device``: what its ``device=`` takes for the CPU (None: no such
    keyword). ``capsule_request``: the keywords its users export with when
    it takes a capsule (None: it takes the object). ``result_pointer``,
    ``result_readonly``, ``result_values``: readings of a result ``{}``
    (None: through the result's own ``__dlpack__``). ``shapeless``: results
    are byte buffers, read as float64.
    """

    imports: str
    array: Callable[[str, tuple], str | None] | None = None
    readonly: str | None = None
    own_values: str = "{}.tolist()"
    views: str | None = None
    unexportable: str | None = None
    from_dlpack: str | None = None
    cpu_device: str | None = None
    capsule_request: dict | None = None
    result_pointer: str | None = None
    result_readonly: str | None = None
    result_values: str | None = None
    shapeless: bool = False


def values_source(dtype: str, shape: tuple) -> str:
    """The nested values the adapters put in an array, as source."""
    values = _arange_values(math.prod(shape), dtype)
    return repr(_nested(values, shape) if shape else values[0])


def _flat(dtype: str, shape: tuple) -> str:
    return repr(_arange_values(math.prod(shape), dtype))


def _numpy_like(module: str, dtypes=_NUMPY_DTYPES) -> Callable[[str, tuple], str | None]:
    def array(dtype, shape):
        if dtype not in dtypes:
            return None
        return f'{module}.array({_flat(dtype, shape)}, dtype="{dtype}").reshape({shape})'
    return array


def _numpy_array(dtype, shape):
    return _numpy_like("np")(dtype, shape)


def _from_numpy(wrap: str) -> Callable[[str, tuple], str | None]:
    """Arrays made from NumPy's: ``wrap`` formatted with a NumPy array's source."""
    def array(dtype, shape):
        source = _numpy_array(dtype, shape)
        return None if source is None else wrap.format(source)
    return array


_NUMPY = "import numpy as np"

RECIPES: dict[str, Recipe] = {
    "dlpack_ref": Recipe(
        "import dlpack_ref as dr",
        lambda dtype, shape: f'dr.asarray({values_source(dtype, shape)}, dtype="{dtype}")',
        from_dlpack="dr.from_dlpack", cpu_device='"cpu"', result_pointer="{}.data_ptr", result_readonly="{}.readonly"),
    "numpy": Recipe(
        _NUMPY, _numpy_array, readonly="x.flags.writeable = False",
        views=("x = np.arange(6.0)\nz = np.array([1 + 2j, 3 - 4j, -5 + 6j])\n"
               'views = {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],\n'
               '         "transposed m.T": x.reshape(2, 3).T, "imaginary part z.imag": z.imag,\n'
               '         "real part z.real": z.real}'),
        unexportable=('unexportable = {"big-endian int32": np.arange(3, dtype=">i4"),\n'
                      '                "datetime64": np.array([1], dtype="M8[s]"),\n'
                      '                "object": np.array([None, 1], dtype=object)}'),
        from_dlpack="np.from_dlpack", cpu_device='"cpu"', result_pointer='{}.__array_interface__["data"][0]',
        result_readonly="not {}.flags.writeable", result_values="{}.tolist()"),
    "torch": Recipe(
        "import torch",
        lambda dtype, shape: (f"torch.tensor({_flat(dtype, shape)}, dtype=torch.float64).to(torch.{dtype})"
                              f".reshape({shape})"),
        own_values="{}.resolve_conj().resolve_neg().tolist()",
        views=("x = torch.arange(6.0, dtype=torch.float64)\nz = torch.tensor([1 + 2j, 3 - 4j, -5 + 6j])\n"
               'views = {"negated torch._neg_view(x)": torch._neg_view(x), "conjugated z.conj()": z.conj(),\n'
               '         "conjugated, resolved z.conj().resolve_conj()": z.conj().resolve_conj(),\n'
               '         "offset x[1:]": x[1:], "strided x[::2]": x[::2], "transposed m.T": x.reshape(2, 3).T,\n'
               '         "imaginary part z.imag": z.imag}'),
        unexportable=('unexportable = {"meta tensor": torch.empty(3, device="meta"),\n'
                      '                "sparse COO tensor": torch.eye(2).to_sparse()}'),
        from_dlpack="torch.from_dlpack", cpu_device='torch.device("cpu")', result_pointer="{}.data_ptr()", result_readonly="False",
        result_values="{}.tolist()"),
    "jax": Recipe(
        "import jax\njax.config.update(\"jax_enable_x64\", True)\nimport jax.numpy as jnp",
        _numpy_like("jnp"), readonly="",
        unexportable='unexportable = {"int4 array": jnp.arange(4, dtype=jnp.int4)}',
        from_dlpack="jnp.from_dlpack", cpu_device='jax.devices("cpu")[0]', result_pointer="{}.unsafe_buffer_pointer()", result_readonly="True",
        result_values="{}.tolist()"),
    "array_api_strict": Recipe(
        "import array_api_strict as xp",
        lambda dtype, shape: (f"xp.reshape(xp.asarray({_flat(dtype, shape)}, dtype=xp.{dtype}), {shape})"
                              if dtype in _NUMPY_DTYPES else None),
        readonly="x._array.flags.writeable = False  # array-api-strict wraps a NumPy array",
        own_values="{}._array.tolist()", from_dlpack="xp.from_dlpack", cpu_device='xp.Device("CPU_DEVICE")',
        result_pointer='{}._array.__array_interface__["data"][0]', result_readonly="not {}._array.flags.writeable",
        result_values="{}._array.tolist()"),
    "tvm_ffi": Recipe(
        f"{_NUMPY}\nimport tvm_ffi",
        _from_numpy("tvm_ffi.from_dlpack({})"),
        own_values="np.from_dlpack({}).tolist()", from_dlpack="tvm_ffi.from_dlpack",
        result_values="np.from_dlpack({}).tolist()"),
    "cuda.core": Recipe(
        f"{_NUMPY}\nfrom cuda.core.utils import StridedMemoryView",
        _from_numpy("StridedMemoryView.from_dlpack({}, stream_ptr=-1)"),
        readonly=("a = np.from_dlpack(x).copy()\na.flags.writeable = False\n"
                  "x = StridedMemoryView.from_dlpack(a, stream_ptr=-1)"),
        own_values="np.from_dlpack({}).tolist()",
        from_dlpack="lambda x: StridedMemoryView.from_dlpack(x, stream_ptr=-1)",
        result_pointer="{}.ptr", result_readonly="{}.readonly", result_values="np.from_dlpack({}).tolist()"),
    "pyarrow": Recipe(
        "import pyarrow as pa",
        lambda dtype, shape: (f"pa.array({_flat(dtype, shape)}, type=pa.{'bool_' if dtype == 'bool' else dtype}())"
                              if len(shape) == 1 and dtype in _NUMPY_DTYPES - {"complex64", "complex128"} else None),
        own_values="{}.to_pylist()",
        views=('x = pa.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])\n'
               'views = {"offset x.slice(1)": x.slice(1), "offset x.slice(2, 3)": x.slice(2, 3)}'),
        unexportable='unexportable = {"with nulls": pa.array([1.0, None]), "strings": pa.array(["a", "b"])}'),
    "mlx": Recipe(
        "import mlx.core as mx",
        lambda dtype, shape: (f"mx.array({_flat(dtype, shape)}, dtype=mx.{'bool_' if dtype == 'bool' else dtype})"
                              f".reshape({shape})"),
        views=('x = mx.arange(6, dtype=mx.float64)\n'
               'views = {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],\n'
               '         "transposed m.T": x.reshape(2, 3).T}'),
        from_dlpack="mx.from_dlpack", result_readonly="False", result_values="{}.tolist()"),
    "paddle": Recipe(
        "import paddle",
        lambda dtype, shape: (f'paddle.to_tensor({_flat(dtype, shape)}, dtype="float64", place="cpu")'
                              f'.astype("{dtype}").reshape({list(shape)})'),
        views=('x = paddle.arange(6, dtype="float64")\n'
               'views = {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],\n'
               '         "transposed m.T": x.reshape([2, 3]).T}'),
        unexportable=('unexportable = {"tensor that requires grad": paddle.to_tensor([1.0], stop_gradient=False),\n'
                      '                "sparse COO tensor": paddle.sparse.sparse_coo_tensor(\n'
                      '                    paddle.to_tensor([[0, 1], [1, 0]]), paddle.to_tensor([1.0, 2.0]), [2, 2])}'),
        from_dlpack="paddle.from_dlpack", cpu_device='"cpu"', result_pointer="{}.data_ptr()", result_readonly="False",
        result_values="{}.tolist()"),
    "tensorflow": Recipe(
        "import os\nos.environ.setdefault(\"TF_CPP_MIN_LOG_LEVEL\", \"3\")\nimport tensorflow as tf",
        lambda dtype, shape: (f"tf.reshape(tf.constant({_flat(dtype, shape)}, dtype=tf.{dtype}), {shape})"
                              if dtype != "bfloat16" and dtype in _NUMPY_DTYPES else None),
        readonly="", own_values="{}.numpy().tolist()",
        views=('x = tf.range(6, dtype=tf.float64)\n'
               'views = {"offset x[1:] (a copy in TensorFlow)": x[1:],\n'
               '         "reversed x[::-1] (a copy in TensorFlow)": x[::-1],\n'
               '         "transposed tf.transpose(m) (a copy in TensorFlow)": tf.transpose(tf.reshape(x, (2, 3)))}'),
        unexportable='unexportable = {"string tensor": tf.constant(["a", "b"])}',
        from_dlpack="tf.experimental.dlpack.from_dlpack", capsule_request={}, result_readonly="True",
        result_values="{}.numpy().tolist()"),
    "onnxruntime": Recipe(
        f"{_NUMPY}\nimport onnxruntime as ort",
        lambda dtype, shape: (None if dtype.startswith("complex")
                              else _from_numpy("ort.OrtValue.ortvalue_from_numpy({})")(dtype, shape)),
        own_values="{}.numpy().tolist()", from_dlpack="ort.OrtValue.from_dlpack",
        result_pointer="{}.data_ptr()", result_values="{}.numpy().tolist()"),
    "mpi4py": Recipe(
        "from mpi4py import MPI", from_dlpack="MPI.buffer", result_pointer="{}.address",
        result_readonly="{}.readonly", result_values='memoryview({}).cast("d").tolist()', shapeless=True),
}


def recipe_of(spec: str) -> Recipe | None:
    """The recipe of a library by spec: a known name, or any module through
    the array API (``module`` / ``module:from_dlpack``). None for a module
    with a factory hook, whose arrays only its hook knows."""
    if spec in RECIPES:
        return RECIPES[spec]
    import importlib
    module_name, _, attr = spec.partition(":")
    try:
        from .adapters import HOOK
        if not attr and hasattr(importlib.import_module(module_name), HOOK):
            return None
    except ImportError:
        return None
    return Recipe(
        f"import {module_name} as xp",
        lambda dtype, shape: f"xp.reshape(xp.asarray({_flat(dtype, shape)}, dtype=xp.{dtype}), {shape})",
        own_values="{}.tolist()", from_dlpack=f"xp.{attr or 'from_dlpack'}")
