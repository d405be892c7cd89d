"""A consumer whose copy returns before it is made, as a library that
dispatches its work and finishes it later (JAX) does:
``from_dlpack(x, copy=True)`` returns at once a result whose data a thread
copies after ``DELAY_S``; the result's ``__dlpack__`` waits for that copy, as
such a library's export waits for its pending work. Its copy takes longer
than memcpy of the same bytes, and ``dlpack-ref bench`` must not report it
faster (tests/test_bench.py). Named on the command line as ``--library
support.deferred_copy`` (the factory hook)."""

import threading
import time

import numpy as np

from dlpack_ref.conformance import Consumer

#: How long the copy waits before it starts: far longer than memcpy of 64 MiB,
#: even on a loaded machine.
DELAY_S = 0.25


class Pending:
    """The result of an import: the source's memory, or a copy still to be made."""

    def __init__(self, source, copy):
        self._done = threading.Event()
        if copy:
            self._data = np.empty_like(source)
            threading.Thread(target=self._copy, args=(source,), daemon=True).start()
        else:
            self._data = source
            self._done.set()

    def _copy(self, source):
        time.sleep(DELAY_S)
        np.copyto(self._data, source)
        self._done.set()

    def __dlpack__(self, **kwargs):
        self._done.wait()
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()


def from_dlpack(x, copy=None):
    return Pending(np.from_dlpack(x), copy)


def __dlpack_conformance__():
    return None, Consumer("deferred_copy", from_dlpack)
