"""Tools to test DLPack producers and consumers, ours and other libraries'.

:mod:`~dlpack_ref.testing.abi`
    The ctypes mirror of the DLPack 1.3 ABI: structs, flags, capsule names,
    the exchange-API function types, private Python C-API prototypes.
:mod:`~dlpack_ref.testing.factory`
    :class:`CapsuleFactory` (hand-built capsules, any field any value,
    deleter calls counted) and :class:`ForeignProducer` (a third-party array
    stand-in handing them out).
:mod:`~dlpack_ref.testing.reader`
    :func:`read_capsule`, :func:`read_values` and :func:`capsule_name` (any
    capsule's fields and values, without consuming it), :class:`Consumed`
    (a capsule taken as a consumer takes it) and :func:`verdict`, the oracle
    of what ``from_dlpack`` must refuse, independent of the core.

Every public name of the three is importable from here.
"""

from .abi import *  # noqa: F401,F403
from .abi import __all__ as _abi_all
from .factory import CapsuleFactory, ForeignProducer
from .reader import DEVICE_POLICY, Consumed, capsule_name, read_capsule, read_values, verdict

__all__ = [*_abi_all, "CapsuleFactory", "ForeignProducer", "DEVICE_POLICY", "Consumed", "capsule_name",
           "read_capsule", "read_values", "verdict"]
