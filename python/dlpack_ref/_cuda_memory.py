"""CUDA memory: allocations owned by Arrays, copies between any two of
CPU, CUDA (same device or peer), CPU_PINNED and CUDA_MANAGED memory, and
memset. Copies are enqueued on one stream, after the work pending on the
source; see docs/cuda.md for the table."""

from __future__ import annotations

import ctypes
import itertools

from ._cuda_driver import LEGACY_STREAM, PER_THREAD_STREAM, check, runtime
from ._cuda_streams import NO_SYNC, normalize, stream_handle

CPU, CUDA, CPU_PINNED, CUDA_MANAGED = 1, 2, 3, 13
_HOST_TYPES = (CPU, CPU_PINNED)


class DeviceMemory:
    """One allocation made through the driver; the Array that owns it keeps
    it in ``base``. Freed exactly once, when the last Array using it dies,
    in the primary context of its device. At interpreter exit the free still
    runs (everything it needs is held here) or, if the driver is already
    gone, is skipped: the process is ending."""

    __slots__ = ("ptr", "nbytes", "kind", "device_id", "_driver", "_context")

    def __init__(self, ptr: int, nbytes: int, kind: int, device_id: int, driver, context):
        self.ptr = ptr
        self.nbytes = nbytes
        self.kind = kind
        self.device_id = device_id
        self._driver = driver
        self._context = context

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if not ptr:
            return
        d = self._driver
        try:
            # cuMemFree/cuMemFreeHost wait for work still using the memory.
            d.cuCtxPushCurrent(self._context)
            try:
                if self.kind == CPU_PINNED:
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
    Pinned memory is allocated in device 0's primary context."""
    rt = runtime()
    d = rt.driver
    kind = int(device.type)
    dev = device.id if kind != CPU_PINNED else 0
    size = max(int(nbytes), 1)
    pushed = rt.enter(dev)
    try:
        if kind == CUDA:
            ptr = check(d.cuMemAlloc(size), "cuMemAlloc")
        elif kind == CUDA_MANAGED:
            ptr = check(d.cuMemAllocManaged(size, int(d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)),
                        "cuMemAllocManaged")
        elif kind == CPU_PINNED:
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
    2-D copy when both pitches are at least a row; what remains is looped
    over, in C order of the destination."""
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
    two_d = dst_pitch >= width and src_pitch >= width
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


def _cuda_device(a):
    """The CUDA device whose streams order `a`'s memory; None for host
    memory (CPU, and CPU_PINNED, which every device reaches)."""
    dev = a.device
    return dev.id if dev.type == CUDA or dev.type == CUDA_MANAGED else None


def _byte_strides(a, itemsize):
    return [s * itemsize for s in a.strides]


def _is_c_contiguous(a) -> bool:
    expected = 1
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n == 0:
            return True
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _memory_type(d, a):
    t = a.device.type
    if t in _HOST_TYPES:
        return d.CUmemorytype.CU_MEMORYTYPE_HOST
    if t == CUDA:
        return d.CUmemorytype.CU_MEMORYTYPE_DEVICE
    return d.CUmemorytype.CU_MEMORYTYPE_UNIFIED


def _issue(d, ops, dst, src, stream):
    dptr, sptr = dst.data_ptr, src.data_ptr
    if any(op[0] == "2d" for op in ops):
        dtype, stype = _memory_type(d, dst), _memory_type(d, src)
    for op in ops:
        if op[0] == "1d":
            _, doff, soff, n = op
            check(d.cuMemcpyAsync(dptr + doff, sptr + soff, n, stream), "cuMemcpyAsync")
            continue
        _, doff, dpitch, soff, spitch, width, height = op
        p = d.CUDA_MEMCPY2D()
        p.srcMemoryType = stype
        if stype == d.CUmemorytype.CU_MEMORYTYPE_HOST:
            p.srcHost = sptr + soff
        else:
            p.srcDevice = sptr + soff
        p.srcPitch = spitch
        p.dstMemoryType = dtype
        if dtype == d.CUmemorytype.CU_MEMORYTYPE_HOST:
            p.dstHost = dptr + doff
        else:
            p.dstDevice = dptr + doff
        p.dstPitch = dpitch
        p.WidthInBytes = width
        p.Height = height
        check(d.cuMemcpy2DAsync(p, stream), "cuMemcpy2DAsync")


def copy_array(dst, src, stream, *, dst_is_new: bool = True) -> None:
    """Copy ``src`` into ``dst`` (same shape and dtype; any devices of the
    CUDA family or CPU; any strides).

    The copy runs on the consumer's stream (``stream`` as DLPack spells
    it; None is the legacy default stream) after that stream has waited
    for the work pending on ``src`` (and on ``dst`` unless it is new). With
    ``stream=-1`` the copy runs on the source's own stream and nothing
    waits. A copy into host memory (CPU, CPU_PINNED) with ``stream`` None
    or -1 is complete on return: the copy's stream is synchronized, never
    the device. With a stream, nothing blocks.
    """
    rt = runtime()
    d = rt.driver
    handle = stream_handle(stream)
    src_dev = _cuda_device(src)
    dst_dev = _cuda_device(dst)
    home = src_dev if src_dev is not None else dst_dev
    if home is None:
        home = rt.current_device()
    if handle == NO_SYNC:
        s = normalize(src._stream if src_dev is not None or dst_dev is None else dst._stream)
    else:
        s = handle
    s_dev = rt.stream_device(s, home)
    if handle != NO_SYNC:
        if src_dev is not None or src.device.type == CPU_PINNED:
            rt.order(s, s_dev, normalize(src._stream), src_dev if src_dev is not None else s_dev)
        if not dst_is_new and (dst_dev is not None or dst.device.type == CPU_PINNED):
            rt.order(s, s_dev, normalize(dst._stream), dst_dev if dst_dev is not None else s_dev)

    bits = src.dtype.bits * src.dtype.lanes
    itemsize = src.itemsize
    if itemsize == 0:
        if not (_is_c_contiguous(src) and _is_c_contiguous(dst)):
            raise BufferError(f"strided copies of packed sub-byte {src.dtype} data are not supported")
        ops = [("1d", 0, 0, (src.size * bits + 7) // 8)] if src.size else []
    else:
        if src.device.type == CPU and dst.device.type != CPU and not _is_c_contiguous(src):
            # Gather pageable host data on the host: one transfer instead of many.
            src = src.copy()
        ops = plan_copy(src.shape, _byte_strides(dst, itemsize), _byte_strides(src, itemsize), itemsize)

    pushed = rt.enter(s_dev)
    try:
        _issue(d, ops, dst, src, s)
    finally:
        rt.leave(pushed)

    if dst.device.type in _HOST_TYPES:
        if handle == NO_SYNC or stream is None:
            rt.synchronize(s, s_dev)
        elif dst.device.type == CPU_PINNED:
            dst._stream = 0 if s == LEGACY_STREAM else s
    elif s > PER_THREAD_STREAM or dst_dev == s_dev:
        dst._stream = 0 if s == LEGACY_STREAM else s
    else:
        # A default stream of another device cannot be named from dst's
        # device: order dst's legacy default stream after the copy instead.
        rt.order(LEGACY_STREAM, dst_dev, s, s_dev)
        dst._stream = 0


def memset(array, value: int, nbytes: int) -> None:
    """Set the first ``nbytes`` bytes of a fresh C-contiguous Array to
    ``value``, on the Array's stream (host memory: at once, on the host)."""
    if array.device.type in _HOST_TYPES:
        ctypes.memset(array.data_ptr, value, nbytes)
        return
    rt = runtime()
    dev = _cuda_device(array)
    pushed = rt.enter(dev)
    try:
        check(rt.driver.cuMemsetD8Async(array.data_ptr, value, nbytes, normalize(array._stream)),
              "cuMemsetD8Async")
    finally:
        rt.leave(pushed)


def synchronize_for_host(array) -> None:
    """Block until the work pending on the Array's stream is done, so that
    the host can read its memory (pinned or managed): a stream sync."""
    rt = runtime()
    s = normalize(array._stream)
    dev = _cuda_device(array)
    if dev is None:
        dev = rt.current_device()
    rt.synchronize(s, rt.stream_device(s, dev))
