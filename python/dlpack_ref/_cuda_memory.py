"""CUDA memory: allocations owned by Arrays, copies between any two of
CPU, CUDA (same device or peer), CPU_PINNED and CUDA_MANAGED memory, and
memset. Copies are enqueued on one stream, after the work pending on the
source; see docs/cuda.md for the table.

Allocation (docs/cuda.md, "The allocation model"): device memory comes
from the device's default memory pool in stream order (cuMemAllocAsync on
the stream of its first use, cuMemFreeAsync on the legacy default stream
after its last pending work); pinned memory, and device memory where the
device has no memory pools, from a cache of blocks reused in the same
order, so a copy in a loop allocates and frees nothing after the first.

The core describes each side of a copy as a ``Block`` (pointer, device,
pending-work record, byte strides, contiguity): nothing here reads an
Array.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
import weakref
from typing import NamedTuple

from . import _cuda_driver
from ._cuda_driver import LEGACY_STREAM, check, runtime
from ._cuda_streams import PendingWork
from ._devices import CUDA_DEVICE_BOUND, SUPPORTED, DeviceType

# Pitches of cuMemcpy2D are limited by CU_DEVICE_ATTRIBUTE_MAX_PITCH, which
# is 2**31 - 1 on every GPU so far.
MAX_PITCH = 2**31 - 1

_HOST = SUPPORTED - CUDA_DEVICE_BOUND   # memory the driver calls host memory

_UNLOCKED = contextlib.nullcontext()    # for copies into memory without a record (CPU)

# How a DeviceMemory goes back: cuMemFree / cuMemFreeHost, cuMemFreeAsync
# into the device's pool, or into the Allocator's cache.
_PLAIN, _POOLED, _CACHED = 0, 1, 2

# The default pool keeps up to this share of the device's memory when it is
# freed, rather than giving it back at every synchronization.
_POOL_KEEPS = 4        # 1/4 of the device's memory

# The cache of pinned blocks (and of device blocks without pools) keeps at
# most this many idle bytes per kind and device; a block freed beyond it is
# given back to the driver.
CACHE_LIMIT = 2 << 30


class Block(NamedTuple):
    """One side of a copy. ``work``: the memory's pending-work record
    (None for CPU memory); ``byte_strides``: per dimension of the copy's
    shape (the two sides coalesced together), in bytes."""

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

    __slots__ = ("ptr", "nbytes", "kind", "device_id", "work", "_driver", "_context", "_how", "_allocator")

    def __init__(self, ptr: int, nbytes: int, kind: int, device_id: int, driver, context,
                 how: int = _PLAIN, allocator: "Allocator | None" = None):
        self.ptr = ptr
        self.nbytes = nbytes
        self.kind = kind
        self.device_id = device_id
        #: The pending-work record of this memory, shared by every Array on it.
        self.work = PendingWork()
        self._driver = driver
        self._context = context
        self._how = how
        self._allocator = allocator

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if not ptr or _cuda_driver.forked_after_init:
            return      # in a forked child the parent's context owns it
        if self._how == _POOLED:
            _free_async(self._driver, self._context, ptr, self.work, self.device_id)
            return
        if self._how == _CACHED and self._allocator.keep(self.kind, self.device_id, ptr, self.nbytes, self.work):
            return
        _free(self._driver, self._context, ptr, self.kind, self.work)

    def __repr__(self):
        return f"<DeviceMemory kind={self.kind} device={self.device_id} ptr={self.ptr:#x} nbytes={self.nbytes}>"


def _free_async(d, context, ptr: int, work: PendingWork, device_id: int) -> None:
    """Give pool memory back in stream order: the legacy default stream of
    its device waits for the last write and the recorded uses (events; the
    host does not block) and frees it (cuMemFreeAsync). The legacy stream
    also follows every blocking stream of the context, so work that
    consumers enqueued there before dropping the memory is ordered too."""
    try:
        d.cuCtxPushCurrent(context)
        try:
            work.order_all_before(LEGACY_STREAM, device_id)
            d.cuMemFreeAsync(ptr, LEGACY_STREAM)
        finally:
            d.cuCtxPopCurrent()
    except Exception:
        pass


def _free(d, context, ptr: int, kind: int, work: PendingWork) -> None:
    """cuMemFree / cuMemFreeHost. cuda.h says only that they "may"
    synchronize, so the host first waits for the last write and the
    copies reading the memory: none outlives it."""
    try:
        work.wait_unused()
    except Exception:
        pass
    try:
        d.cuCtxPushCurrent(context)
        try:
            if kind == DeviceType.CPU_PINNED:
                d.cuMemFreeHost(ptr)
            else:
                d.cuMemFree(ptr)
        finally:
            d.cuCtxPopCurrent()
    except Exception:
        pass


def _size_class(nbytes: int) -> int:
    """The size a cached block is made with, so it serves every request of
    its class: at most 1/8 above the request, at least 512 bytes."""
    if nbytes <= 512:
        return 512
    step = 1 << (nbytes.bit_length() - 4)
    return -(-nbytes // step) * step


class Allocator:
    """Per loaded driver: the default memory pool of each device (None
    where the device reports no memory-pool support), and the cache of
    idle blocks of the kinds that do not come from a pool (pinned memory,
    and device memory without pools), each kept with its pending-work
    record so its next owner is ordered after the last one's work."""

    def __init__(self, rt):
        self._rt = rt
        self._pools: dict[int, object] = {}          # device -> CUmemoryPool or None
        self._idle: dict[tuple, list] = {}           # (kind, device, size) -> [(ptr, work)]
        self._idle_bytes: dict[tuple, int] = {}      # (kind, device) -> bytes kept
        self._lock = threading.RLock()               # RLock: a free may run in a GC inside a take

    def pool(self, device_id: int):
        """The default memory pool of ``device_id``, its release threshold
        raised (never lowered) to 1/_POOL_KEEPS of the device's memory so
        that freed memory stays for reuse; None without pool support."""
        try:
            return self._pools[device_id]
        except KeyError:
            pass
        d = self._rt.driver
        pool = None
        attribute = getattr(getattr(d, "CUdevice_attribute", None), "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED", None)
        if attribute is not None:
            dev = check(d.cuDeviceGet(device_id), "cuDeviceGet")
            out = d.cuDeviceGetAttribute(attribute, dev)
            if not out[0] and out[1]:
                pool = check(d.cuDeviceGetDefaultMemPool(dev), "cuDeviceGetDefaultMemPool")
                threshold = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
                keep = int(check(d.cuDeviceTotalMem(dev), "cuDeviceTotalMem")) // _POOL_KEEPS
                if int(check(d.cuMemPoolGetAttribute(pool, threshold), "cuMemPoolGetAttribute")) < keep:
                    check(d.cuMemPoolSetAttribute(pool, threshold, d.cuuint64_t(keep)), "cuMemPoolSetAttribute")
        self._pools[device_id] = pool
        return pool

    def take(self, kind: int, device_id: int, size: int):
        """An idle block of exactly ``size`` bytes as (ptr, work), or None."""
        with self._lock:
            blocks = self._idle.get((kind, device_id, size))
            if not blocks:
                return None
            ptr, work = blocks.pop()
            self._idle_bytes[kind, device_id] -= size
            return ptr, work

    def keep(self, kind: int, device_id: int, ptr: int, size: int, work: PendingWork) -> bool:
        """Keep a freed block for reuse; False when the cache is full (the
        caller frees it)."""
        with self._lock:
            held = self._idle_bytes.get((kind, device_id), 0)
            if held + size > CACHE_LIMIT:
                return False
            self._idle_bytes[kind, device_id] = held + size
            self._idle.setdefault((kind, device_id, size), []).append((ptr, work))
            return True


_allocators: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _allocator(rt) -> Allocator:
    a = _allocators.get(rt)
    if a is None:
        a = _allocators.setdefault(rt, Allocator(rt))
    return a


def allocate(device, nbytes: int, copy_from=None) -> DeviceMemory:
    """Memory for an Array on ``device`` (a Device of type CUDA,
    CUDA_MANAGED or CPU_PINNED), see docs/cuda.md "The allocation model".

    Parameters
    ----------
    device
        Where: CUDA memory comes from the device's default memory pool
        (cuMemAllocAsync) or, without pool support, from a cache of
        cuMemAlloc blocks; managed memory is cuMemAllocManaged (attached
        globally); pinned memory comes from a cache of cuMemHostAlloc
        (portable) blocks made in the primary context of the current
        device (see ``Runtime.current_device``), so no other GPU gets one.
    nbytes
        The size (0 is allocated as 1 byte).
    copy_from
        ``(device_type, device_id, sync, handle)`` of the source when the
        memory is the destination of a ``copy_array`` that the caller issues
        next with that ``sync`` and ``handle``: the memory is allocated (or a cached block
        handed over) in the order of that copy's stream, so the copy waits
        for nothing more. Otherwise the memory is ready for use on the
        legacy default stream of its device (its record says so) or, for
        pinned memory, on the host.

    Raises
    ------
    BufferError
        A device type this layer does not allocate.
    CUDAError
        The driver refused (out of memory, ...).
    """
    rt = runtime()
    d = rt.driver
    kind = int(device.type)
    dev = device.id if kind != DeviceType.CPU_PINNED else rt.current_device()
    size = max(int(nbytes), 1)
    if kind == DeviceType.CUDA_MANAGED:
        pushed = rt.enter(dev)
        try:
            ptr = check(d.cuMemAllocManaged(size, int(d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)),
                        "cuMemAllocManaged")
        finally:
            rt.leave(pushed)
        return DeviceMemory(int(ptr), size, kind, dev, d, rt.context(dev))
    if kind not in (DeviceType.CUDA, DeviceType.CPU_PINNED):
        raise BufferError(f"dlpack-ref's CUDA layer cannot allocate memory on {device}")
    allocator = _allocator(rt)
    if copy_from is not None:
        s, s_dev = _copy_stream(rt, kind, device.id, *copy_from)
    else:
        s, s_dev = LEGACY_STREAM, dev
    if kind == DeviceType.CUDA:
        pool = allocator.pool(dev)
        if pool is not None:
            if s_dev != dev:           # a peer copy's stream: allocate on this device's
                s = LEGACY_STREAM
            pushed = rt.enter(dev)
            try:
                ptr = check(d.cuMemAllocAsync(size, s), "cuMemAllocAsync")
            finally:
                rt.leave(pushed)
            mem = DeviceMemory(int(ptr), size, kind, dev, d, rt.context(dev), _POOLED)
            if copy_from is None or s_dev != dev:
                mem.work.record(LEGACY_STREAM, dev)
            return mem
    size = _size_class(size)
    found = allocator.take(kind, dev, size)
    if found is None:
        pushed = rt.enter(dev)
        try:
            if kind == DeviceType.CUDA:
                ptr = check(d.cuMemAlloc(size), "cuMemAlloc")
            else:
                ptr = check(d.cuMemHostAlloc(size, d.CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc")
        finally:
            rt.leave(pushed)
        return DeviceMemory(int(ptr), size, kind, dev, d, rt.context(dev), _CACHED, allocator)
    ptr, old = found
    mem = DeviceMemory(ptr, size, kind, dev, d, rt.context(dev), _CACHED, allocator)
    if old.unused:
        return mem
    try:
        if copy_from is not None:
            old.order_all_before(s, s_dev)
        elif kind == DeviceType.CPU_PINNED:
            old.wait_unused()
        else:
            old.order_all_before(LEGACY_STREAM, dev)
            mem.work.record(LEGACY_STREAM, dev)
    except BaseException:
        mem.work = old       # its next free waits for what could not be ordered
        raise
    return mem


# --- copies ----------------------------------------------------------------

def plan_copy(shape, dst_strides, src_strides, itemsize):
    """The driver copies that move an n-d strided array (strides in bytes)
    into another of the same shape, as offsets from the two first-element
    addresses: ``("1d", dst_off, src_off, nbytes)`` or ``("2d", dst_off,
    dst_pitch, src_off, src_pitch, width, height)``.

    The core passes the dimensions coalesced (the kernels' dlref_coalesce:
    size-1 dimensions dropped, neighbours contiguous on both sides merged;
    a single element is no dimension at all), so nothing is merged here:
    the innermost dimension, when dense on both sides, is one row; the next
    becomes the rows of a 2-D copy when both pitches are at least a row and
    at most MAX_PITCH; what remains is looped over, in C order of the
    destination. Any other description of the same layout is copied
    correctly too, in more calls."""
    dims = list(zip(shape, dst_strides, src_strides))
    if any(n == 0 for n, _, _ in dims):
        return []
    width = itemsize
    if dims and dims[-1][1] == width and dims[-1][2] == width:
        width *= dims.pop()[0]
    outer = dims[::-1]  # inner to outer
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


def _copy_stream(rt, dst_type: int, dst_id: int, src_type: int, src_id: int, sync: int, handle: int):
    """The stream a copy runs on, as (the CUstream handle, its device): the
    consumer's stream ``handle``; without ``sync`` the legacy default
    stream. Handles 1 and 2 name default streams of the source's device, or
    of the target's for a copy from the host (of the current device between
    host memory)."""
    home = src_id if src_type in CUDA_DEVICE_BOUND else dst_id if dst_type in CUDA_DEVICE_BOUND else None
    if home is None:
        home = rt.current_device()
    s = handle if sync else LEGACY_STREAM
    return s, rt.stream_device(s, home)


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


def copy_array(dst: Block, src: Block, shape, itemsize: int, nbytes: int, given: int, sync: int,
               handle: int) -> None:
    """Copy ``src`` into ``dst`` (same ``shape``; any devices of the CUDA
    family or CPU; any strides).

    Parameters
    ----------
    dst, src
        The two sides; a strided pageable-host source is best gathered on
        the host first (one transfer instead of many).
    shape
        The elements per dimension, coalesced with both sides' byte strides
        (``Block.byte_strides``) by the core (see ``plan_copy``).
    itemsize
        Bytes per element; 0 for packed sub-byte data, which must then be
        C-contiguous on both sides and is copied as ``nbytes`` bytes.
    nbytes
        The bytes of packed sub-byte data (ignored otherwise).
    given, sync, handle
        The consumer's stream, the fields of its parse where it entered
        (``dlpack_ref._streams``). The copy runs on stream ``handle``
        (without ``sync``: the legacy default stream; 1 and 2 name default
        streams of the source's device, or of the target's for a copy from
        the host) after that stream has
        waited for the work pending on ``src`` and on ``dst`` (for a new
        ``dst``: its allocation, unless ``allocate`` was told of this copy
        and made it on this stream). It becomes the destination's last
        write.

    Raises
    ------
    BufferError
        Strided packed sub-byte data.

    A copy into host memory (CPU, CPU_PINNED) with no stream given, or
    without ``sync``, is complete on return: the copy's stream is synchronized, never the
    device. With a stream, nothing blocks.
    """
    rt = runtime()
    d = rt.driver
    s, s_dev = _copy_stream(rt, dst.device_type, dst.device_id, src.device_type, src.device_id, sync, handle)
    if itemsize == 0:
        if not (src.c_contiguous and dst.c_contiguous):
            raise BufferError("strided copies of packed sub-byte data are not supported")
        ops = [("1d", 0, 0, nbytes)] if nbytes else []
    else:
        ops = plan_copy(shape, dst.byte_strides, src.byte_strides, itemsize)
    if src.work is not None:
        src.work.order_before(s, s_dev)
    # The destination's record is held from the wait for its last write to
    # the record of this one: a write by another thread in between would
    # otherwise be dropped from the record (docs/cuda.md, Threads). Only one
    # record is held at a time (the source's wait and use are outside).
    with dst.work.lock if dst.work is not None else _UNLOCKED:
        try:
            if dst.work is not None:
                dst.work.order_before(s, s_dev)
            pushed = rt.enter(s_dev)
            try:
                _issue(d, ops, dst, src, s)
            finally:
                rt.leave(pushed)
        except BaseException:
            # Whatever was enqueued (and an allocation made on s for this
            # copy) comes before the destination's free.
            if dst.work is not None:
                dst.work.record(s, s_dev)
            raise
        if dst.device_type in _HOST and not (given and sync):
            host_sync = True
        else:
            host_sync = False
            if dst.work is not None:
                dst.work.record(s, s_dev)
    if src.work is not None and ops:
        src.work.record_use(s, s_dev)
    if host_sync:
        rt.synchronize(s, s_dev)


def memset(ptr: int, device_type: int, device_id: int, work: PendingWork | None, value: int,
           nbytes: int) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to ``value``: on the host for host
    memory (after its pending work), else on the legacy default stream of
    ``device_id`` after the pending work, which it then becomes."""
    with work.lock if work is not None else _UNLOCKED:   # as in copy_array
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
