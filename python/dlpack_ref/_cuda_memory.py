"""CUDA memory: allocations owned by Arrays, copies between any two of
CPU, CUDA (same device or peer), CPU_PINNED and CUDA_MANAGED memory, and
memset. Copies are enqueued on one stream, after the work pending on the
source; see docs/cuda.md for the table.

The core describes each side of a copy as a ``Block`` (pointer, device,
pending-work record, byte strides, contiguity): nothing here reads an
Array.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import NamedTuple

from ._cuda_driver import LEGACY_STREAM, check, runtime
from ._cuda_streams import PendingWork
from ._devices import CUDA_DEVICE_BOUND, SUPPORTED, DeviceType
from ._streams import NO_SYNC, stream_handle

# Pitches of cuMemcpy2D are limited by CU_DEVICE_ATTRIBUTE_MAX_PITCH, which
# is 2**31 - 1 on every GPU so far.
MAX_PITCH = 2**31 - 1

_HOST = SUPPORTED - CUDA_DEVICE_BOUND   # memory the driver calls host memory


class Block(NamedTuple):
    """One side of a copy. ``work``: the memory's pending-work record
    (None for CPU memory); ``byte_strides``: per dimension, in bytes."""

    ptr: int
    device_type: int
    device_id: int
    work: PendingWork | None
    byte_strides: tuple
    c_contiguous: bool


class DeviceMemory:
    """One allocation made through the driver; the Array that owns it keeps
    it in ``base``. Freed exactly once, when the last Array using it dies,
    in the primary context of its device. At interpreter exit the free still
    runs (everything it needs is held here) or, if the driver is already
    gone, is skipped: the process is ending."""

    __slots__ = ("ptr", "nbytes", "kind", "device_id", "work", "_driver", "_context")

    def __init__(self, ptr: int, nbytes: int, kind: int, device_id: int, driver, context):
        self.ptr = ptr
        self.nbytes = nbytes
        self.kind = kind
        self.device_id = device_id
        #: The pending-work record of this memory, shared by every Array on it.
        self.work = PendingWork()
        self._driver = driver
        self._context = context

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if not ptr:
            return
        d = self._driver
        try:
            # cuMemFree "may" synchronize (cuda.h): wait for the last write
            # and the copies reading it first, so none outlives the memory.
            self.work.wait_unused()
        except Exception:
            pass
        try:
            d.cuCtxPushCurrent(self._context)
            try:
                if self.kind == DeviceType.CPU_PINNED:
                    d.cuMemFreeHost(ptr)
                else:
                    d.cuMemFree(ptr)
            finally:
                d.cuCtxPopCurrent()
        except Exception:
            pass

    def __repr__(self):
        return f"<DeviceMemory kind={self.kind} device={self.device_id} ptr={self.ptr:#x} nbytes={self.nbytes}>"


def allocate(device, nbytes: int) -> DeviceMemory:
    """Memory for an Array on ``device`` (a Device of type CUDA,
    CUDA_MANAGED or CPU_PINNED): cuMemAlloc, cuMemAllocManaged (attached
    globally) or cuMemHostAlloc (portable: usable from every context).
    Pinned memory is allocated in the primary context of the current
    device (see ``Runtime.current_device``), so no other GPU gets one."""
    rt = runtime()
    d = rt.driver
    kind = int(device.type)
    dev = device.id if kind != DeviceType.CPU_PINNED else rt.current_device()
    size = max(int(nbytes), 1)
    pushed = rt.enter(dev)
    try:
        if kind == DeviceType.CUDA:
            ptr = check(d.cuMemAlloc(size), "cuMemAlloc")
        elif kind == DeviceType.CUDA_MANAGED:
            ptr = check(d.cuMemAllocManaged(size, int(d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)),
                        "cuMemAllocManaged")
        elif kind == DeviceType.CPU_PINNED:
            ptr = check(d.cuMemHostAlloc(size, d.CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc")
        else:
            raise BufferError(f"dlpack-ref's CUDA layer cannot allocate memory on {device}")
    finally:
        rt.leave(pushed)
    return DeviceMemory(int(ptr), size, kind, dev, d, rt.context(dev))


# --- copies ----------------------------------------------------------------

def plan_copy(shape, dst_strides, src_strides, itemsize):
    """The driver copies that move an n-d strided array (strides in bytes)
    into another of the same shape, as offsets from the two first-element
    addresses: ``("1d", dst_off, src_off, nbytes)`` or ``("2d", dst_off,
    dst_pitch, src_off, src_pitch, width, height)``. Dimensions dense on
    both sides merge into one row; the next dimension becomes the rows of a
    2-D copy when both pitches are at least a row and at most MAX_PITCH;
    what remains is looped over, in C order of the destination."""
    dims = [(n, d, s) for n, d, s in zip(shape, dst_strides, src_strides) if n != 1]
    if any(n == 0 for n, _, _ in dims):
        return []
    width = itemsize
    while dims and dims[-1][1] == width and dims[-1][2] == width:
        width *= dims.pop()[0]
    outer = []  # inner to outer, merged where both sides allow
    for n, d, s in reversed(dims):
        if outer:
            pn, pd, ps = outer[-1]
            if d == pd * pn and s == ps * pn:
                outer[-1] = (pn * n, pd, ps)
                continue
        outer.append((n, d, s))
    if not outer:
        return [("1d", 0, 0, width)]
    height, dst_pitch, src_pitch = outer[0]
    two_d = width <= dst_pitch <= MAX_PITCH and width <= src_pitch <= MAX_PITCH
    loop = outer[1:] if two_d else outer
    loop = loop[::-1]  # outer to inner
    ops = []
    for index in itertools.product(*(range(n) for n, _, _ in loop)):
        doff = soff = 0
        for i, (_, d, s) in zip(index, loop):
            doff += i * d
            soff += i * s
        if two_d:
            ops.append(("2d", doff, dst_pitch, soff, src_pitch, width, height))
        else:
            ops.append(("1d", doff, soff, width))
    return ops


def _gpu(block: Block):
    """The CUDA device whose streams order the block; None for host memory
    (CPU, and CPU_PINNED, which every device reaches)."""
    return block.device_id if block.device_type in CUDA_DEVICE_BOUND else None


def _memory_type(d, block: Block):
    t = block.device_type
    if t in _HOST:
        return d.CUmemorytype.CU_MEMORYTYPE_HOST
    if t == DeviceType.CUDA:
        return d.CUmemorytype.CU_MEMORYTYPE_DEVICE
    return d.CUmemorytype.CU_MEMORYTYPE_UNIFIED


def _issue(d, ops, dst: Block, src: Block, stream):
    dptr, sptr = dst.ptr, src.ptr
    if any(op[0] == "2d" for op in ops):
        dtype, stype = _memory_type(d, dst), _memory_type(d, src)
    for op in ops:
        if op[0] == "1d":
            _, doff, soff, n = op
            check(d.cuMemcpyAsync(dptr + doff, sptr + soff, n, stream), "cuMemcpyAsync")
            continue
        _, doff, dpitch, soff, spitch, width, height = op
        p = d.CUDA_MEMCPY2D()
        _memcpy2d_side(d, p, "src", stype, sptr + soff, spitch)
        _memcpy2d_side(d, p, "dst", dtype, dptr + doff, dpitch)
        p.WidthInBytes = width
        p.Height = height
        check(d.cuMemcpy2DAsync(p, stream), "cuMemcpy2DAsync")


def copy_array(dst: Block, src: Block, shape, itemsize: int, nbytes: int, stream, *,
               dst_is_new: bool = True) -> None:
    """Copy ``src`` into ``dst`` (same ``shape``; any devices of the CUDA
    family or CPU; any strides).

    Parameters
    ----------
    dst, src
        The two sides; a strided pageable-host source is best gathered on
        the host first (one transfer instead of many).
    shape
        The elements per dimension.
    itemsize
        Bytes per element; 0 for packed sub-byte data, which must then be
        C-contiguous on both sides and is copied as ``nbytes`` bytes.
    nbytes
        The bytes of packed sub-byte data (ignored otherwise).
    stream
        The consumer's stream as DLPack spells it. The copy runs on it
        (None and -1: the legacy default stream of the source's device, or
        of the target's for a copy from the host) after that stream has
        waited for the work pending on ``src`` (and on ``dst`` unless
        ``dst_is_new``). It becomes the destination's last write.
    dst_is_new
        Whether ``dst`` was just allocated (nothing to wait for).

    Raises
    ------
    BufferError
        Strided packed sub-byte data.

    A copy into host memory (CPU, CPU_PINNED) with ``stream`` None or -1
    is complete on return: the copy's stream is synchronized, never the
    device. With a stream, nothing blocks.
    """
    rt = runtime()
    d = rt.driver
    handle = stream_handle(stream)
    home = _gpu(src)
    if home is None:
        home = _gpu(dst)
    if home is None:
        home = rt.current_device()
    s = LEGACY_STREAM if handle == NO_SYNC else handle
    s_dev = rt.stream_device(s, home)
    if src.work is not None:
        src.work.order_before(s, s_dev)
    if not dst_is_new and dst.work is not None:
        dst.work.order_before(s, s_dev)

    if itemsize == 0:
        if not (src.c_contiguous and dst.c_contiguous):
            raise BufferError("strided copies of packed sub-byte data are not supported")
        ops = [("1d", 0, 0, nbytes)] if nbytes else []
    else:
        ops = plan_copy(shape, dst.byte_strides, src.byte_strides, itemsize)

    pushed = rt.enter(s_dev)
    try:
        _issue(d, ops, dst, src, s)
    finally:
        rt.leave(pushed)
    if src.work is not None and ops:
        src.work.record_use(s, s_dev)

    if dst.device_type in _HOST and (stream is None or handle == NO_SYNC):
        rt.synchronize(s, s_dev)
    elif dst.work is not None:
        dst.work.record(s, s_dev)


def memset(ptr: int, device_type: int, device_id: int, work: PendingWork | None, value: int,
           nbytes: int) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to ``value``: on the host for host
    memory (after its pending work), else on the legacy default stream of
    ``device_id`` after the pending work, which it then becomes."""
    if device_type in _HOST:
        if work is not None:
            work.wait_on_host()
        ctypes.memset(ptr, value, nbytes)
        return
    rt = runtime()
    if work is not None:
        work.order_before(LEGACY_STREAM, device_id)
    pushed = rt.enter(device_id)
    try:
        check(rt.driver.cuMemsetD8Async(ptr, value, nbytes, LEGACY_STREAM), "cuMemsetD8Async")
    finally:
        rt.leave(pushed)
    if work is not None:
        work.record(LEGACY_STREAM, device_id)


def _memcpy2d_side(d, p, side: str, memory_type, address: int, pitch: int) -> None:
    """One side ("src" or "dst") of a CUDA_MEMCPY2D: host memory goes in
    ``*Host``, device memory in ``*Device``."""
    setattr(p, f"{side}MemoryType", memory_type)
    host = memory_type == d.CUmemorytype.CU_MEMORYTYPE_HOST
    setattr(p, f"{side}Host" if host else f"{side}Device", address)
    setattr(p, f"{side}Pitch", pitch)
