"""JAX: immutable arrays (every one is read-only data; x64 mode on, so that
float64 is float64), views that are copies, int4 arrays DLPack cannot
carry; ``jnp.from_dlpack``; on a GPU, device arrays."""

from __future__ import annotations

from ..subject import Consumer, CudaProducer, NotSupported, Producer
from ._common import Known, numpy_array

KNOWN = Known("jax", module="jax", distribution="jax", order=3)


def producer():
    _x64_mode()
    import jax.numpy as jnp

    def make(dtype, shape, readonly=False):
        # JAX arrays are immutable: every one is read-only data.
        return jnp.asarray(numpy_array(dtype, shape))

    def views():
        x = jnp.arange(6.0)
        return {"offset x[1:] (a copy in JAX)": x[1:], "reversed x[::-1] (a copy in JAX)": x[::-1],
                "transposed m.T (a copy in JAX)": x.reshape(2, 3).T}

    def unexportable():
        return {"int4 array": jnp.arange(4, dtype=jnp.int4)}

    return Producer("jax", make, tolist=_tolist, views=views, unexportable=unexportable)


def consumer():
    _x64_mode()
    import jax
    import jax.numpy as jnp

    return Consumer("jax", jnp.from_dlpack, tolist=_tolist, data_ptr=lambda r: r.unsafe_buffer_pointer(),
                    readonly=lambda r: True, cpu_device=jax.devices("cpu")[0], spec="jax")


def _x64_mode():
    import jax
    # float64 and complex128 arrays need x64 mode; without it JAX silently
    # makes float32 / complex64 ones. (This sets JAX's global config.)
    jax.config.update("jax_enable_x64", True)


def _tolist(x):
    import numpy as np
    return np.asarray(x).tolist()


def cuda():
    import jax

    def make(kind, values):
        if kind != "cuda":
            raise NotSupported(f"JAX does not allocate arrays in {kind} memory")
        try:
            gpu = jax.devices("gpu")[0]
        except RuntimeError as e:
            raise NotSupported("JAX has no GPU backend here", e) from e
        return jax.device_put(values, gpu).block_until_ready()

    # No write: JAX enqueues its work on streams of its own that it does not expose.
    return CudaProducer("jax", make)
