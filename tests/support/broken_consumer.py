"""Consumers broken on purpose, for the checker's own tests.

The tests of the checker, its CLI and its pytest plugin need libraries that
fail known rules. Another library's failures are no such thing: NumPy 2.5
fixed five that 2.4 had. These consumers are dlpack_ref.from_dlpack with
exactly two faults each, so the tests can pin the rules they break:

- ``from_dlpack`` drops ``copy=True`` (``consumer.copy_true`` breaks) and takes
  a capsule whose shape is NULL as an empty array (``consumer.shape_null``);
- ``crashing_from_dlpack`` is the same but kills its process (SIGSEGV) on
  the NULL shape instead, as a consumer that dereferences it would.

``asarray`` is here so the generic adapter finds a device; the module has
no ``reshape``, so it is checked as a consumer only.
"""

import os
import signal

import dlpack_ref

asarray = dlpack_ref.asarray


def _null_shape(error: Exception) -> bool:
    return "DLTensor.shape is NULL" in str(error)


def _import(x, device, copy):
    return dlpack_ref.from_dlpack(x, device=device, copy=None if copy else copy)


def from_dlpack(x, /, *, device=None, copy=None):
    try:
        return _import(x, device, copy)
    except BufferError as e:
        if _null_shape(e):
            return dlpack_ref.asarray([])
        raise


def crashing_from_dlpack(x, /, *, device=None, copy=None):
    try:
        return _import(x, device, copy)
    except BufferError as e:
        if _null_shape(e):
            os.kill(os.getpid(), signal.SIGSEGV)
        raise
