"""Build and load the simulated CUDA driver (cudasim.c) in this process.

The library's SONAME is ``libcuda.so.1``: once it is loaded with
RTLD_GLOBAL, the dynamic loader answers every later ``dlopen("libcuda.so.1")``
(cuda-pathfinder's, for cuda.bindings) with it, so the real cuda.bindings
runs on it. It must be loaded before cuda.bindings first touches the driver.

``DLPACK_REF_CUDA_SIM``: ``1`` forces the simulator even where a driver
exists, ``0`` never loads it; unset (``auto``), it is loaded when no
``libcuda.so.1`` can be opened.

    python tests/support/cudasim.py -- prog.py args   # run prog on the simulator
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import runpy
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cudasim.c")
ENV = "DLPACK_REF_CUDA_SIM"

_lib: ctypes.CDLL | None = None


def _real_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
        return True
    except OSError:
        pass
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def wanted() -> bool:
    """Whether this process should run on the simulator (see ENV)."""
    mode = os.environ.get(ENV, "auto").strip().lower()
    if mode in ("0", "no", "off", "false"):
        return False
    if mode in ("1", "yes", "on", "true"):
        return True
    return not _real_driver_present()


def build() -> str:
    """Compile cudasim.c (once per source version) and return the library path."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"dlpack-ref-cudasim-{os.getuid()}")
    path = os.path.join(folder, f"libcudasim-{digest}.so")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    tmp = f"{path}.{os.getpid()}.tmp"
    subprocess.run([cc, "-O1", "-g", "-std=gnu11", "-shared", "-fPIC", "-pthread", "-Wall",
                    "-Wl,-soname,libcuda.so.1", "-o", tmp, SOURCE], check=True)
    os.replace(tmp, path)
    return path


def load() -> ctypes.CDLL:
    """Build the simulator if needed and load it into this process."""
    global _lib
    if _lib is not None:
        return _lib
    if "cuda.bindings._internal.driver" in sys.modules and _driver_loaded_elsewhere():
        raise RuntimeError("a CUDA driver is already loaded: the simulator must be loaded first")
    lib = ctypes.CDLL(build(), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    lib.cudasim_violations.restype = ctypes.c_char_p
    for name in ("cudasim_violation_count", "cudasim_pending", "cudasim_live_events"):
        getattr(lib, name).restype = ctypes.c_long
    lib.cudasim_counter.restype = ctypes.c_long
    lib.cudasim_counter.argtypes = [ctypes.c_char_p]
    lib.cudasim_retained.argtypes = [ctypes.c_int]
    lib.cudasim_set_memory_pools.argtypes = [ctypes.c_int]
    _lib = lib
    return lib


def _driver_loaded_elsewhere() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
        return True
    except OSError:
        return False


def loaded() -> ctypes.CDLL | None:
    """The simulator when this process runs on it, else None (a real driver or none)."""
    return _lib


class Simulator:
    """What the tests read from the loaded simulator."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib

    def violations(self) -> list[str]:
        return [v for v in self._lib.cudasim_violations().decode().split("\n") if v]

    def clear(self) -> None:
        self._lib.cudasim_clear_violations()

    def pending(self) -> int:
        return self._lib.cudasim_pending()

    def drain(self) -> None:
        self._lib.cudasim_drain()

    def live_events(self) -> int:
        return self._lib.cudasim_live_events()

    def counter(self, name: str) -> int:
        value = self._lib.cudasim_counter(name.encode())
        if value < 0:
            raise KeyError(name)
        return value

    def retained(self, device: int) -> int:
        return self._lib.cudasim_retained(device)

    def counters(self, *names: str) -> dict:
        """Several counters at once, by name."""
        return {n: self.counter(n) for n in names}

    def set_memory_pools(self, supported: bool) -> None:
        """What devices answer for CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        from now on (CUDASIM_MEMORY_POOLS=0 sets it at start)."""
        self._lib.cudasim_set_memory_pools(int(supported))


def main(argv: list[str]) -> None:
    """Run a Python script on the simulator: ``cudasim.py [--] script args``."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise SystemExit("usage: cudasim.py [--] script.py [args...]")
    load()
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
