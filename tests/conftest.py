"""Fixtures shared by the test files (kept small: helpers belong to their tests)."""

import threading

import pytest

from dlpack_ref.testing import CapsuleFactory


class _FactoryPerThread:
    """A CapsuleFactory per thread behind one object. pytest-run-parallel
    runs a test in several threads that share its fixtures; each thread's
    counts and ``last_*`` must be its own capsules', as in a serial run."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __getattr__(self, name):
        own = getattr(self._local, "factory", None)
        if own is None:
            own = self._local.factory = CapsuleFactory()
        return getattr(own, name)


@pytest.fixture
def factory():
    """A fresh CapsuleFactory, so each test counts only its own deleter calls."""
    return _FactoryPerThread()
