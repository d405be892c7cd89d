"""TensorFlow: immutable tensors (every one is read-only data), views that
are copies, string tensors DLPack cannot carry; its importer
``tf.experimental.dlpack.from_dlpack`` takes legacy capsules only."""

from __future__ import annotations

import math

from ..subject import Consumer, NotSupported, Producer
from ._common import arange_values, Known

KNOWN = Known("tensorflow", module="tensorflow", distribution="tensorflow", order=11,
              lane="ecosystem", requirements=("tensorflow-cpu",))


def producer():
    _quiet_start()
    import tensorflow as tf

    def make(dtype, shape, readonly=False):
        # TensorFlow tensors are immutable: every one is read-only data.
        t = getattr(tf, dtype, None)
        if not isinstance(t, tf.DType):
            raise NotSupported(f"tensorflow has no {dtype}")
        source = tf.float32 if dtype == "bfloat16" else t
        return tf.reshape(tf.cast(tf.constant(arange_values(math.prod(shape), dtype), dtype=source), t), shape)

    def views():
        x = tf.range(6, dtype=tf.float64)
        return {"offset x[1:] (a copy in TensorFlow)": x[1:], "reversed x[::-1] (a copy in TensorFlow)": x[::-1],
                "transposed tf.transpose(m) (a copy in TensorFlow)": tf.transpose(tf.reshape(x, (2, 3)))}

    def unexportable():
        return {"string tensor": tf.constant(["a", "b"])}

    return Producer("tensorflow", make, tolist=_tolist, views=views, unexportable=unexportable)


def consumer():
    _quiet_start()
    import tensorflow as tf

    return Consumer("tensorflow", tf.experimental.dlpack.from_dlpack, tolist=_tolist, readonly=lambda r: True,
                    spec="tensorflow", capsule_request={})


def _quiet_start():
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # no start-up banner in every worker's output


def _tolist(x):
    return x.numpy().tolist()
