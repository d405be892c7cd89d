# Devices: the Device objects of DLDevices, parsing, the device families
# (C predicates generated from python/dlpack_ref/_devices.py into
# dlpack_ref_tables.h) and the one in-place access table.

from cpython.long cimport PyLong_AsLongLongAndOverflow

from dlpack_ref._devices import Device as _Device, DeviceType as _DeviceType, as_device as _as_device

cdef dict _device_cache = {}
cdef dict _dlpack_device_cache = {}
cdef tuple _CPU_DLPACK_DEVICE = (_DeviceType.CPU, 0)


cdef object _device_object(DLDevice d):
    key = (<int>d.device_type, d.device_id)
    dev = _device_cache.get(key)
    if dev is None:
        dev = _Device(<int>d.device_type, d.device_id)
        _device_cache[key] = dev
    return dev


cdef object _dlpack_device_tuple(DLDevice d):
    if d.device_type == kDLCPU and d.device_id == 0:
        return _CPU_DLPACK_DEVICE
    key = (<int>d.device_type, d.device_id)
    t = _dlpack_device_cache.get(key)
    if t is None:
        t = (_DeviceType(<int>d.device_type), d.device_id)
        _dlpack_device_cache[key] = t
    return t


cdef DLDevice _parse_device(object device) except *:
    """A DLDevice from anything as_device accepts; the common (type, id)
    tuples of ints skip the Python layer."""
    cdef DLDevice d
    if type(device) is str and <str>device == "cpu":
        d.device_type = kDLCPU
        d.device_id = 0
        return d
    cdef long long type_value, id_value
    cdef int overflow = 0
    if type(device) is tuple and len(<tuple>device) == 2:
        t, i = <tuple>device
        if (type(t) is int or isinstance(t, _DeviceType)) and type(i) is int:
            # C comparisons: this is every import's device check.
            type_value = PyLong_AsLongLongAndOverflow(t, &overflow)
            if not overflow:
                id_value = PyLong_AsLongLongAndOverflow(i, &overflow)
            if not overflow and 0 <= id_value <= 0x7FFFFFFF and 1 <= type_value <= 0x7FFFFFFF \
                    and dlpack_ref_device_type_known(<int32_t>type_value):
                d.device_type = <DLDeviceType><int>type_value
                d.device_id = <int32_t>id_value
                return d
    dev = _as_device(device)
    d.device_type = <DLDeviceType><int>dev.type
    d.device_id = <int32_t>dev.id
    return d


cdef inline bint _can_access(DLDevice dev, DLDevice mem) noexcept nogil:
    # The one table of in-place access, in include/dlpack_ref.h; docs/semantics.md prints it.
    return dlpack_ref_can_access(dev, mem)


def can_access(device, memory_device):
    """Whether code on ``device`` can use memory that lives on
    ``memory_device`` in place, without a copy.

    CPU reads CPU, CPU_PINNED, CUDA_MANAGED, ROCM_PINNED and TPU_PINNED
    memory in place; CUDA:k reads CUDA:k, CUDA_MANAGED and CPU_PINNED
    memory; TPU:k reads TPU_PINNED memory; every device reads its own
    memory. CPU device ids carry no meaning (there is one host).
    """
    return _can_access(_parse_device(device), _parse_device(memory_device))


# --- CUDA, loaded only when a CUDA device is involved ------------------------

# The record of pending work, made for every Array on CUDA-family memory;
# its import loads neither cuda-python nor a driver.
from dlpack_ref._cuda_streams import PendingWork as _PendingWork

cdef object _cuda_module = None

cdef object _cuda():
    """dlpack_ref._cuda_layer, the calls into the CUDA layer, once the
    driver is loaded (CUDAUnavailableError names what is missing:
    cuda-python, the driver, or a device)."""
    global _cuda_module
    if _cuda_module is None:
        from dlpack_ref import _cuda_layer as mod
        mod.require()
        _cuda_module = mod
    return _cuda_module
