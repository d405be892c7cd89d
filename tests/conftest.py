"""Fixtures shared by the test files (kept small: helpers belong to their tests).

Where no NVIDIA driver can be loaded (or DLPACK_REF_CUDA_SIM=1), the
simulated driver of tests/support is loaded before anything touches
cuda.bindings, so the tests marked ``cuda`` run against the real
cuda.bindings on it; on a machine with a GPU they run on the GPU unchanged.
"""

import threading

import pytest

from support import cudasim

if cudasim.wanted():
    cudasim.load()


class _FactoryPerThread:
    """A CapsuleFactory per thread behind one object. pytest-run-parallel
    runs a test in several threads that share its fixtures; each thread's
    counts and ``last_*`` must be its own capsules', as in a serial run."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __getattr__(self, name):
        own = getattr(self._local, "factory", None)
        if own is None:
            from dlpack_ref.testing import CapsuleFactory   # ctypes.pythonapi: not on PyPy

            own = self._local.factory = CapsuleFactory()
        return getattr(own, name)


@pytest.fixture
def factory():
    """A fresh CapsuleFactory, so each test counts only its own deleter calls."""
    return _FactoryPerThread()


@pytest.fixture
def sim():
    """The simulated driver (skips on a real GPU): its violations start empty
    and the test fails if any were recorded when it ends."""
    lib = cudasim.loaded()
    if lib is None:
        pytest.skip("needs the simulated CUDA driver (this process runs on a real one or none)")
    s = cudasim.Simulator(lib)
    s.clear()
    yield s
    found = s.violations()
    s.clear()
    assert not found, "driver rules broken:\n" + "\n".join(found)


@pytest.fixture(autouse=True)
def _no_driver_violations(request):
    """On the simulator, every test marked ``cuda`` must keep the driver's rules."""
    lib = cudasim.loaded()
    if lib is None or request.node.get_closest_marker("cuda") is None or "sim" in request.fixturenames:
        yield
        return
    s = cudasim.Simulator(lib)
    s.clear()
    yield
    found = s.violations()
    s.clear()
    assert not found, "driver rules broken:\n" + "\n".join(found)
