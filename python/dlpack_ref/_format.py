"""Python-level views of the element codecs.

The codecs themselves (every dtype to and from every other, Python values
in and out) are C loops in the core (src/dlref_kernels.h); the functions
here read them one value at a time, for tests and for people who want to
see a single code.
"""

from __future__ import annotations

from functools import lru_cache

from . import _dlpack_ref as _core
from ._dtypes import DType, DTYPES

#: name -> (exponent bits, mantissa bits, bias, special-value style) of the
#: float8/6/4 types, read from the kernels' own table. Styles: ``ieee``
#: (all-ones exponent holds inf and NaN), ``fn`` (no inf; NaN is all ones),
#: ``fnuz`` (no inf, no -0; NaN is the bit pattern of -0), ``finite`` (no
#: inf, no NaN), ``e8m0`` (unsigned powers of two, 0xFF is NaN).
MINIFLOATS = _core._minifloat_params()


def _code_bits(name: str) -> int:
    exp_bits, man_bits, _, style = MINIFLOATS[name]
    return 8 if style == "e8m0" else 1 + exp_bits + man_bits


@lru_cache(maxsize=None)
def minifloat_table(name: str) -> tuple[float, ...]:
    """Every code of a float8/6/4 type decoded, indexed by code."""
    n = 1 << _code_bits(name)
    return tuple(_core._from_bytes(bytes(range(n)), name, n).tolist())


def encode_minifloat(name: str, value: float) -> int:
    """The code of ``value`` in a float8/6/4 type (the rounding of
    docs/semantics.md, "Conversions")."""
    return _core._from_values(float(value), name)._host_bytes()[0]


def decode(dtype: DType, raw: bytes, count: int, packed: bool) -> list:
    """Flat list of ``count`` Python scalars stored in ``raw`` (sub-byte
    codes packed little bit-endian when ``packed``, else one per byte)."""
    return _core._from_bytes(raw, dtype, count, not packed).tolist()


def _bf16_decode(code: int) -> float:
    return decode(DTYPES["bfloat16"], code.to_bytes(2, "little"), 1, False)[0]


def _bf16_encode(value: float) -> int:
    return int.from_bytes(_core._from_values(float(value), "bfloat16")._host_bytes(), "little")


def unpack_bits(raw: bytes, bits: int, count: int) -> list[int]:
    """Codes of ``bits`` width packed little bit-endian (first element in the
    lowest bits of the first byte)."""
    acc = int.from_bytes(raw, "little")
    mask = (1 << bits) - 1
    return [(acc >> (i * bits)) & mask for i in range(count)]
