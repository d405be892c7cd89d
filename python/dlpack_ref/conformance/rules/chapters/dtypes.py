"""Element types: each dtype exported with its DLPack (code, bits, lanes),
imported with its values and type, or refused with BufferError."""

from __future__ import annotations

import struct

import dlpack_ref as dr
from dlpack_ref._dtypes import DTYPES
from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.subject import NotSupported, export_any
from dlpack_ref.testing.factory import CapsuleFactory, ForeignProducer
from dlpack_ref.testing.reader import read_capsule

from ..breaking.consumers import Importer, Widening
from ..breaking.producers import Retyped
from ..breaking.surgery import managed
from ..consumer_cases import attempt, import_made, judged
from ..consumer_judges import refused, refuses_with_buffererror
from ..support import CheckFailed
from ..table import breaks, rule
from .malformed import ACCEPTED


# --- producers ----------------------------------------------------------------------------

#: dtype name -> its (code, bits, lanes), from dlpack-ref's dtype table.
DTYPE_TRIPLES = {name: dt.__dlpack_data_type__() for name, dt in DTYPES.items()}


def exported_dtypes(p, names: list[str]) -> str:
    """The check of a dtype rule: each array of ``names`` the library makes
    exports with the DLPack (code, bits, lanes) of that name, or is refused
    with BufferError."""
    done, refused, bad = [], [], []
    for name in names:
        try:
            x = p.make(name, (4,))
        except NotSupported:
            continue
        want = DTYPE_TRIPLES[name]
        try:
            info = read_capsule(export_any(x))
        except BufferError:
            refused.append(name)
            continue
        except Exception as e:
            bad.append(f"{name}: export raised {exc_name(e)}: {short(e, 100)}")
            continue
        if info["dtype"] != want:
            bad.append(f"{name}: exported (code, bits, lanes)={info['dtype']}, expected {want}")
        else:
            done.append(f"{name}={want}")
    if bad:
        raise CheckFailed("; ".join(bad + [f"ok: {', '.join(done)}"] if done else bad))
    if not done:
        extra = f" (refused with BufferError: {', '.join(refused)})" if refused else ""
        raise NotSupported(f"none of {', '.join(names)} can be made and exported{extra}")
    return ", ".join(done) + (f"; refused with BufferError: {', '.join(refused)}" if refused else "")


@rule(side="producer", source="header", where="DLDataTypeCode, kDLBool (bits 8)")
def dtype_bool(p) -> str:
    """bool arrays export with the DLPack type code (bool)"""
    return exported_dtypes(p, ["bool"])


@breaks(dtype_bool, shows="bool: exported (code, bits, lanes)=(1, 8, 1)")
class BoolAsUint8(Retyped):
    """Exports bool as uint8 (1, 8, 1)."""

    retyped = {DTYPE_TRIPLES["bool"]: (1, 8, 1)}


@rule(side="producer", source="header", where="DLDataTypeCode, kDLComplex; kDLBcomplex (bits 32)")
def dtype_complex(p) -> str:
    """complex arrays export with the DLPack type code (complex64, complex128; bcomplex32, two bfloat16, with
    kDLBcomplex, not as kDLComplex of 32 bits)"""
    return exported_dtypes(p, ["complex64", "complex128", "bcomplex32"])


@breaks(dtype_complex, shows="complex64: exported (code, bits, lanes)=(2, 32, 2)")
class ComplexAsFloatPairs(Retyped):
    """Exports complex64 / complex128 as 2-lane float32 / float64."""

    retyped = {DTYPE_TRIPLES["complex64"]: (2, 32, 2), DTYPE_TRIPLES["complex128"]: (2, 64, 2)}


@rule(side="producer", source="header", where="DLDataTypeCode, kDLBfloat (bits 16)")
def dtype_bfloat16(p) -> str:
    """bfloat16 arrays export with the DLPack type code (bfloat16)"""
    return exported_dtypes(p, ["bfloat16"])


@breaks(dtype_bfloat16, shows="bfloat16: exported (code, bits, lanes)=(2, 16, 1)")
class BfloatAsFloat16(Retyped):
    """Exports bfloat16 with the float16 code (2, 16, 1)."""

    retyped = {DTYPE_TRIPLES["bfloat16"]: (2, 16, 1)}


@rule(side="producer", source="header", where="DLDataTypeCode, kDLFloat8_* (DLPack 1.1)")
def dtype_float8(p) -> str:
    """float8 arrays export with the DLPack type code (float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float8_e4m3fn,
    float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu)"""
    return exported_dtypes(p, [name for name in DTYPE_TRIPLES if name.startswith("float8")])


@breaks(dtype_float8, shows="float8_e4m3fn: exported (code, bits, lanes)=(1, 8, 1)")
class Float8AsUint8(Retyped):
    """Exports every float8 dtype as its bytes, uint8 (1, 8, 1)."""

    retyped = {triple: (1, 8, 1) for name, triple in DTYPE_TRIPLES.items() if name.startswith("float8")}


@rule(side="producer", source="header", where="DLDataTypeCode, kDLFloat4_e2m1fn: bits 4, lanes 1 or 2 (x2)")
def dtype_float4(p) -> str:
    """float4 arrays export with the DLPack type code (float4_e2m1fn, float4_e2m1fn_x2)"""
    return exported_dtypes(p, ["float4_e2m1fn", "float4_e2m1fn_x2"])


@breaks(dtype_float4, shows="float4_e2m1fn: exported (code, bits, lanes)=(2, 4, 1)")
class Float4AsFloatCode(Retyped):
    """Exports float4_e2m1fn with the plain float code, (2, 4, lanes)."""

    retyped = {DTYPE_TRIPLES["float4_e2m1fn"]: (2, 4, 1), DTYPE_TRIPLES["float4_e2m1fn_x2"]: (2, 4, 2)}


# --- consumers ----------------------------------------------------------------------------

#: dtype name -> its (code, bits, lanes) and three values it holds exactly.
ELEMENT_CASES = {
    "int8": ((0, 8, 1), [-3, 0, 5]), "int16": ((0, 16, 1), [-300, 0, 5]),
    "int32": ((0, 32, 1), [-70000, 0, 5]), "int64": ((0, 64, 1), [-(1 << 40), 0, 5]),
    "uint8": ((1, 8, 1), [0, 7, 250]), "uint16": ((1, 16, 1), [0, 7, 65000]),
    "uint32": ((1, 32, 1), [0, 7, 4000000000]), "uint64": ((1, 64, 1), [0, 7, 1 << 63]),
    "float16": ((2, 16, 1), [0.5, -1.25, 3.0]), "float32": ((2, 32, 1), [0.5, -1.25, 3.0]),
    "bfloat16": ((4, 16, 1), [0.5, -1.25, 3.0]),
}


#: (code, bits) -> the struct format of one element (bfloat16: the high half of a float32's).
ELEMENT_FORMATS = {(0, 8): "b", (0, 16): "h", (0, 32): "i", (0, 64): "q", (1, 8): "B", (1, 16): "H",
                   (1, 32): "I", (1, 64): "Q", (2, 16): "e", (2, 32): "f"}


def element_bytes(name: str) -> bytes:
    """The values of ELEMENT_CASES[name] as the bytes of a C array of that type."""
    (code, bits, _), values = ELEMENT_CASES[name]
    if code == 4:
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack(f"<{len(values)}{ELEMENT_FORMATS[code, bits]}", *values)


def element_type_of(r):
    """The (code, bits, lanes) of a result, from its own export."""
    return read_capsule(export_any(r))["dtype"]


def imports_element_types(c, names: list[str]) -> str:
    """The check of an element-type rule: each tensor of ``names`` imports
    with its values and its own element type (read from the result's
    export), or is refused (with which exception is another rule's point)."""
    if c.shapeless:
        raise NotSupported("the results are byte buffers without a dtype: any element type is bytes to this "
                           "consumer")
    done, refused_with, bad, untold = [], [], [], []
    for name in names:
        triple, values = ELEMENT_CASES[name]
        out = attempt(c, ForeignProducer(CapsuleFactory(keep_freed=True), shape=(3,), dtype=triple,
                                         fill=element_bytes(name)))
        if refused(out):
            # which exception a refusal raises is the dtype_unknown_code rule's point, not this one's
            refused_with.append(f"{name} ({out['exc'][0]})")
            continue
        if "values" in out and out["values"] != values:
            bad.append(f"{name}: values {out['values']!r}, expected {values!r}")
            continue
        try:
            got = element_type_of(out["result"])
        except Exception:
            got = None
        if got is None:
            kinds = sorted({type(v).__name__ for v in out.get("values", [])})
            want = "int" if triple[0] in (0, 1) else "float"
            if kinds and kinds != [want]:
                bad.append(f"{name}: values read as {'/'.join(kinds)}, not {want}")
            else:
                untold.append(name)
        elif got != triple:
            bad.append(f"{name}: imported as (code, bits, lanes)={got}, expected {triple}")
        else:
            done.append(name)
    if bad:
        raise CheckFailed("; ".join(bad + ([f"ok: {', '.join(done)}"] if done else [])))
    if not done:
        why = [f"refused: {', '.join(refused_with)}"] if refused_with else []
        why += [f"the element type of the results cannot be read: {', '.join(untold)}"] if untold else []
        raise NotSupported("none of " + ", ".join(names) + " could be judged (" + "; ".join(why) + ")")
    notes = [f"kept: {', '.join(done)}"]
    notes += [f"refused: {', '.join(refused_with)}"] if refused_with else []
    notes += [f"element type not readable: {', '.join(untold)}"] if untold else []
    return "; ".join(notes)


@rule(side="consumer", source="array-api", where="from_dlpack: the result holds the data of x")
def dtype_signed(c):
    """int8, int16, int32 and int64 tensors import with their values and element type (never widened), or are refused"""
    return imports_element_types(c, ["int8", "int16", "int32", "int64"])


@breaks(dtype_signed, shows="int8: imported as (code, bits, lanes)=(0, 64, 1)")
class WidensSigned(Widening):
    """Widens int8, int16 and int32 results to int64."""

    widened = {"int8": "int64", "int16": "int64", "int32": "int64"}


@rule(side="consumer", source="array-api", where="from_dlpack: the result holds the data of x")
def dtype_unsigned(c):
    """uint8, uint16, uint32 and uint64 tensors import with their values and element type (never widened), or are
    refused"""
    return imports_element_types(c, ["uint8", "uint16", "uint32", "uint64"])


@breaks(dtype_unsigned, shows="uint8: values [0, 7, -6], expected [0, 7, 250]")
class UnsignedAsSigned(Importer):
    """Reads unsigned integers as signed ones of the same width."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["dtype"][0] == 1:
            managed(capsule)[0].dl_tensor.dtype.code = 0
        return capsule


@rule(side="consumer", source="array-api", where="from_dlpack: the result holds the data of x")
def dtype_narrow_float(c):
    """float16, bfloat16 and float32 tensors import with their values and element type (never widened), or are
    refused"""
    return imports_element_types(c, ["float16", "bfloat16", "float32"])


@breaks(dtype_narrow_float, shows="float16: imported as (code, bits, lanes)=(2, 64, 1)")
class WidensNarrowFloats(Widening):
    """Widens float16, bfloat16 and float32 results to float64."""

    widened = {"float16": "float64", "bfloat16": "float64", "float32": "float64"}


@rule(side="consumer", source="array-api", where="from_dlpack, Raises: BufferError (incompatible dtype)")
def dtype_unknown_code(c):
    """an unknown dtype code (99) is refused with BufferError"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=(99, 32, 1)), refuses_with_buffererror,
                  about_dtype=True)


@breaks(dtype_unknown_code, shows="refused with TypeError, not BufferError")
class TypeErrorForUnknownCode(Importer):
    """Refuses an unknown dtype code with TypeError, not BufferError."""

    def refused(self, error, asked):
        if asked.info is not None and asked.info["dtype"][0] not in set(map(int, dr.DTypeCode)):
            raise TypeError(f"unknown dtype code {asked.info['dtype'][0]}") from error
        raise error


@rule(side="consumer", source="array-api", where="from_dlpack, Raises: BufferError (incompatible dtype)")
def dtype_bad_bits(c):
    """float with 24 bits is refused with BufferError"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=(2, 24, 1)), refuses_with_buffererror,
                  about_dtype=True)


@breaks(dtype_bad_bits, shows="refused with ValueError, not BufferError")
class ValueErrorForBadBits(Importer):
    """Refuses a float of an unknown width with ValueError, not BufferError."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["dtype"][0] == 2 and info["dtype"][1] not in (8, 16, 32, 64):
            raise ValueError(f"no float of {info['dtype'][1]} bits")
        return capsule


def with_element_type(c, out: dict) -> dict:
    """``out`` with the element type of its result, read from the result's
    own export (``None`` when it cannot be read)."""
    if "result" in out:
        try:
            out["element_type"] = element_type_of(out["result"])
        except Exception:
            out["element_type"] = None
    return out


def refuses_or_keeps_lanes(out, problems, want):
    if not refused(out) and out.get("element_type") == (2, 32, 4):
        return None, ["read as a vector type (its result exports lanes 4)"]
    return refuses_with_buffererror(out, problems, want)


@rule(side="consumer", source="array-api", where="from_dlpack, Raises: BufferError (incompatible dtype)")
def dtype_lanes(c):
    """float32 with lanes=4 is refused with BufferError (or read as a vector type)"""
    return judged(c, lambda f: with_element_type(c, import_made(c, f, shape=(3,), dtype=(2, 32, 4))),
                  refuses_or_keeps_lanes, about_dtype=True)


@breaks(dtype_lanes, shows=ACCEPTED)
class IgnoresLanes(Importer):
    """Reads a vector dtype (lanes > 1) as its scalar type."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["dtype"][2] > 1:
            managed(capsule)[0].dl_tensor.dtype.lanes = 1
        return capsule
