"""Type declarations of the dlpack_ref package: the names of __init__.py,
with every dtype of the table in _dtypes.py as a named attribute
(tests/test_typing.py checks that the two lists agree)."""

from typing import Any, Final

from ._devices import C_ENUMERATORS as C_ENUMERATORS, Device as Device, DeviceType as DeviceType
from ._devices import as_device as as_device
from ._dlpack_ref import (
    CAPSULE_NAMES as CAPSULE_NAMES,
    DLPACK_VERSION as DLPACK_VERSION,
    MAX_NDIM as MAX_NDIM,
    Array as Array,
    CopyForbiddenError as CopyForbiddenError,
    asarray as asarray,
    can_access as can_access,
    empty as empty,
    exchange_api_version as exchange_api_version,
    from_dlpack as from_dlpack,
    get_num_threads as get_num_threads,
    inspect as inspect,
    set_num_threads as set_num_threads,
    zeros as zeros,
)
from ._dtypes import DTYPES as DTYPES, DType as DType, DTypeCode as DTypeCode, as_dtype as as_dtype

__version__: Final[str]

def get_include() -> str: ...

bool: Final[DType]
int8: Final[DType]
int16: Final[DType]
int32: Final[DType]
int64: Final[DType]
uint8: Final[DType]
uint16: Final[DType]
uint32: Final[DType]
uint64: Final[DType]
float16: Final[DType]
float32: Final[DType]
float64: Final[DType]
bfloat16: Final[DType]
complex64: Final[DType]
complex128: Final[DType]
float8_e3m4: Final[DType]
float8_e4m3: Final[DType]
float8_e4m3b11fnuz: Final[DType]
float8_e4m3fn: Final[DType]
float8_e4m3fnuz: Final[DType]
float8_e5m2: Final[DType]
float8_e5m2fnuz: Final[DType]
float8_e8m0fnu: Final[DType]
float6_e2m3fn: Final[DType]
float6_e3m2fn: Final[DType]
float4_e2m1fn: Final[DType]
float4_e2m1fn_x2: Final[DType]
bcomplex32: Final[DType]
