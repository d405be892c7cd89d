"""dtype objects: every DLPack 1.3 data type, and ``as_dtype`` for foreign ones.

A :class:`DType` is the Python face of a ``DLDataType`` ``(code, bits, lanes)``.
It carries ``__dlpack_data_type__`` (data-apis/array-api#972), so any library
can read it without knowing this one, and ``as_dtype`` reads the same protocol
back from others, plus NumPy, ml_dtypes and torch dtypes and plain names.
"""

from __future__ import annotations

__all__ = ["DType", "DTypeCode", "as_dtype", "DTYPES"]

import enum
import sys


class DTypeCode(enum.IntEnum):
    """``DLDataTypeCode`` of dlpack.h, under the names the C enumerators carry
    without their ``kDL`` prefix (BCOMPLEX, ``kDLBcomplex``, is upstream's
    main branch since the 1.3 release)."""

    INT = 0
    UINT = 1
    FLOAT = 2
    OPAQUE_HANDLE = 3
    BFLOAT = 4
    COMPLEX = 5
    BOOL = 6
    FLOAT8_E3M4 = 7
    FLOAT8_E4M3 = 8
    FLOAT8_E4M3B11FNUZ = 9
    FLOAT8_E4M3FN = 10
    FLOAT8_E4M3FNUZ = 11
    FLOAT8_E5M2 = 12
    FLOAT8_E5M2FNUZ = 13
    FLOAT8_E8M0FNU = 14
    FLOAT6_E2M3FN = 15
    FLOAT6_E3M2FN = 16
    FLOAT4_E2M1FN = 17
    BCOMPLEX = 18


class DType:
    """A DLPack data type. Instances are unique per ``(code, bits, lanes)``:
    compare them with ``==`` or ``is``."""

    __slots__ = ("name", "code", "bits", "lanes", "format", "_kind", "__weakref__")

    def __init__(self, name: str, code: int, bits: int, lanes: int, kind: str, format: str | None):
        self.name = name
        self.code = DTypeCode(code)
        self.bits = bits
        self.lanes = lanes
        #: The PEP 3118 buffer-protocol (and ``struct``) format, None when the type has none.
        self.format = format
        self._kind = kind

    def __dlpack_data_type__(self) -> tuple[int, int, int]:
        return (int(self.code), self.bits, self.lanes)

    @property
    def itemsize(self) -> int:
        """Bytes one element takes when stored one per byte (padded) or for
        whole-byte types; sub-byte packed storage is described by ``bits``."""
        return max(1, (self.bits * self.lanes + 7) // 8)

    @property
    def kind(self) -> str:
        """'bool', 'signed integer', 'unsigned integer', 'real floating',
        'complex floating': the array API's dtype kinds."""
        return self._kind

    @property
    def is_subbyte(self) -> bool:
        return self.bits < 8

    def __repr__(self) -> str:
        return f"dlpack_ref.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other):
        if isinstance(other, DType):
            return self is other
        return NotImplemented

    def __hash__(self):
        return hash((int(self.code), self.bits, self.lanes))

    def __reduce__(self):
        return (as_dtype, (self.name,))


# The one dtype table: name, DLDataTypeCode, bits, lanes, array API kind and
# PEP 3118 buffer format ("-": none). Every other dtype lookup (the core's C
# checks and buffer formats, generated at build time by tools/gen_tables.py;
# NumPy's; the conformance checker's) is derived from it. float4_e2m1fn_x2
# is PyTorch's: one byte holding two float4 values, exported as lanes=2.
# bcomplex32 is two bfloat16, real part then imaginary part (kDLBcomplex).
_TABLE = """
bool                    6     8      1  bool     ?
int8                    0     8      1  int      b
int16                   0    16      1  int      h
int32                   0    32      1  int      i
int64                   0    64      1  int      q
uint8                   1     8      1  uint     B
uint16                  1    16      1  uint     H
uint32                  1    32      1  uint     I
uint64                  1    64      1  uint     Q
float16                 2    16      1  real     e
float32                 2    32      1  real     f
float64                 2    64      1  real     d
bfloat16                4    16      1  real     -
complex64               5    64      1  complex  Zf
complex128              5   128      1  complex  Zd
float8_e3m4             7     8      1  real     -
float8_e4m3             8     8      1  real     -
float8_e4m3b11fnuz      9     8      1  real     -
float8_e4m3fn          10     8      1  real     -
float8_e4m3fnuz        11     8      1  real     -
float8_e5m2            12     8      1  real     -
float8_e5m2fnuz        13     8      1  real     -
float8_e8m0fnu         14     8      1  real     -
float6_e2m3fn          15     6      1  real     -
float6_e3m2fn          16     6      1  real     -
float4_e2m1fn          17     4      1  real     -
float4_e2m1fn_x2       17     4      2  real     -
bcomplex32             18    32      1  complex  -
"""

_KINDS = {"bool": "bool", "int": "signed integer", "uint": "unsigned integer",
          "real": "real floating", "complex": "complex floating"}


def _rows():
    for line in _TABLE.strip().splitlines():
        name, code, bits, lanes, kind, fmt = line.split()
        yield name, int(code), int(bits), int(lanes), _KINDS[kind], None if fmt == "-" else fmt


#: name -> DType, every type dlpack-ref knows.
DTYPES: dict[str, DType] = {}
_BY_TRIPLE: dict[tuple[int, int, int], DType] = {}
for _name, _code, _bits, _lanes, _kind, _format in _rows():
    _dt = DType(_name, _code, _bits, _lanes, _kind, _format)
    DTYPES[_name] = _dt
    _BY_TRIPLE[(_code, _bits, _lanes)] = _dt
del _name, _code, _bits, _lanes, _kind, _format, _dt

_ALIASES = {
    "bool_": "bool", "float": "float64", "double": "float64", "half": "float16",
    "complex": "complex128", "cfloat": "complex64", "cdouble": "complex128",
    "int": "int64", "long": "int64", "short": "int16", "byte": "int8",
}

#: Buffer-protocol format letters whose width is the platform's (C long,
#: ssize_t, char) rather than fixed, with the kind they stand for; the core's
#: buffer import gives them the integer type of their item size.
FORMAT_ALIASES = {"l": DTypeCode.INT, "L": DTypeCode.UINT, "n": DTypeCode.INT, "N": DTypeCode.UINT,
                  "c": DTypeCode.UINT}

# NumPy dtype kinds (``dtype.kind``) with their DLDataTypeCode; the width
# comes from the itemsize, so no per-character table is needed.
_NUMPY_KIND_CODES = {"b": DTypeCode.BOOL, "i": DTypeCode.INT, "u": DTypeCode.UINT,
                     "f": DTypeCode.FLOAT, "c": DTypeCode.COMPLEX}


def from_triple(code: int, bits: int, lanes: int) -> DType:
    """The DType for a ``DLDataType``; ValueError when DLPack 1.3 has none."""
    try:
        return _BY_TRIPLE[(code, bits, lanes)]
    except KeyError:
        raise ValueError(
            f"DLDataType(code={code}, bits={bits}, lanes={lanes}) is not a DLPack 1.3 "
            f"data type known to dlpack-ref; known: {sorted(_BY_TRIPLE)}"
        ) from None


def _from_name(name: str) -> DType | None:
    name = name.strip().lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _ALIASES.get(name, name)
    return DTYPES.get(name)


def as_dtype(obj) -> DType:
    """Resolve ``obj`` to a :class:`DType`.

    Accepted, in this order: a DType; anything with ``__dlpack_data_type__``;
    a NumPy dtype, scalar type or anything ``numpy.dtype`` understands (only
    when NumPy is already imported), which covers ml_dtypes and JAX types;
    torch dtypes (by name, torch is never imported here); the dtype objects of
    any array API library (array-api-strict's, for one), by the name its
    ``__array_namespace_info__().dtypes()`` gives them; a name such as
    ``"float32"`` or ``"bfloat16"``; the Python types ``bool``, ``int``,
    ``float``, ``complex``. No library is imported to interpret its objects.

    Parameters
    ----------
    obj : object
        The dtype to resolve.

    Returns
    -------
    DType

    Raises
    ------
    TypeError
        When ``obj`` is none of the above, or names a type DLPack cannot describe.
    ValueError
        When ``__dlpack_data_type__`` returns no DLPack 1.3 type.
    """
    if isinstance(obj, DType):
        return obj
    proto = getattr(obj, "__dlpack_data_type__", None)
    if proto is not None and not isinstance(obj, type):
        triple = tuple(proto())
        if len(triple) != 3:
            raise ValueError(f"__dlpack_data_type__() of {obj!r} returned {triple!r}, not (code, bits, lanes)")
        return from_triple(*(int(v) for v in triple))
    if obj is bool:
        return DTYPES["bool"]
    if obj is int:
        return DTYPES["int64"]
    if obj is float:
        return DTYPES["float64"]
    if obj is complex:
        return DTYPES["complex128"]
    if isinstance(obj, str):
        dt = _from_name(obj)
        if dt is not None:
            return dt
        raise TypeError(f"unknown dtype name {obj!r}; expected one of {sorted(DTYPES)}")
    module = type(obj).__module__ or ""
    if module.startswith("torch"):
        # torch.float32 and friends print as 'torch.float32'.
        dt = _from_name(str(obj))
        if dt is not None:
            return dt
        raise TypeError(f"torch dtype {obj} has no DLPack equivalent in dlpack-ref")
    np_dt = _numpy_dtype(obj)
    if np_dt is not None:
        return np_dt
    api_dt = _array_api_dtype(obj)
    if api_dt is not None:
        return api_dt
    raise TypeError(
        f"cannot interpret {obj!r} (type {type(obj).__name__}) as a dtype; expected a "
        "dlpack_ref dtype, an object with __dlpack_data_type__, a NumPy, ml_dtypes, JAX, "
        "torch or array API library dtype, or a name such as 'float32'"
    )


def _numpy_dtype(obj) -> DType | None:
    np = sys.modules.get("numpy")
    # numpy.dtype(None) is float64: None must not mean a dtype only when NumPy is loaded.
    if np is None or obj is None:
        return None
    try:
        npdt = np.dtype(obj)
    except (TypeError, ValueError):
        return None
    if not npdt.isnative:
        raise TypeError(f"NumPy dtype {npdt!r} has non-native byte order, which DLPack cannot describe")
    code = _NUMPY_KIND_CODES.get(npdt.kind)
    if code is not None and (int(code), npdt.itemsize * 8, 1) in _BY_TRIPLE:
        return _BY_TRIPLE[(int(code), npdt.itemsize * 8, 1)]
    # ml_dtypes registers its types with NumPy under their own names.
    dt = _from_name(npdt.name)
    if dt is not None:
        return dt
    raise TypeError(f"NumPy dtype {npdt!r} has no DLPack equivalent")


def _array_api_dtype(obj) -> DType | None:
    """The dtype of an array API library by the name that library gives it:
    the namespace is the already imported top-level module of ``obj``'s type,
    and its inspection API (``__array_namespace_info__().dtypes()``) maps names
    to dtype objects. None when ``obj`` comes from no such namespace."""
    namespace = sys.modules.get((type(obj).__module__ or "").partition(".")[0])
    info = getattr(namespace, "__array_namespace_info__", None)
    if info is None:
        return None
    for name, candidate in info().dtypes().items():
        if candidate is obj or (type(candidate) is type(obj) and candidate == obj):
            dt = _from_name(name)
            if dt is None:
                raise TypeError(f"{obj!r} ({name}) has no DLPack equivalent in dlpack-ref")
            return dt
    return None


# --- promotion: the dtype asarray infers for a nested sequence ----------------


def _is_extended(dt: DType) -> bool:
    # bfloat16, bcomplex32 and the float8/6/4 types: ml_dtypes', outside NumPy's lattice.
    return (dt.kind == "real floating" and dt.code != DTypeCode.FLOAT) or \
        (dt.kind == "complex floating" and dt.code != DTypeCode.COMPLEX)


def _standard(dt: DType) -> DType:
    # The NumPy type that holds every value of an extended one exactly.
    if not _is_extended(dt):
        return dt
    return DTYPES["complex64" if dt.kind == "complex floating" else "float32"]


def _sized(kind: str, bits: int) -> DType:
    prefix = {"signed integer": "int", "unsigned integer": "uint", "real floating": "float",
              "complex floating": "complex"}[kind]
    return DTYPES[f"{prefix}{bits}"]


def _promote(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    # An extended float with anything but itself and bool counts as float32
    # (bcomplex32 as complex64), which holds every one of its values
    # (docs/semantics.md).
    if _is_extended(a) or _is_extended(b):
        return _promote(_standard(a), _standard(b))
    ints = ("signed integer", "unsigned integer")
    if a.kind in ints and b.kind in ints:
        if a.kind == b.kind:
            return a if a.bits >= b.bits else b
        s, u = (a, b) if a.kind == "signed integer" else (b, a)
        if s.bits > u.bits:
            return s
        return _sized("signed integer", 2 * u.bits) if u.bits < 64 else DTYPES["float64"]

    # Floating results: the component width must hold each input exactly as
    # NumPy's lattice does (an n-bit integer needs a 2n-bit float, at most 64).
    def component(dt: DType) -> int:
        if dt.kind in ints:
            return min(2 * dt.bits, 64)
        return dt.bits // 2 if dt.kind == "complex floating" else dt.bits

    bits = max(component(a), component(b))
    if "complex floating" in (a.kind, b.kind):
        return _sized("complex floating", 2 * bits)
    return _sized("real floating", bits)


def result_type(dtypes) -> DType:
    """The dtype NumPy 2's ``result_type`` gives for ``dtypes`` (an iterable
    of DType, none with lanes > 1), for dlpack-ref's dtypes: bool < integers <
    floats < complex, integers of both signs needing a wider signed type
    (uint64 with a signed one: float64). bfloat16 and the float8/6/4 types,
    which NumPy does not promote itself, keep their type with bool and
    themselves and count as float32 otherwise; bcomplex32 likewise, counting
    as complex64. float64 for none."""
    result = None
    for dt in dtypes:
        if dt.lanes != 1:
            raise TypeError(f"{dt} (lanes={dt.lanes}) has no promotion rule")
        result = dt if result is None else _promote(result, dt)
    return DTYPES["float64"] if result is None else result
