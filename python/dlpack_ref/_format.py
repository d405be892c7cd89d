"""Element encoding and decoding (Python values <-> bytes of every DLPack
dtype), ``tolist`` and ``repr``. Not on the exchange hot path."""

from __future__ import annotations

import bisect
import math
import struct
from functools import lru_cache

from ._dtypes import DType, DTYPES

_STRUCT_CHARS = {
    "bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float16": "e", "float32": "f", "float64": "d",
}

# name -> (exponent bits, mantissa bits, bias, special-value style)
#   ieee:   IEEE-like, all-ones exponent holds inf (mantissa 0) and NaN
#   fn:     finite + NaN: no inf, NaN is every exponent and mantissa bit set
#   fnuz:   finite + NaN, no negative zero: NaN is the bit pattern of -0
#   finite: no inf, no NaN
#   e8m0:   unsigned powers of two, 0xFF is NaN
MINIFLOATS = {
    "float8_e3m4": (3, 4, 3, "ieee"),
    "float8_e4m3": (4, 3, 7, "ieee"),
    "float8_e4m3b11fnuz": (4, 3, 11, "fnuz"),
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
    "float8_e8m0fnu": (8, 0, 127, "e8m0"),
    "float6_e2m3fn": (2, 3, 1, "finite"),
    "float6_e3m2fn": (3, 2, 3, "finite"),
    "float4_e2m1fn": (2, 1, 1, "finite"),
}


def _decode_minifloat(code: int, exp_bits: int, man_bits: int, bias: int, style: str) -> float:
    if style == "e8m0":
        return math.nan if code == 0xFF else math.ldexp(1.0, code - bias)
    total = 1 + exp_bits + man_bits
    sign = -1.0 if code >> (total - 1) & 1 else 1.0
    exp = (code >> man_bits) & ((1 << exp_bits) - 1)
    man = code & ((1 << man_bits) - 1)
    exp_max = (1 << exp_bits) - 1
    if style == "ieee" and exp == exp_max:
        return sign * math.inf if man == 0 else math.nan
    if style == "fn" and exp == exp_max and man == (1 << man_bits) - 1:
        return math.nan
    if style == "fnuz" and code == 1 << (total - 1):
        return math.nan
    if exp == 0:
        return sign * math.ldexp(man, 1 - bias - man_bits)
    return sign * math.ldexp((1 << man_bits) + man, exp - bias - man_bits)


@lru_cache(maxsize=None)
def minifloat_table(name: str) -> tuple[float, ...]:
    """Every code of a float8/6/4 type decoded, indexed by code."""
    exp_bits, man_bits, bias, style = MINIFLOATS[name]
    n = 1 << (exp_bits + man_bits + (0 if style == "e8m0" else 1))
    return tuple(_decode_minifloat(c, exp_bits, man_bits, bias, style) for c in range(n))


@lru_cache(maxsize=None)
def _encode_plan(name: str):
    table = minifloat_table(name)
    finite = sorted((v, c) for c, v in enumerate(table) if math.isfinite(v) and not (v == 0 and math.copysign(1, v) < 0))
    nan_code = next((c for c, v in enumerate(table) if math.isnan(v)), None)
    pos_inf = next((c for c, v in enumerate(table) if v == math.inf), None)
    neg_inf = next((c for c, v in enumerate(table) if v == -math.inf), None)
    neg_zero = next((c for c, v in enumerate(table) if v == 0 and math.copysign(1, v) < 0), None)
    return finite, nan_code, pos_inf, neg_inf, neg_zero


def encode_minifloat(name: str, value: float) -> int:
    """Round-to-nearest-even encoding of ``value``; overflow goes to inf
    where the type has one, else NaN, else saturates (float6/float4)."""
    value = float(value)
    if name == "float8_e8m0fnu":
        return _e8m0_encode(value)
    finite, nan_code, pos_inf, neg_inf, neg_zero = _encode_plan(name)
    if math.isnan(value):
        if nan_code is None:
            raise ValueError(f"{name} has no NaN")
        return nan_code
    lo, hi = finite[0][0], finite[-1][0]
    if value > hi or value < lo:
        # Past the largest finite value by at least half a step: overflow.
        step = hi - finite[-2][0] if value > 0 else finite[1][0] - lo
        edge = hi if value > 0 else lo
        if abs(value - edge) >= step / 2 or math.isinf(value):
            inf = pos_inf if value > 0 else neg_inf
            if inf is not None:
                return inf
            if nan_code is not None:
                return nan_code
        return finite[-1][1] if value > 0 else finite[0][1]
    i = bisect.bisect_left(finite, (value, -1))
    candidates = [finite[j] for j in (i - 1, i) if 0 <= j < len(finite)]
    best = min(candidates, key=lambda vc: (abs(vc[0] - value), vc[1] & 1))
    if best[0] == 0 and math.copysign(1, value) < 0 and neg_zero is not None:
        return neg_zero
    return best[1]


def _e8m0_encode(value: float) -> int:
    """float8_e8m0fnu the way PyTorch, JAX and ml_dtypes round it: from the
    float32 bits, round to nearest with ties to even where the implied
    mantissa bit (1 for normal float32, 0 for subnormal) is the LSB, so
    normal ties go up. Zero, negatives, inf and NaN give NaN (0xFF)."""
    if not value > 0 or math.isinf(value):
        return 0xFF
    bits = struct.unpack("<I", struct.pack("<f", value))[0] if value <= 3.4028234663852886e38 else 0x7F800000
    exponent = (bits >> 23) & 0xFF
    guard = bits & 0x400000
    rest = bits & 0x3FFFFF
    if guard and (rest or exponent > 0):
        exponent += 1
    return min(exponent, 0xFF)


def _bf16_encode(value: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if math.isnan(value):
        return 0x7FC0
    rounding = 0x7FFF + ((bits >> 16) & 1)
    return ((bits + rounding) >> 16) & 0xFFFF


def _bf16_decode(code: int) -> float:
    return struct.unpack("<f", struct.pack("<I", code << 16))[0]


def encode(dtype: DType, values: list) -> bytes:
    """Bytes of ``values`` (a flat list of Python scalars) stored as ``dtype``
    (sub-byte types one element per byte)."""
    name = dtype.name
    ch = _STRUCT_CHARS.get(name)
    if ch is not None:
        if dtype.kind in ("signed integer", "unsigned integer"):
            info_bits = dtype.bits
            lo, hi = ((-(1 << (info_bits - 1)), (1 << (info_bits - 1)) - 1) if dtype.kind == "signed integer"
                      else (0, (1 << info_bits) - 1))
            out = []
            for v in values:
                if isinstance(v, float) or isinstance(v, complex):
                    raise TypeError(f"cannot store {v!r} in an integer Array ({name}) without losing it")
                iv = int(v)
                if iv < lo or iv > hi:
                    raise OverflowError(f"{iv} is out of range for {name} [{lo}, {hi}]")
                out.append(iv)
            values = out
        elif dtype.kind == "real floating":
            values = [_real(v, name) for v in values]
        return struct.pack(f"<{len(values)}{ch}", *values)
    if name in ("complex64", "complex128"):
        flat = []
        for v in values:
            c = complex(v)
            flat.extend((c.real, c.imag))
        return struct.pack(f"<{len(flat)}{'f' if name == 'complex64' else 'd'}", *flat)
    if name == "bfloat16":
        return struct.pack(f"<{len(values)}H", *[_bf16_encode(_real(v, name)) for v in values])
    if name == "float4_e2m1fn_x2":
        out = bytearray()
        for v in values:
            lo_v, hi_v = v
            out.append(encode_minifloat("float4_e2m1fn", lo_v) | encode_minifloat("float4_e2m1fn", hi_v) << 4)
        return bytes(out)
    if name in MINIFLOATS:
        return bytes(encode_minifloat(name, _real(v, name)) for v in values)
    raise TypeError(f"cannot encode values as {name}")


def _real(v, name):
    if isinstance(v, complex):
        raise TypeError(f"cannot store complex {v!r} in a real Array ({name})")
    return float(v)


def decode(dtype: DType, raw: bytes, count: int, packed: bool) -> list:
    """Flat list of ``count`` Python scalars from the C-order bytes ``raw``."""
    name = dtype.name
    ch = _STRUCT_CHARS.get(name)
    if ch is not None:
        return list(struct.unpack_from(f"<{count}{ch}", raw))
    if name in ("complex64", "complex128"):
        flat = struct.unpack_from(f"<{2 * count}{'f' if name == 'complex64' else 'd'}", raw)
        return [complex(flat[2 * i], flat[2 * i + 1]) for i in range(count)]
    if name == "bfloat16":
        return [_bf16_decode(c) for c in struct.unpack_from(f"<{count}H", raw)]
    if name == "float4_e2m1fn_x2":
        t = minifloat_table("float4_e2m1fn")
        return [(t[b & 0xF], t[b >> 4]) for b in raw[:count]]
    if name in MINIFLOATS:
        table = minifloat_table(name)
        if packed and dtype.bits < 8:
            codes = unpack_bits(raw, dtype.bits, count)
        else:
            mask = (1 << dtype.bits) - 1
            codes = [b & mask for b in raw[:count]]
        return [table[c] for c in codes]
    raise TypeError(f"cannot decode {name}")


def unpack_bits(raw: bytes, bits: int, count: int) -> list[int]:
    """Codes of ``bits`` width packed little bit-endian (first element in the
    lowest bits of the first byte)."""
    acc = int.from_bytes(raw, "little")
    mask = (1 << bits) - 1
    return [(acc >> (i * bits)) & mask for i in range(count)]


def _nest(flat: list, shape: tuple):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = 1
    for s in shape[1:]:
        step *= s
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def to_list(a) -> object:
    count = a.size
    raw = a._host_bytes() if count else b""
    flat = decode(a.dtype, raw, count, not a.subbyte_padded)
    return _nest(flat, a.shape) if a.ndim else flat[0]


def array_repr(a) -> str:
    extras = []
    if a.device.type != 1:
        extras.append(f"device={str(a.device)!r}")
    if a.readonly:
        extras.append("readonly=True")
    try:
        if a.size > 1000:
            body = f"<{a.size} elements>"
        else:
            body = repr(a.tolist())
    except Exception as exc:  # e.g. CUDA data without a driver
        body = f"<unreadable: {type(exc).__name__}>"
    tail = "".join(", " + e for e in extras)
    return f"Array({body}, shape={a.shape}, dtype={a.dtype.name}{tail})"
