"""Copies of CUDA memory: ``copy=True`` on the device, and
``dl_device=(kDLCPU, 0)`` to the host, each ordered on the consumer's
stream and flagged IS_COPIED."""

from __future__ import annotations

import ctypes

from dlpack_ref.harness.subject import NotSupported, first_element
from dlpack_ref.testing.abi import DLPACK_VERSION, FLAG_IS_COPIED
from dlpack_ref.testing.reader import read_capsule

from ..breaking.cuda import HostCopyOnOwnStream
from ..breaking.producers import Wrapped
from ..breaking.surgery import set_flag
from ..cuda_lab import (
    KDL_CPU, KDL_CUDA, Lab, compare_bytes, export_versioned, exported, fresh_values, pending_write, scoped,
)
from ..support import CheckFailed, flag_set
from ..table import breaks, rule


# --- copy=True between CUDA arrays --------------------------------------------------------

def _copy_true(x, c, refusal=CheckFailed):
    """The capsule of ``copy=True``; a producer without the keyword (a
    TypeError) is not supported, any other refusal raises ``refusal``: the
    standard says copy=True must always copy."""
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, copy=True, stream=c)
    except TypeError as e:
        raise NotSupported("copy keyword not accepted (a producer older than DLPack 1.0)", e) from e
    except Exception as e:
        raise refusal("copy=True of CUDA memory raised; the standard says it must always copy", e) from e


@rule(side="cuda", source="array-api", where="array.__dlpack__, copy: 'If True, ... always copy'")
def copy_true_copies(cp) -> str:
    """copy=True of CUDA memory (no dl_device) copies on the device: another data pointer, the copy holds the array's
    values for work on the consumer's stream, and writes to it leave the array unchanged"""
    with Lab() as lab:
        values = fresh_values()
        want = values.tobytes()
        x = cp.make("cuda", values)
        c = lab.stream()
        plain = exported(lambda: export_versioned(x, stream=c), "__dlpack__(stream=<consumer>)")
        base = first_element(read_capsule(plain))
        cap = _copy_true(x, c)
        info = read_capsule(cap)
        ptr = first_element(info)
        if info["device"][0] != KDL_CUDA:
            raise CheckFailed(f"the copy is on device {info['device']}, the array on CUDA")
        if ptr == base:
            raise CheckFailed(f"copy=True exported the array's own data pointer {ptr:#x}")
        compare_bytes(lab.read(c, ptr, len(want)), want, "the copy, read on the consumer's stream")
        lab.fill(c, ptr, 0x5A, len(want))
        compare_bytes(lab.read(c, base, len(want)), want, "the array after writing to the copy")
        del cap
        return f"pointer {ptr:#x} != {base:#x}; the copy holds the values; writes to it do not reach the array"


@breaks(copy_true_copies, shows="copy=True exported the array's own data pointer")
class InPlaceDeviceCopy(Wrapped):
    """copy=True of CUDA memory (no dl_device) exports in place, flagged IS_COPIED."""

    def __dlpack__(self, copy=None, **kwargs):
        if copy and kwargs.get("dl_device") is None:
            return set_flag(self._a.__dlpack__(**kwargs), FLAG_IS_COPIED, True)
        return self._a.__dlpack__(copy=copy, **kwargs)


@rule(side="cuda", source="header", where="DLPACK_FLAG_BITMASK_IS_COPIED")
def copy_true_flag(cp) -> str:
    """a CUDA copy made for copy=True carries DLPACK_FLAG_BITMASK_IS_COPIED"""
    with Lab() as lab:
        x = cp.make("cuda", fresh_values())
        return _is_copied(read_capsule(_copy_true(x, lab.stream(), refusal=NotSupported)))


@breaks(copy_true_flag, shows="IS_COPIED not set on a copy")
class UnflaggedDeviceCopy(Wrapped):
    """A copy=True copy on the device, with IS_COPIED cleared."""

    def __dlpack__(self, copy=None, **kwargs):
        capsule = self._a.__dlpack__(copy=copy, **kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, False) if copy and kwargs.get("dl_device") is None else capsule


def _is_copied(info: dict) -> str:
    return flag_set(info, FLAG_IS_COPIED, "legacy capsule: no flags to set", "IS_COPIED not set on a copy")


# --- dl_device moves to the host ---------------------------------------------------------

def _to_host(x, **kwargs):
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, dl_device=(KDL_CPU, 0), **kwargs)
    except (BufferError, TypeError) as e:
        raise NotSupported("dl_device=(kDLCPU, 0) is refused for CUDA memory", e) from e


def _pending_host_copy(cp, lab, stream: int | None):
    """(array, capsule, host pointer, values) of ``dl_device=(kDLCPU, 0)``
    with ``stream``, exported while the array's write is pending. Both must
    be kept until the bytes are read: the host copy lives as long as the
    capsule, and freeing the array may wait on the host for its pending
    work (dlpack-ref's does), which would hide a missing synchronization."""
    x, values, p = pending_write(cp, lab)
    with scoped(cp, p):
        cap = _to_host(x, stream=stream)
    info = read_capsule(cap)
    if info["device"] != (KDL_CPU, 0):
        raise CheckFailed(f"asked for dl_device=(kDLCPU, 0), exported on {info['device']}")
    return x, cap, first_element(info), values


@rule(side="cuda", source="array-api",
      where="array.__dlpack__, dl_device and stream (None: the host may read on return)")
def dl_device_cpu_readable(cp) -> str:
    """__dlpack__(dl_device=(kDLCPU, 0), stream=None) of CUDA memory returns host memory the host can read on return:
    the copy was made after the pending write and has finished"""
    with Lab() as lab:
        x, cap, ptr, values = _pending_host_copy(cp, lab, None)
        compare_bytes(ctypes.string_at(ptr, values.nbytes), values.tobytes(), "the host copy read on return")
        del cap, x
        return "device (1, 0); the values are readable on return"


@breaks(dl_device_cpu_readable, shows="the host copy read on return: ")
class HostCopyUnwaited(HostCopyOnOwnStream):
    """Copies to the host for dl_device=(kDLCPU, 0) with stream=None on a stream of its own, never waited
    for."""

    @staticmethod
    def diverted(stream) -> bool:
        return stream is None


@rule(side="cuda", source="array-api",
      where="array.__dlpack__, dl_device and stream (the stream is the consumer's, on the producer's device)")
def dl_device_cpu_on_stream(cp) -> str:
    """__dlpack__(dl_device=(kDLCPU, 0), stream=S): the copy to the host is ordered on S after the pending write; once
    S is synchronized the host reads the values (the host need not block before)"""
    with Lab() as lab:
        c = lab.stream()
        x, cap, ptr, values = _pending_host_copy(cp, lab, c)
        early = ctypes.string_at(ptr, values.nbytes) == values.tobytes()
        lab.call("cuStreamSynchronize", c)
        compare_bytes(ctypes.string_at(ptr, values.nbytes), values.tobytes(), "the host copy once S is synchronized")
        del cap, x
        return ("the values are there once S is synchronized; "
                + ("the producer blocked until then" if early else "enqueued, nothing blocked"))


@breaks(dl_device_cpu_on_stream, shows="the host copy once S is synchronized: ")
class HostCopyOffStream(HostCopyOnOwnStream):
    """Copies to the host for dl_device=(kDLCPU, 0) with a consumer's stream S on a stream of its own,
    never waited for."""

    @staticmethod
    def diverted(stream) -> bool:
        return stream is not None


@rule(side="cuda", source="header", where="DLPACK_FLAG_BITMASK_IS_COPIED ('the data was copied')")
def dl_device_cpu_flag(cp) -> str:
    """a host copy made for dl_device=(kDLCPU, 0) of CUDA memory carries DLPACK_FLAG_BITMASK_IS_COPIED"""
    with Lab():
        x = cp.make("cuda", fresh_values())
        return _is_copied(read_capsule(_to_host(x)))


@breaks(dl_device_cpu_flag, shows="IS_COPIED not set on a copy")
class UnflaggedHostCopy(Wrapped):
    """A host copy for dl_device=(kDLCPU, 0), with IS_COPIED cleared."""

    def __dlpack__(self, dl_device=None, **kwargs):
        capsule = self._a.__dlpack__(dl_device=dl_device, **kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, False) if dl_device is not None else capsule
