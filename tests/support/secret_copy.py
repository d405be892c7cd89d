"""A producer whose ``__dlpack__`` exports a fresh copy of its data on every
call and says nothing of it (no IS_COPIED flag), as a library that copies
behind its users' backs would: ``dlpack-ref bench`` must report every
exchange of its arrays as a copy (tests/test_bench.py). Named on the command
line as ``--library support.secret_copy`` (the factory hook)."""

import numpy as np

from dlpack_ref.conformance import Producer


class SecretlyCopying:
    """An array of NumPy data that exports a copy of it."""

    def __init__(self, data):
        self._data = data

    def __dlpack__(self, **kwargs):
        return np.array(self._data, copy=True).__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()


def __dlpack_conformance__():
    def factory(dtype, shape, readonly=False):
        return SecretlyCopying(np.zeros(shape, dtype=dtype))
    return Producer("secret_copy", factory), None
