"""A consumer whose ``from_dlpack`` kills its process (SIGSEGV) on every
call: ``dlpack-ref bench`` must report its pairs as crashed, from the
pre-flight's child processes, and time everything else
(tests/test_bench.py). Named as ``--library support.crashing_import``."""

import os
import signal

from dlpack_ref.conformance import Consumer


def from_dlpack(x, /, *, device=None, copy=None):
    os.kill(os.getpid(), signal.SIGSEGV)


def __dlpack_conformance__():
    return None, Consumer("crashing_import", from_dlpack)
