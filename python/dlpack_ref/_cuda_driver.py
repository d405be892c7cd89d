"""The CUDA driver as dlpack-ref uses it: loading cuda-python's
``cuda.bindings.driver`` on first use, errors that name what is missing, and
the context policy.

Context policy: every device is used through its *primary context* (the one
the CUDA runtime, CuPy, PyTorch and JAX use), retained once per device the
first time dlpack-ref needs it and never released (memory handed to other
libraries may outlive any scope). Each operation makes that context current
only for its own duration (push/pop), so the calling thread's current
context, and with it the runtime's current device, is unchanged afterwards.
"""

from __future__ import annotations

import os
import threading

from ._streams import LEGACY_STREAM, PER_THREAD_STREAM

# cuInit results that mean "the driver is there, but no usable device".
_NO_DEVICE_RESULTS = {"CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INVALID_DEVICE"}


class CUDAUnavailableError(BufferError, RuntimeError):
    """CUDA was asked for but cannot be used. The message names what is
    missing: cuda-python, the NVIDIA driver, or a CUDA device. A BufferError
    (DLPack's error for data it cannot move) and a RuntimeError."""


class CUDAError(BufferError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the result.
    A BufferError (DLPack's error for data that cannot be moved: a driver
    that refuses a copy, e.g. of a tensor whose pointer is not what its
    device says) and a RuntimeError."""


def _result_name(result) -> str:
    return getattr(result, "name", None) or f"CUresult {int(result)}"


def check(out, call: str):
    """Unpack a cuda-python result tuple ``(CUresult, *values)``; raise
    CUDAError naming ``call`` when the result is not CUDA_SUCCESS."""
    if out[0]:
        raise CUDAError(f"{call} failed: {_result_name(out[0])}")
    if len(out) == 2:
        return out[1]
    return out[1:] or None


class Runtime:
    """The loaded driver module and the per-device primary contexts.

    Tests replace the module-level instance with one built around a
    recording stand-in of ``cuda.bindings.driver``.
    """

    def __init__(self, driver, device_count: int):
        self.driver = driver
        self.device_count = device_count
        self._contexts: dict[int, object] = {}      # device id -> CUcontext
        self._context_ints: dict[int, int] = {}     # device id -> int(CUcontext)
        self._device_of_context: dict[int, int] = {}  # int(CUcontext) -> device id
        self._lock = threading.Lock()
        self._spare_events: dict[int, list] = {}    # device id -> events free for reuse

    # --- contexts ---------------------------------------------------------

    def context(self, device_id: int):
        """The retained primary context of ``device_id`` (retained on first use)."""
        ctx = self._contexts.get(device_id)
        if ctx is not None:
            return ctx
        if not 0 <= device_id < self.device_count:
            raise CUDAUnavailableError(
                f"CUDA device {device_id} does not exist: this machine has {self.device_count} "
                f"CUDA device{'s' if self.device_count != 1 else ''} (ids 0 to {self.device_count - 1})")
        d = self.driver
        with self._lock:
            ctx = self._contexts.get(device_id)
            if ctx is None:
                dev = check(d.cuDeviceGet(device_id), "cuDeviceGet")
                ctx = check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                self._context_ints[device_id] = int(ctx)
                self._device_of_context[int(ctx)] = device_id
                self._contexts[device_id] = ctx
        return ctx

    def enter(self, device_id: int) -> bool:
        """Make ``device_id``'s primary context current; True when it was
        pushed (and ``leave`` must pop it)."""
        ctx = self.context(device_id)
        d = self.driver
        current = check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if current is not None and int(current) == self._context_ints[device_id]:
            return False
        check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        return True

    def leave(self, pushed: bool) -> None:
        if pushed:
            check(self.driver.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def current_device(self) -> int:
        """The device of the calling thread's current context; when none is
        current, the lowest device whose primary context dlpack-ref already
        retained (0 when none is): a process that uses only ``cuda:k`` never
        creates a context on another GPU."""
        current = check(self.driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if current is None or int(current) == 0:
            return min(self._contexts, default=0)
        return self.device_of_context(current)

    def device_of_context(self, ctx) -> int:
        key = int(ctx)
        dev = self._device_of_context.get(key)
        if dev is not None:
            return dev
        d = self.driver
        check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            dev = int(check(d.cuCtxGetDevice(), "cuCtxGetDevice"))
        finally:
            check(d.cuCtxPopCurrent(), "cuCtxPopCurrent")
        # Only primary contexts are remembered: their handles never die,
        # while another context's handle may be reused after it is destroyed.
        self.context(dev)
        if self._context_ints[dev] == key:
            self._device_of_context[key] = dev
        return dev

    def stream_device(self, handle: int, default_device: int) -> int:
        """The device a stream belongs to: its context's device for a
        CUstream handle (> 2); ``default_device`` for the legacy and
        per-thread default streams, which name a stream of whichever
        context is current."""
        if handle <= PER_THREAD_STREAM:
            return default_device
        ctx = check(self.driver.cuStreamGetCtx(handle), "cuStreamGetCtx")
        return self.device_of_context(ctx)

    # --- events ---------------------------------------------------------

    def take_event(self, device_id: int):
        """An event (timing disabled) of ``device_id``'s primary context:
        one returned by ``give_event`` when there is one, else a new one."""
        spare = self._spare_events.get(device_id)
        if spare:
            try:
                return spare.pop()
            except IndexError:
                pass
        d = self.driver
        pushed = self.enter(device_id)
        try:
            return check(d.cuEventCreate(int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
        finally:
            self.leave(pushed)

    def give_event(self, device_id: int, event) -> None:
        """Keep an event no record needs any more for reuse. Reuse is safe:
        a cuStreamWaitEvent waits for the record made before it, whatever
        is recorded on the event later."""
        self._spare_events.setdefault(device_id, []).append(event)

    def synchronize(self, handle: int, device_id: int) -> None:
        """Block the host until stream ``handle`` (of ``device_id`` when it
        is a default-stream handle) has finished: a stream, not a device, sync."""
        pushed = self.enter(device_id)
        try:
            check(self.driver.cuStreamSynchronize(handle), "cuStreamSynchronize")
        finally:
            self.leave(pushed)


_runtime: Runtime | None = None
_failure: str | None = None
_load_lock = threading.Lock()

#: True in a process forked after its parent loaded the driver: CUDA made
#: by the parent cannot be used there (CUDA's own rule), and memory and
#: records of the parent's contexts are left alone (never freed or waited on).
forked_after_init = False

FORKED_AFTER_INIT = ("CUDA cannot be used in this process: it was forked after its parent initialized CUDA, and "
                     "a forked child cannot use its parent's CUDA (start the process with multiprocessing's "
                     "'spawn' or 'forkserver' method instead)")


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: a lock another thread
    held is held forever there, so every lock of this module is made anew,
    and a runtime loaded by the parent is given up."""
    global _runtime, _failure, _load_lock, forked_after_init
    _load_lock = threading.Lock()
    if _runtime is not None:
        _runtime = None
        _failure = FORKED_AFTER_INIT
        forked_after_init = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def runtime() -> Runtime:
    """The loaded Runtime, or CUDAUnavailableError naming what is missing."""
    rt = _runtime
    if rt is not None:
        return rt
    return _load()


def _load() -> Runtime:
    global _runtime, _failure
    with _load_lock:
        if _runtime is not None:
            return _runtime
        if _failure is None:
            try:
                _runtime = Runtime(*_open_driver())
                return _runtime
            except CUDAUnavailableError as exc:
                _failure = str(exc)
        raise CUDAUnavailableError(_failure)


def _open_driver():
    """(driver module, device count), or CUDAUnavailableError saying which
    of cuda-python, the driver or a device is missing."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise CUDAUnavailableError(
            "CUDA needs cuda-python, which is not installed (pip install 'dlpack-ref[cuda]', "
            f"which installs cuda-bindings): {exc}") from None
    try:
        out = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder's DynamicLibNotFoundError when libcuda is absent
        raise CUDAUnavailableError(
            f"CUDA needs the NVIDIA driver (libcuda), which cuda-python could not load: {exc}") from None
    if out[0]:
        name = _result_name(out[0])
        if name in _NO_DEVICE_RESULTS:
            raise CUDAUnavailableError(
                f"CUDA needs a CUDA device: the NVIDIA driver is loaded but found none (cuInit: {name})")
        raise CUDAUnavailableError(f"CUDA needs a working NVIDIA driver: cuInit failed with {name}")
    count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if count < 1:
        raise CUDAUnavailableError("CUDA needs a CUDA device: the NVIDIA driver is loaded but reports none")
    return driver, int(count)
