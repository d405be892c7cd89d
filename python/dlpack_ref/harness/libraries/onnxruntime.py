"""ONNX Runtime: ``OrtValue`` (a pre-1.0 producer and consumer), made from
NumPy arrays, or through its own DLPack import for the types NumPy has
only through ml_dtypes."""

from __future__ import annotations

from ..subject import Consumer, NotSupported, Producer
from ._common import Known, numpy_array

KNOWN = Known("onnxruntime", module="onnxruntime", distribution="onnxruntime", order=12,
              lane="ecosystem", requirements=("onnxruntime",))


def producer():
    import onnxruntime as ort

    def make(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("onnxruntime has no read-only OrtValues")
        try:
            return ort.OrtValue.ortvalue_from_numpy(numpy_array(dtype, shape))
        except RuntimeError:
            pass  # a type NumPy has only through ml_dtypes: ORT's own DLPack import makes it
        import dlpack_ref as dr
        return ort.OrtValue.from_dlpack(dr.zeros(shape, dtype=dtype))

    return Producer("onnxruntime", make, tolist=lambda v: v.numpy().tolist(), views=lambda: {},
                    unexportable=lambda: {})


def consumer():
    import onnxruntime as ort

    return Consumer("onnxruntime", ort.OrtValue.from_dlpack, tolist=lambda v: v.numpy().tolist(),
                    data_ptr=lambda v: v.data_ptr(), spec="onnxruntime")
