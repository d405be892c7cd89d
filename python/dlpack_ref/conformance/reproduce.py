"""Reproductions: for a failed rule, a few self-contained lines of Python
that show the failure with the library alone (its :class:`.recipes.Recipe`
and the standard library; ``ctypes`` reads and builds capsules). A
reproduction prints ``expected:`` (the rule) and ``observed:`` and exits 1
where the rule is broken, or crashes where the library crashed the checker;
it prints ``ok:`` and exits 0 where the rule holds.

:func:`reproduction` writes one for a :class:`.model.Result`; the reports
carry it and ``dlpack-ref check --explain RULE`` prints it."""

from __future__ import annotations

import re
import struct
import textwrap

from dlpack_ref._dtypes import DTYPES

from . import consumer, producer
from .model import Result, Status
from .recipes import Recipe, recipe_of

# --- what every reproduction carries ------------------------------------------------

# The helpers, each included only where a reproduction calls it.
_STRUCTS = '''\
P, I64 = ctypes.c_void_p, ctypes.c_int64


class DLTensor(ctypes.Structure):
    _fields_ = [("data", P), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", P), ("strides", P), ("byte_offset", ctypes.c_uint64)]


class Versioned(ctypes.Structure):  # DLManagedTensorVersioned
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", P), ("deleter", P),
                ("flags", ctypes.c_uint64), ("t", DLTensor)]


class Legacy(ctypes.Structure):  # DLManagedTensor
    _fields_ = [("t", DLTensor), ("manager_ctx", P), ("deleter", P)]


capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, P)(("PyCapsule_GetName", ctypes.pythonapi))
capsule_pointer = ctypes.PYFUNCTYPE(P, P, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
'''

_HELPERS = {
    "read": '''
def read(capsule):
    \"\"\"The fields of a DLPack capsule, without consuming it.\"\"\"
    name = capsule_name(id(capsule))
    m = (Versioned if name.endswith(b"versioned") else Legacy).from_address(capsule_pointer(id(capsule), name))
    t, n = m.t, max(m.t.ndim, 0)
    ints = lambda p: tuple((I64 * n).from_address(p)) if p else None
    return {"name": name, "version": (m.major, m.minor) if hasattr(m, "major") else None,
            "flags": getattr(m, "flags", None), "data": (t.data or 0) + t.byte_offset, "ndim": t.ndim,
            "device": (t.device_type, t.device_id), "dtype": (t.code, t.bits, t.lanes),
            "shape": ints(t.shape), "strides": ints(t.strides)}
''',
    "values": '''
def values(info):
    \"\"\"The values a capsule's fields describe (ints, floats, complex), nested by shape.\"\"\"
    fmt = {(0, 32): "i", (0, 64): "q", (2, 32): "f", (2, 64): "d", (5, 64): "ff", (5, 128): "dd"}[info["dtype"][:2]]
    size, shape = struct.calcsize(fmt), info["shape"] or ()
    strides = info["strides"] or tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))

    def at(offset, d):
        if d == len(shape):
            v = struct.unpack(fmt, ctypes.string_at(info["data"] + offset * size, size))
            return v[0] if len(v) == 1 else complex(*v)
        return [at(offset + i * strides[d], d + 1) for i in range(shape[d])]
    return at(0, 0)
''',
    "ask": '''
def ask(x, **kwargs):
    \"\"\"x.__dlpack__ as a consumer asks: with max_version, or without it for a pre-1.0 producer.\"\"\"
    try:
        return x.__dlpack__(max_version=(1, 3), **kwargs)
    except TypeError as e:
        if "max_version" not in str(e):
            raise
        return x.__dlpack__(**kwargs)
''',
    "exc": '''
def exc(e):
    t = type(e)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
''',
}
_FAIL = '''
def fail(observed):
    print("expected:", RULE)
    print("observed:", observed)
    sys.exit(1)
'''


def _helpers(body: str) -> str:
    """The imports, the ABI structs and the helpers ``body`` calls (the
    helpers' own calls included)."""
    used = ""
    for name in ("exc", "ask", "values", "read"):  # callers before callees
        if re.search(rf"\b{name}\(", body + used):
            used = _HELPERS[name] + used
    structs = _STRUCTS if re.search(r"\b(read|capsule_name|capsule_pointer|DLTensor)\b", body + used) else ""
    return "import ctypes, gc, math, struct, sys\n\n" + structs + used + _FAIL


_MAKER = '''
deleted = []  # tensors whose deleter ran
names = {}  # tensor address -> the name its capsule was made with, None without a deleter
buffers = {}  # tensor address -> its struct and the memory it points to, freed by the deleter


@ctypes.CFUNCTYPE(None, P)
def on_delete(address, deleted=deleted, buffers=buffers):
    deleted.append(address)
    buffers.pop(address, None)  # freed, as a deleter frees: a consumer must not touch it after


new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, P, ctypes.c_char_p, P)(("PyCapsule_New", ctypes.pythonapi))


@ctypes.CFUNCTYPE(None, P)
def destructor(capsule, capsule_name=capsule_name, capsule_pointer=capsule_pointer, names=names):
    """A capsule nobody consumed (still named as made) frees its tensor: a second free when a consumer
    already called the deleter without renaming it."""
    name = capsule_name(capsule)
    address = capsule_pointer(capsule, name) if name else None
    if names.get(address) == name:
        on_delete(address)


def capsule(shape=(2, 3), dtype=(2, 32, 1), values=(), *, versioned=True, version=(1, 3), flags=0,
            strides=None, shape_null=False, ndim=None, device=(1, 0), byte_offset=0, data="alloc", name=None,
            deleter=True):
    """A capsule over a hand-built tensor (strides None: C order; values: float64 along the strides)."""
    n, steps = len(shape), strides
    if steps is None:
        steps = [math.prod(max(e, 1) for e in shape[i + 1:]) for i in range(n)]
    dims, strides_array = (I64 * max(n, 1))(*shape), None if steps == "null" else (I64 * max(n, 1))(*steps)
    buffer = (ctypes.c_char * 1024)()  # data 256-byte aligned, room before it for negative strides
    base = ctypes.addressof(buffer) + (-ctypes.addressof(buffer) % 256) + 256 if data == "alloc" else (data or 0)
    step = steps[0] if n == 1 and steps != "null" else 1
    for i, v in enumerate(values):
        ctypes.c_double.from_address(base + byte_offset + 8 * i * step).value = v
    m = Versioned() if versioned else Legacy()
    if versioned:
        m.major, m.minor, m.flags = version[0], version[1], flags
    t = m.t
    t.data, t.device_type, t.device_id, t.ndim = base or None, device[0], device[1], n if ndim is None else ndim
    t.code, t.bits, t.lanes = dtype
    t.shape = None if shape_null else ctypes.addressof(dims)
    t.strides = None if strides_array is None else ctypes.addressof(strides_array)
    t.byte_offset, m.deleter = byte_offset, ctypes.cast(on_delete, P).value if deleter else None
    m.manager_ctx = ctypes.addressof(m)  # non-NULL, as a producer's context usually is
    name = name or (b"dltensor_versioned" if versioned else b"dltensor")
    names[ctypes.addressof(m)] = name if deleter else None
    buffers[ctypes.addressof(m)] = (m, dims, strides_array, buffer)
    return new_capsule(ctypes.addressof(m), name, ctypes.cast(destructor, P).value)


class Producer:
    """Another library's array: __dlpack__ hands out capsule(**tensor) and records its keywords."""

    def __init__(self, legacy_only=False, raises=None, returns=None, keep=False, **tensor):
        self.legacy_only, self.raises, self.returns, self.keep, self.tensor = legacy_only, raises, returns, keep, tensor
        self.calls, self.capsule, self.data = [], None, None

    def __dlpack_device__(self):
        return self.tensor.get("device", (1, 0))

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        unexpected = sorted(set(kwargs) - {"stream"})
        if self.legacy_only and unexpected:
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {unexpected[0]!r}")
        if self.raises is not None:
            raise self.raises
        if self.returns is not None:
            return self.returns
        asked = kwargs.get("max_version") is not None and kwargs["max_version"][0] >= 1 and not self.legacy_only
        cap = capsule(**{"versioned": asked, **self.tensor})
        self.data = read(cap)["data"]
        if self.keep:
            self.capsule, self.name_before = cap, capsule_name(id(cap))
        return cap
'''


def _indent(source: str) -> str:
    return textwrap.indent(source, "    ")


def _expr(template: str | None, default: str, name: str) -> str:
    return (template or default).format(name)


# --- producer rules -----------------------------------------------------------------------
# Each writes the lines after the recipe's imports and the reader; ``x`` is
# made by the recipe. None: the recipe cannot write what the rule needs.

def _array(recipe: Recipe, dtype: str, shape: tuple, readonly: bool = False) -> str | None:
    expr = recipe.array(dtype, shape) if recipe.array is not None else None
    if expr is None or (readonly and recipe.readonly is None):
        return None
    return f"x = {expr}\n" + (f"{recipe.readonly}\n" if readonly and recipe.readonly else "")


def _needs(recipe: Recipe, dtype: str, shape: tuple, *body: str, readonly: bool = False) -> str | None:
    """``x`` made by the recipe, then the body (parts dedented one by one)."""
    made = _array(recipe, dtype, shape, readonly)
    return None if made is None else made + "".join(textwrap.dedent(part) for part in body)


def _legacy_without_max_version(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        name = read(x.__dlpack__())["name"]
        if name != b"dltensor":
            fail(f"capsule named {name!r}, expected b'dltensor'")
        ''')


def _versioned_capsule(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        for mv in ((1, 0), (1, 3)):
            info = read(x.__dlpack__(max_version=mv))
            if info["name"] == b"dltensor":
                print(f"ok: legacy capsule for max_version={mv}: versioned capsules are not implemented")
                sys.exit(0)
            if info["name"] != b"dltensor_versioned":
                fail(f"max_version={mv}: capsule named {info['name']!r}")
            if info["version"][0] != 1:
                fail(f"max_version={mv}: stamped version {info['version']}, major must be 1")
        ''')


def _newer_major(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        try:
            info = read(x.__dlpack__(max_version=(2, 0)))
        except Exception as e:
            fail(f"__dlpack__(max_version=(2, 0)) raised {exc(e)}: {e}")
        if info["version"] and info["version"][0] > 2:
            fail(f"stamped {info['version']}, newer than asked")
        ''')


def _strides_not_null(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        info = read(ask(x))
        if info["strides"] is None and info["version"] and info["version"] >= (1, 2):
            fail(f"NULL strides in a version {info['version']} capsule")
        if info["strides"] not in (None, (3, 1)):
            fail(f"strides {info['strides']} for a C-contiguous (2, 3) array; expected (3, 1) elements")
        ''')


def _zero_dim(recipe):
    return _needs(recipe, "float64", (), f'''\
        info = read(ask(x))
        if info["ndim"] != 0:
            fail(f"ndim {{info['ndim']}} for a 0-d array")
        got, want = values(info), {_expr(recipe.own_values, "", "x")}
        if got != want:
            fail(f"exported value {{got!r}}, the library reports {{want!r}}")
        ''')


def _size_zero(recipe):
    return _needs(recipe, "float32", (0, 3), '''\
        info = read(ask(x))
        if info["shape"] != (0, 3):
            fail(f"shape {info['shape']}, expected (0, 3)")
        ''')


def _read_only_flag(recipe):
    return _needs(recipe, "float64", (2, 3), '''\
        info = read(ask(x))
        if info["flags"] is not None and not info["flags"] & 1:  # DLPACK_FLAG_BITMASK_READ_ONLY
            fail(f"flags={info['flags']:#x}: READ_ONLY not set for read-only data")
        ''', readonly=True)


def _buffererror(what: str, call: str) -> str:
    """The check that ``call`` is refused with BufferError, as source."""
    return f'''\
        try:
            {call}
        except BufferError as e:
            print(f"ok: BufferError ({{e}})")
            sys.exit(0)
        except Exception as e:
            fail(f"{what} raised {{exc(e)}}, not BufferError ({{e}})")
        fail("{what} was accepted; it must raise BufferError")
        '''


def _read_only_legacy_refused(recipe):
    # a legacy capsule cannot say read-only
    return _needs(recipe, "float64", (2, 3), _buffererror("__dlpack__() of read-only data", "x.__dlpack__()"),
                  readonly=True)


_COPY = '''\
try:
    cap = ask(x, copy=True)
except BufferError as e:
    print(f"ok: copy=True refused with BufferError ({e})")
    sys.exit(0)
except Exception as e:
    fail(f"copy=True refused with {exc(e)}: {e}")
'''


def _copy_true_copies(recipe):
    return _needs(recipe, "float64", (2, 3), _COPY, '''\
        base, n = read(ask(x))["data"], 48
        before = ctypes.string_at(base, n)
        ptr = read(cap)["data"]
        if ptr == base:
            fail(f"copy=True exported the same data pointer {ptr:#x}")
        if ctypes.string_at(ptr, n) != before:
            fail("the copy's bytes differ from the array's when __dlpack__ returns")
        ctypes.memset(ptr, 0x5A, n)
        if ctypes.string_at(base, n) != before:
            fail("writing to the copy changed the array")
        ''')


def _copy_true_flag(recipe):
    return _needs(recipe, "float64", (2, 3), _COPY, '''\
        flags = read(cap)["flags"]
        if flags is not None and not flags & 2:  # DLPACK_FLAG_BITMASK_IS_COPIED
            fail(f"flags={flags:#x}: IS_COPIED not set on a copy")
        ''')


def _in_place(what: str, call: str) -> str:
    """The check that ``call`` exports ``x`` where the plain export is, as source."""
    return f'''\
        base = read(ask(x))["data"]
        try:
            info = read({call})
        except Exception as e:
            fail(f"{what} raised {{exc(e)}}: {{e}}")
        if info["data"] != base:
            fail(f"{what} exported {{info['data']:#x}}, a copy: the array is at {{base:#x}}")
        '''


def _copy_false_no_copy(recipe):
    return _needs(recipe, "float64", (2, 3), _in_place("copy=False of memory exportable in place",
                                                       "ask(x, copy=False)"), '''\
        if info["flags"] and info["flags"] & 2:
            fail("IS_COPIED set with copy=False")
        ''')


def _dl_device_own(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        device = x.__dlpack_device__()
        own = tuple(int(v) if isinstance(v, int) else v for v in device)
        ''', _in_place("dl_device={own} (its own __dlpack_device__())", "ask(x, dl_device=device)"), '''\
        if info["device"] != own:
            fail(f"exported on {info['device']}, asked for {own}")
        ''')


def _dl_device_unsupported(recipe):
    return _needs(recipe, "float32", (2, 3), _buffererror("dl_device=(4, 0)", "ask(x, dl_device=(4, 0))"))


def _stream_cpu(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        ask(x, stream=None)
        for stream in (1, -1):
            try:
                ask(x, stream=stream)
            except AssertionError as e:
                fail(f"stream={stream} refused by an assert (gone under python -O): {e}")
            except Exception:
                continue
            fail(f"stream={stream} was accepted for CPU data")
        ''')


def _unexportable(recipe):
    if not recipe.unexportable:
        return None
    return recipe.unexportable + "\n" + textwrap.dedent('''\
        bad = []
        for label, obj in unexportable.items():
            try:
                obj.__dlpack_device__()
            except BufferError:
                pass
            except Exception as e:
                bad.append(f"{label}: __dlpack_device__ raised {exc(e)}: {e}")
            try:
                ask(obj)  # a SIGABRT or SIGSEGV here is the library's
            except BufferError:
                continue
            except Exception as e:
                bad.append(f"{label}: __dlpack__ raised {exc(e)}: {e}")
                continue
            bad.append(f"{label}: exported")
        if bad:
            fail("; ".join(bad))
        ''')


def _dlpack_device_type(recipe):
    return _needs(recipe, "float32", (2, 3), '''\
        import enum
        device = x.__dlpack_device__()
        kind, ident = device
        if not isinstance(ident, int) or isinstance(ident, bool):
            fail(f"device_id {ident!r} is a {type(ident).__name__}, not an int")
        if not isinstance(kind, enum.Enum):
            fail(f"device_type {kind!r} is a plain {type(kind).__name__}, not an Enum member "
                 "(the standard types the result Tuple[Enum, int])")
        ''')


def _dtype_group(names):
    def write(recipe):
        made = {n: recipe.array(n, (4,)) for n in names} if recipe.array is not None else {}
        made = {n: e for n, e in made.items() if e is not None}
        if not made:
            return None
        arrays = ",\n".join(f"    {n!r}: ({e}, {DTYPES[n].__dlpack_data_type__()})" for n, e in made.items())
        return f"arrays = {{\n{arrays},\n}}\n" + textwrap.dedent('''\
            bad = []
            for name, (x, want) in arrays.items():
                try:
                    got = read(ask(x))["dtype"]
                except BufferError:
                    continue  # refused: allowed
                except Exception as e:
                    bad.append(f"{name}: export raised {exc(e)}: {e}")
                    continue
                if got != want:
                    bad.append(f"{name}: exported (code, bits, lanes)={got}, expected {want}")
            if bad:
                fail("; ".join(bad))
            ''')
    return write


def _view_values(recipe):
    if not recipe.views:
        return None
    return recipe.views + "\n" + textwrap.dedent(f'''\
        bad = []
        for label, v in views.items():
            try:
                got = values(read(ask(v)))
            except BufferError:
                continue  # refused: allowed
            except Exception as e:
                bad.append(f"{{label}}: export raised {{exc(e)}}: {{e}}")
                continue
            want = {_expr(recipe.own_values, "", "v")}
            if got != want:
                bad.append(f"{{label}}: exported {{got!r}}, the library reports {{want!r}}")
        if bad:
            fail("; ".join(bad))
        ''')


_TABLE = '''\
class Header(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", P)]


class Table(ctypes.Structure):  # DLPackExchangeAPI
    _fields_ = [("header", Header), ("managed_tensor_allocator", P), ("managed_tensor_from_py_object_no_sync", P),
                ("managed_tensor_to_py_object_no_sync", P), ("dltensor_from_py_object_no_sync", P),
                ("current_work_stream", P)]


def table_of(obj):
    cap = type(obj).__dlpack_c_exchange_api__
    return Table.from_address(capsule_pointer(id(cap), capsule_name(id(cap))))
'''


def _exchange_api(recipe):
    return _needs(recipe, "float64", (2, 3), _TABLE, '''\
        api = table_of(x)
        missing = [f for f, _ in Table._fields_[1:] if f != "dltensor_from_py_object_no_sync" and not getattr(api, f)]
        if missing:
            fail(f"NULL function pointers: {', '.join(missing)}")
        stream = P(1)
        status = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32, P)(api.current_work_stream)(
            1, 0, ctypes.byref(stream))
        if status == 0 and stream.value == 1:
            fail("current_work_stream(kDLCPU, 0) returned without storing a stream: *out_current_stream still "
                 "holds the 0x1 put there, expected NULL")
        if stream.value:
            fail(f"current_work_stream(kDLCPU, 0) gave {stream.value:#x}, expected NULL")
        shape = (I64 * 2)(2, 3)
        proto = DLTensor(device_type=1, ndim=2, shape=ctypes.addressof(shape), code=2, bits=32, lanes=1)
        out, errors = P(), []
        set_error = ctypes.CFUNCTYPE(None, P, ctypes.c_char_p, ctypes.c_char_p)(lambda c, k, m: errors.append((k, m)))
        allocate = ctypes.CFUNCTYPE(ctypes.c_int, P, P, P, P)(api.managed_tensor_allocator)
        try:
            status = allocate(ctypes.addressof(proto), ctypes.addressof(out), None, ctypes.cast(set_error, P))
        except Exception as e:  # ctypes raises the exception the C call left set
            fail("managed_tensor_allocator (required) set a Python exception instead of working or calling "
                 f"SetError: {exc(e.__cause__ or e)}: {e.__cause__ or e}")
        if status != 0 or not out.value:
            fail(f"managed_tensor_allocator failed (rc={status}, errors={errors})")
        ''')


def _exchange_api_matches_dlpack(recipe):
    if not recipe.views and not recipe.unexportable:
        return None
    made = _array(recipe, "float64", (2, 3))
    if made is None:
        return None
    cases = "\n".join(filter(None, [recipe.views, recipe.unexportable, made,
                                    "cases = {'float64 (2, 3)': x, **globals().get('views', {}), "
                                    "**globals().get('unexportable', {})}"]))
    return cases + "\n" + _TABLE + textwrap.dedent('''\
        new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, P, ctypes.c_char_p, P)(("PyCapsule_New", ctypes.pythonapi))


        def outcome(export):
            try:
                cap = export()
            except Exception as e:
                return "refused", exc(e)
            return "values", values(read(cap))


        def through_table(v):
            out = P()
            ctypes.PYFUNCTYPE(ctypes.c_int, P, P)(table_of(v).managed_tensor_from_py_object_no_sync)(
                id(v), ctypes.addressof(out))
            return new_capsule(out.value, b"dltensor_versioned", None)


        bad = []
        for label, v in cases.items():
            if type(v) is not type(x) and not hasattr(type(v), "__dlpack_c_exchange_api__"):
                continue
            plain, table = outcome(lambda: ask(v)), outcome(lambda: through_table(v))
            if plain != table:
                bad.append(f"{label}: __dlpack__ {plain[0]} {plain[1]!r}, the table {table[0]} {table[1]!r}")
        if bad:
            fail("; ".join(bad))
        ''')


_PRODUCER_RULES = {
    "producer.legacy_without_max_version": _legacy_without_max_version,
    "producer.versioned_capsule": _versioned_capsule,
    "producer.newer_major_requested": _newer_major,
    "producer.strides_not_null": _strides_not_null,
    "producer.zero_dim": _zero_dim,
    "producer.size_zero": _size_zero,
    "producer.read_only_flag": _read_only_flag,
    "producer.read_only_legacy_refused": _read_only_legacy_refused,
    "producer.copy_true_copies": _copy_true_copies,
    "producer.copy_true_flag": _copy_true_flag,
    "producer.copy_false_no_copy": _copy_false_no_copy,
    "producer.dl_device_own": _dl_device_own,
    "producer.dl_device_unsupported": _dl_device_unsupported,
    "producer.stream_cpu": _stream_cpu,
    "producer.buffererror_for_unexportable": _unexportable,
    "producer.dlpack_device_type": _dlpack_device_type,
    "producer.view_values": _view_values,
    "producer.exchange_api": _exchange_api,
    "producer.exchange_api_matches_dlpack": _exchange_api_matches_dlpack,
    **{rule_id: _dtype_group(names) for rule_id, names in producer.DTYPE_GROUPS.items()},
}


# --- consumer cases -----------------------------------------------------------------------
# The case's own producer (its setup), one call of from_dlpack, then the
# judgement of the case's judge and the deleter count every case shares.

# Each judge appends to ``problems`` from what the import gave: ``refusal``
# (the exception, or None), ``seen`` (the result's values, pointer and
# read-only-ness, read as the checker reads them) and the producer ``x``.
_VALUES = """\
if "values_error" in seen:
    problems.append(f"values unreadable ({seen['values_error']})")
elif "values" in seen and seen["values"] != want:
    problems.append(f"values {seen['values']!r}, expected {want!r}")
"""
_REFUSED = """\
if refusal is not None:
    problems.append(f"refused ({exc(refusal)}: {refusal})")
"""
_ACCEPTED = """\
if refusal is None:
    problems.append(f"accepted (result {type(r).__name__})")
"""
_NOT_BUFFERERROR = """\
elif not isinstance(refusal, BufferError):
    problems.append(f"refused with {exc(refusal)}, not BufferError ({refusal})")
"""
_JUDGES = {
    "_accepts": _REFUSED + _VALUES,
    "_accepts_in_place": _REFUSED + _VALUES + """\
if refusal is None and seen.get("pointer") != x.data:
    problems.append(f"copied (pointer {seen.get('pointer')} != source {x.data})")
""",
    "_copies": """\
if refusal is not None and not isinstance(refusal, BufferError):
    problems.append(f"refused ({exc(refusal)}: {refusal})")
""" + _VALUES + """\
if refusal is None and seen.get("pointer") == x.data:
    problems.append("copy=True imported in place (same pointer)")
""",
    "_asks_max_version": _REFUSED + """\
first = x.calls[0] if x.calls else {}
if not first.get("max_version") or first["max_version"][0] < 1:
    problems.append(f"first __dlpack__ call had {first}, no max_version >= (1, 0)")
""",
    "_falls_back_to_legacy": _REFUSED + _VALUES + """\
if not x.calls or "max_version" in x.calls[-1]:
    problems.append(f"no call without max_version after the TypeError (calls: {x.calls})")
""",
    "_renames": _REFUSED + """\
after, want_name = capsule_name(id(x.capsule)), b"used_" + x.name_before
if refusal is None and after != want_name:
    problems.append(f"capsule named {after.decode()!r} after import, expected {want_name.decode()!r}")
""",
    "_refuses_second_import": _REFUSED + """\
try:
    second = @CALL@(Producer(returns=x.capsule))  # a crash here is the library's
    problems.append("the same capsule was imported twice")
    del second
except Exception:
    pass
""",
    "_keeps_read_only": """\
if refusal is not None and not isinstance(refusal, BufferError):
    problems.append(f"refused ({exc(refusal)}: {refusal})")
""" + _VALUES + """\
if refusal is None and seen.get("readonly") is False:
    problems.append("imported READ_ONLY data as a writable array")
""",
    "_accepts_or_refuses": _VALUES,
    "_refuses": _ACCEPTED,
    "_refuses_with_buffererror": _ACCEPTED + _NOT_BUFFERERROR,
    "_refuses_copy": """\
if refusal is None:
    problems.append(f"accepted a tensor flagged IS_COPIED for copy=False (result {type(r).__name__})")
elif not isinstance(refusal, (BufferError, ValueError)):
    problems.append(f"refused with {exc(refusal)}, not BufferError or ValueError ({refusal})")
""",
    "_refuses_device": """\
device = r.__dlpack_device__() if refusal is None and hasattr(r, "__dlpack_device__") else None
if device is None or int(device[0]) == 1:
""" + textwrap.indent(_ACCEPTED + _NOT_BUFFERERROR, "    "),
}

# How the checker reads a result it got (a crash while reading is the library's).
_SEEN = """\
seen = {}
if refusal is None:
    for key, reading in (("values", lambda: @VALUES@), ("pointer", lambda: @POINTER@),
                         ("readonly", lambda: @READONLY@)):
        try:
            seen[key] = reading()
        except Exception as e:
            seen[key + "_error"] = f"{exc(e)}: {e}"
problems = []
"""


def _source_args(kwargs: dict) -> str:
    """Keyword arguments of the case's producer as the reproduction's capsule() takes them."""
    out = dict(kwargs)
    fill = out.pop("fill", None)
    if fill is not None:
        out["values"] = list(struct.unpack(f"<{len(fill) // 8}d", fill))
    if "elements" in out:
        out["values"] = list(out.pop("elements"))
    return ", ".join(f"{k}={v!r}" for k, v in out.items())


def _consumer_case(recipe: Recipe, case: consumer.Case) -> str | None:
    setup = getattr(case.run, "setup", None)
    judge = _JUDGES.get(case.judge.__name__)
    if recipe.from_dlpack is None or setup is None or judge is None:
        return None
    call = setup.get("call") or {}
    if callable(call):  # the CPU device keyword
        if recipe.cpu_device is None:
            return None
        call = {"device": recipe.cpu_device}
        call_source = "device=" + recipe.cpu_device
    else:
        call_source = ", ".join(f"{k}={v!r}" for k, v in call.items())
    keep = ", keep=True" if setup.get("keep") else ""
    take = f"(x.__dlpack__({_source_args(recipe.capsule_request)}))" if recipe.capsule_request is not None \
        else "(x)"
    call_expr = take[:-1] + (", " + call_source if call_source else "") + ")"
    want = case.want
    if recipe.shapeless and isinstance(want, list) and want and isinstance(want[0], list):
        want = [v for row in want for v in row]
    read = setup["producer"].get("data", "alloc") == "alloc" and setup.get("read_values", True)
    body = (f"from_dlpack = {recipe.from_dlpack}\n"
            f"x = Producer({_source_args(setup['producer'])}{keep})\nwant = {want!r}\n"
            f"try:\n    r, refusal = from_dlpack{call_expr}, None  # a crash here is the library's\n"
            "except Exception as e:\n    r, refusal = None, e\n")
    seen = _SEEN if read else "seen = {}\nproblems = []\n"
    body += (seen + judge) \
        .replace("@VALUES@", _expr(recipe.result_values, "values(read(ask({})))", "r")) \
        .replace("@POINTER@", _expr(recipe.result_pointer, 'read(ask({}))["data"]', "r")) \
        .replace("@READONLY@", _expr(recipe.result_readonly, 'bool((read(ask({}))["flags"] or 0) & 1)', "r")) \
        .replace("@CALL@", "from_dlpack" if recipe.capsule_request is None
                 else f"(lambda p: from_dlpack(p.__dlpack__({_source_args(recipe.capsule_request)})))")
    body += textwrap.dedent(f'''\
        del r, x, refusal
        gc.collect()  # a crash here is the library's
        want_deleters = {case.deleters} if names else 0
        if len(deleted) != want_deleters:
            problems.insert(0, f"deleter ran {{len(deleted)}} times, expected {{want_deleters}}")
        if problems:
            fail("; ".join(problems))
        ''')
    return body


_CASES = {case.rule.id: case for case in consumer.CASES}


# --- the reproduction ---------------------------------------------------------------------

def reproduction(spec: str, result: Result) -> str | None:
    """Python source that shows ``result``'s failure with the library named
    by ``spec`` alone, or None (the rule did not fail, no recipe knows how to
    write the library's objects, or no reproduction is written for the rule).

    Parameters
    ----------
    spec : str
        The library as checked (``numpy``, ``mylib``, ``mylib:from_dlpack``).
    result : Result

    Returns
    -------
    str or None
    """
    if result.status is not Status.FAIL:
        return None
    recipe = recipe_of(spec)
    if recipe is None:
        return None
    rule_id = result.rule.id
    maker = ""
    if rule_id in _CASES:
        body, maker = _consumer_case(recipe, _CASES[rule_id]), _MAKER
    elif rule_id in _PRODUCER_RULES:
        body = _PRODUCER_RULES[rule_id](recipe)
    else:
        body = None
    if body is None:
        return None
    return (f"# {spec}: {rule_id} ({result.rule.citation()})\n{recipe.imports}\n"
            f"# --- helpers: DLPack's structs and capsules through ctypes ---\n{_helpers(maker + body)}{maker}\n"
            f"# --- the check ---\nRULE = {result.rule.text!r}\n{body}"
            'print("ok: the rule holds here")\n')
