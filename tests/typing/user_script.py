import numpy as np
import dlpack_ref as dr

a: dr.Array = dr.asarray([1.0, 2.0], dtype=dr.float32)
shape: tuple[int, ...] = a.shape
b: dr.Array = dr.from_dlpack(np.arange(3))
dt: dr.DType = dr.float32
n: int = b.ndim + len(shape) + dt.bits
reveal_type(dr.float32)
reveal_type(dr.from_dlpack)
reveal_type(a.shape)
