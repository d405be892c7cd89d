"""Devices: ``DeviceType`` (the C ``DLDeviceType`` under array API names) and
``Device``. The in-place access table is ``can_access`` in the core, next to
the exports that consult it."""

from __future__ import annotations

__all__ = ["DeviceType", "Device", "as_device", "C_ENUMERATORS", "SUPPORTED", "HOST_ACCESSIBLE", "CUDA_FAMILY", "CUDA_DEVICE_BOUND",
           "ROCM_FAMILY"]

import enum
import sys


class DeviceType(enum.IntEnum):
    """``DLDeviceType``. Names follow the array API standard where it gives
    one; the rest of DLPack 1.3 (and of upstream's main branch since: TPU,
    TPU_PINNED, ASCEND) is named in the same style, host memory pinned by a
    device's runtime as ``<DEVICE>_PINNED``. The values are the C
    enumerators' values, so ``DeviceType.CPU == 1 == kDLCPU``."""

    CPU = 1
    CUDA = 2
    CPU_PINNED = 3
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_PINNED = 11
    EXT_DEV = 12
    CUDA_MANAGED = 13
    ONE_API = 14
    WEBGPU = 15
    HEXAGON = 16
    MAIA = 17
    TRN = 18
    TPU = 19
    TPU_PINNED = 20
    ASCEND = 21


#: DeviceType member -> the C enumerator of dlpack.h it stands for.
C_ENUMERATORS = {
    DeviceType.CPU: "kDLCPU",
    DeviceType.CUDA: "kDLCUDA",
    DeviceType.CPU_PINNED: "kDLCUDAHost",
    DeviceType.OPENCL: "kDLOpenCL",
    DeviceType.VULKAN: "kDLVulkan",
    DeviceType.METAL: "kDLMetal",
    DeviceType.VPI: "kDLVPI",
    DeviceType.ROCM: "kDLROCM",
    DeviceType.ROCM_PINNED: "kDLROCMHost",
    DeviceType.EXT_DEV: "kDLExtDev",
    DeviceType.CUDA_MANAGED: "kDLCUDAManaged",
    DeviceType.ONE_API: "kDLOneAPI",
    DeviceType.WEBGPU: "kDLWebGPU",
    DeviceType.HEXAGON: "kDLHexagon",
    DeviceType.MAIA: "kDLMAIA",
    DeviceType.TRN: "kDLTrn",
    DeviceType.TPU: "kDLTPU",
    DeviceType.TPU_PINNED: "kDLTPUHost",
    DeviceType.ASCEND: "kDLAscend",
}

# The device families: the one place they are written. The core builds its C
# predicates from these sets at import; the CUDA layer and the conformance
# checker read them from here.

#: Memory dlpack-ref can hold and import. It allocates on the CPU and in the
#: CUDA family; TPU_PINNED memory (host memory the TPU runtime pinned, as JAX
#: exports it) is held and read in place, never allocated.
SUPPORTED = frozenset({DeviceType.CPU, DeviceType.CUDA, DeviceType.CPU_PINNED, DeviceType.CUDA_MANAGED,
                       DeviceType.TPU_PINNED})
#: Memory the host reads and writes in place.
HOST_ACCESSIBLE = frozenset({DeviceType.CPU, DeviceType.CPU_PINNED, DeviceType.CUDA_MANAGED, DeviceType.TPU_PINNED})
#: Memory allocated, copied and ordered through the CUDA driver.
CUDA_FAMILY = frozenset({DeviceType.CUDA, DeviceType.CPU_PINNED, DeviceType.CUDA_MANAGED})
#: CUDA memory whose device id names a GPU (pinned host memory has none).
CUDA_DEVICE_BOUND = frozenset({DeviceType.CUDA, DeviceType.CUDA_MANAGED})
#: Memory whose `stream` values are ROCm's (HIP streams), as pinned memory's
#: are CUDA's in the CUDA family. dlpack-ref holds none of it; the vendorable
#: header parses its streams for the libraries that do.
ROCM_FAMILY = frozenset({DeviceType.ROCM, DeviceType.ROCM_PINNED})

_BY_NAME = {m.name.lower(): m for m in DeviceType}
_BY_NAME.update({"gpu": DeviceType.CUDA, "pinned": DeviceType.CPU_PINNED, "managed": DeviceType.CUDA_MANAGED})


class Device:
    """A ``(device type, device id)`` pair with ``__dlpack_device__``
    (data-apis/array-api#972). Compares equal to other Devices only."""

    __slots__ = ("_type", "_id", "__weakref__")

    def __init__(self, type, id: int = 0):
        if isinstance(type, str) and ":" in type:
            if id != 0:
                raise ValueError(f"device {type!r} already names its id; pass Device({type!r}) or Device(name, id)")
            d = as_device(type)
            type, id = d._type, d._id
        if isinstance(type, str):
            try:
                type = _BY_NAME[type.strip().lower()]
            except KeyError:
                raise ValueError(f"unknown device type {type!r}; expected one of {sorted(_BY_NAME)}") from None
        if isinstance(type, bool) or not isinstance(type, int):
            raise TypeError(f"device type must be a DeviceType, an int or a name, not {type!r}")
        try:
            type = DeviceType(type)
        except ValueError:
            raise ValueError(
                f"{type} is not a DLPack 1.3 device type; expected one of "
                f"{[int(m) for m in DeviceType]}"
            ) from None
        if isinstance(id, bool) or not isinstance(id, int):
            raise TypeError(f"device id must be an int, not {id!r}")
        if id < 0 or id > 0x7FFFFFFF:
            raise ValueError(f"device id must be in [0, 2**31), got {id}")
        self._type = type
        self._id = int(id)

    @property
    def type(self) -> DeviceType:
        return self._type

    @property
    def id(self) -> int:
        return self._id

    def __dlpack_device__(self) -> tuple[DeviceType, int]:
        return (self._type, self._id)

    def __eq__(self, other):
        if isinstance(other, Device):
            return self._type == other._type and self._id == other._id
        return NotImplemented

    def __hash__(self):
        return hash((int(self._type), self._id))

    def __repr__(self):
        return f"Device({self._type.name.lower()!r}, {self._id})"

    def __str__(self):
        return f"{self._type.name.lower()}:{self._id}"

    def __reduce__(self):
        return (Device, (int(self._type), self._id))


def as_device(obj) -> Device:
    """Resolve ``obj`` to a :class:`Device`.

    Accepted, in this order: a Device; a string (``"cpu"``, ``"cuda:1"``,
    ``"cuda_managed:0"``, ``"cpu_pinned"``); a ``(type, id)`` tuple; any object
    with ``__dlpack_device__`` (arrays and other libraries' devices); a
    ``torch.device`` (by its ``type`` and ``index``; no index means id 0, as
    ``"cuda"`` does here); a JAX device (by its ``platform`` and
    ``local_hardware_id``, else ``id``); the device object of any array API
    library (array-api-strict's ``Device``, for one), as the
    ``__dlpack_device__`` of an empty array that library makes on it. No
    library is imported to interpret its objects.

    Parameters
    ----------
    obj : object
        The device to resolve.

    Returns
    -------
    Device

    Raises
    ------
    TypeError
        When ``obj`` is none of the above.
    ValueError
        When it names a device DLPack 1.3 has no type for, or a malformed one.
    """
    if isinstance(obj, Device):
        return obj
    if isinstance(obj, str):
        name, sep, num = obj.strip().partition(":")
        if sep and not num.strip().isdigit():
            raise ValueError(f"cannot parse device {obj!r}: the id after ':' must be a non-negative integer")
        return Device(name, int(num) if sep else 0)
    if isinstance(obj, tuple):
        if len(obj) != 2:
            raise ValueError(f"a device tuple must be (device_type, device_id), got {obj!r}")
        return Device(obj[0], obj[1])
    proto = getattr(obj, "__dlpack_device__", None)
    if proto is not None:
        t = proto()
        if not isinstance(t, tuple) or len(t) != 2:
            raise ValueError(f"__dlpack_device__() of {type(obj).__name__} returned {t!r}, not (type, id)")
        return Device(int(t[0]), int(t[1]))
    foreign = _named_device(obj) or _array_api_device(obj)
    if foreign is not None:
        return foreign
    raise TypeError(
        f"cannot interpret {obj!r} (type {type(obj).__name__}) as a device; expected a Device, "
        "a string such as 'cpu' or 'cuda:0', a (type, id) tuple, an object with __dlpack_device__, "
        "a torch or JAX device, or an array API library's device"
    )


# Platform names other libraries give their devices, where they differ from
# the DeviceType names (which are accepted too).
_FOREIGN_PLATFORMS = {"mps": DeviceType.METAL, "xpu": DeviceType.ONE_API}
_ABSENT = object()


def _named_device(obj) -> Device | None:
    """A torch.device (``type``, ``index``) or a JAX device (``platform``,
    ``local_hardware_id``/``id``) by those documented attributes; None for
    an object that has neither pair."""
    kind, index = getattr(obj, "type", None), getattr(obj, "index", _ABSENT)
    if isinstance(kind, str) and (index is None or (isinstance(index, int) and not isinstance(index, bool))):
        # PyTorch's ROCm builds call HIP devices "cuda" and export them as ROCm.
        torch = sys.modules.get("torch")
        hip = kind == "cuda" and getattr(getattr(torch, "version", None), "hip", None)
        return _platform_device(obj, "rocm" if hip else kind, index or 0)
    platform, ident = getattr(obj, "platform", None), getattr(obj, "id", None)
    if isinstance(platform, str) and isinstance(ident, int):
        local = getattr(obj, "local_hardware_id", None)
        version = str(getattr(getattr(obj, "client", None), "platform_version", "")).lower()
        return _platform_device(obj, "rocm" if platform == "gpu" and "rocm" in version else platform,
                                local if isinstance(local, int) else ident)
    return None


def _platform_device(obj, platform: str, ident: int) -> Device:
    member = _FOREIGN_PLATFORMS.get(platform.lower()) or _BY_NAME.get(platform.lower())
    if member is None:
        raise ValueError(f"{obj!r} is a {platform!r} device, for which DLPack 1.3 has no device type")
    return Device(member, ident)


def _array_api_device(obj) -> Device | None:
    """An array API library's device object, as the device of an empty array
    the library makes there: the namespace is the already imported top-level
    module of ``obj``'s type, and it must list ``obj`` among its
    ``__array_namespace_info__().devices()``. None otherwise."""
    namespace = sys.modules.get((type(obj).__module__ or "").partition(".")[0])
    info = getattr(namespace, "__array_namespace_info__", None)
    if info is None or not hasattr(namespace, "empty") or obj not in info().devices():
        return None
    return as_device(namespace.empty((0,), device=obj))
