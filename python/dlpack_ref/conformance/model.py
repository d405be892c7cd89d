"""The model of the conformance checks: what is checked (:class:`Producer`,
:class:`Consumer`), the rules (:class:`Rule`), their outcomes (:class:`Result`,
:class:`Status`) and the two exceptions a check raises. A leaf: it imports
nothing of the checker."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable

import dlpack_ref
from dlpack_ref.testing import FLAG_READ_ONLY, read_capsule

# Where rules are written. The keys are what reports print.
SOURCES = {
    "header": "DLPack header (dlpack.h, DLPack 1.3)",
    "python": "DLPack Python spec (dmlc.github.io/dlpack/latest/python_spec.html)",
    "array-api": "array API standard (__dlpack__, __dlpack_device__, from_dlpack)",
    "exchange-api": "DLPack header, C exchange API (DLPackExchangeAPI, DLPack 1.3)",
    "dlpack-ref": "dlpack-ref's decision where the standards are silent (docs/semantics.md)",
}


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_SUPPORTED = "not supported"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule: ``id`` (dotted, e.g. ``producer.copy_true``), what it says,
    and where it is written (a key of SOURCES plus the section)."""

    id: str
    text: str
    source: str
    where: str = ""

    def citation(self) -> str:
        return SOURCES[self.source] + (f", {self.where}" if self.where else "")


@dataclasses.dataclass
class Result:
    """The outcome of one rule for one ``subject`` (a library name)."""

    rule: Rule
    status: Status
    detail: str = ""
    exc_type: str | None = None
    exc_message: str | None = None
    subject: str = ""

    def to_dict(self) -> dict:
        return {
            "subject": self.subject, "check": self.rule.id, "status": self.status.value,
            "rule": self.rule.text, "source": self.rule.citation(), "detail": self.detail,
            "exception_type": self.exc_type, "exception_message": self.exc_message,
        }

    def line(self, limit: int = 0) -> str:
        """``[status] subject: rule id: detail (observed ...)``, cut to
        ``limit`` characters when it is positive."""
        text = f"[{self.status.value}] {self.subject + ': ' if self.subject else ''}{self.rule.id}: {self.detail}"
        if self.exc_type:
            text += f" (observed {self.exc_type}: {self.exc_message})"
        return short(text, limit) if limit > 0 else text

    @property
    def failed(self) -> bool:
        """FAIL or ERROR: the rule is broken or could not be checked."""
        return self.status in (Status.FAIL, Status.ERROR)


class CheckFailed(Exception):
    """Raised inside a check: the rule is broken. ``exc`` is the library's
    exception that shows it, if any."""

    def __init__(self, detail: str, exc: BaseException | None = None):
        super().__init__(detail)
        self.detail = detail
        self.exc = exc


class NotSupported(Exception):
    """Raised inside a check or by a factory: the library does not offer
    what the check needs (a dtype, read-only arrays, a scalar type, ...)."""

    def __init__(self, detail: str, exc: BaseException | None = None):
        super().__init__(detail)
        self.detail = detail
        self.exc = exc


def exc_name(exc: BaseException) -> str:
    t = type(exc)
    return t.__name__ if t.__module__ in ("builtins", None) else f"{t.__module__}.{t.__qualname__}"


def short(message: object, limit: int = 300) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_check(rule: Rule, body: Callable[[], str], subject: str = "") -> Result:
    """Run one check body: its return value is the pass detail; CheckFailed,
    NotSupported and any other exception become fail, not supported, error."""
    try:
        detail = body()
        return Result(rule, Status.PASS, detail or "", subject=subject)
    except CheckFailed as e:
        status, detail, exc = Status.FAIL, e.detail, e.exc
    except NotSupported as e:
        status, detail, exc = Status.NOT_SUPPORTED, e.detail, e.exc
    except Exception as e:  # the check could not run: report what happened
        status, detail, exc = Status.ERROR, "the check could not run", e
    return Result(rule, status, detail, exc_name(exc) if exc else None,
                  short(exc) if exc else None, subject=subject)


class RuleTable:
    """Rules, each beside its check: ``@table.rule(id, text, source, where)``
    registers a function of the thing checked that returns a pass detail."""

    def __init__(self) -> None:
        self.checks: list[tuple[Rule, Callable[[Any], str]]] = []
        self.rules: dict[str, Rule] = {}

    def rule(self, rule_id: str, text: str, source: str, where: str = ""):
        def register(fn):
            rule = Rule(rule_id, text, source, where)
            self.checks.append((rule, fn))
            self.rules[rule_id] = rule
            return fn
        return register

    def run_one(self, target, check_id: str, subject: str) -> Result:
        """The Result of the check ``check_id`` on ``target``."""
        for rule, fn in self.checks:
            if rule.id == check_id:
                return run_check(rule, lambda: fn(target), subject=subject)
        raise KeyError(f"no check {check_id!r}; known: {list(self.rules)}")

    def run_all(self, target, subject: str, only: list[str] | None = None) -> list[Result]:
        """Every check (or those named in ``only``) on ``target``, in this process."""
        return [run_check(rule, lambda fn=fn: fn(target), subject=subject)
                for rule, fn in self.checks if only is None or rule.id in only]


def flag_set(info: dict, bit: int, legacy: str, missing: str) -> str:
    """Pass detail when ``bit`` is set in a versioned capsule's flags (as
    ``read_capsule`` gives them); NotSupported(legacy) for a legacy capsule,
    CheckFailed(missing) when unset."""
    if not info["versioned"]:
        raise NotSupported(legacy)
    flags = f"flags={info['flags']:#x}"
    if not info["flags"] & bit:
        raise CheckFailed(f"{flags}: {missing}")
    return flags


def result_from_dict(d: dict, rule: Rule) -> Result:
    """The inverse of Result.to_dict for results sent back by a worker."""
    return Result(rule, Status(d["status"]), d.get("detail", ""), d.get("exception_type"),
                  d.get("exception_message"), subject=d.get("subject", ""))


@dataclasses.dataclass
class Producer:
    """What the producer checks need to know about a library.

    ``factory(dtype, shape, readonly=False)`` returns an array of the dtype
    named as in ``dlpack_ref.DTYPES`` (``"float32"``, ``"bfloat16"``,
    ``"float8_e4m3fn"``, ...) holding ``arange(size)`` (or any values), and
    raises (any exception, ideally :class:`NotSupported`) for a dtype or a
    read-only array the library does not have. ``tolist(x)``: the library's
    own reading of the values (default: element by element, ``x[i, j]``
    converted with ``bool``/``int``/``float``/``complex``, which the array
    API guarantees; never ``x.tolist()``). ``views()``: named views whose
    exported values must equal the library's own (e.g. negated, conjugated,
    offset). ``scalar()``: a scalar of the library, or None when it has no
    scalar type. ``unexportable()``: named objects that cannot be exported
    (export must raise BufferError).
    """

    name: str
    factory: Callable[..., Any]
    tolist: Callable[[Any], Any] | None = None
    views: Callable[[], dict] | None = None
    scalar: Callable[[], Any] | None = None
    unexportable: Callable[[], dict] | None = None

    def make(self, dtype: str, shape: tuple, readonly: bool = False):
        try:
            return self.factory(dtype, shape, readonly) if readonly else self.factory(dtype, shape)
        except NotSupported:
            raise
        except Exception as e:
            what = f"read-only {dtype}" if readonly else dtype
            raise NotSupported(f"{self.name} cannot make a {what} array of shape {shape}", e) from e

    def values(self, x):
        return self.tolist(x) if self.tolist is not None else elementwise_values(x)


@dataclasses.dataclass
class Consumer:
    """What the consumer checks need to know about a ``from_dlpack``.

    ``tolist(r)``: values of a result (default: read through DLPack, with
    ``dlpack_ref.from_dlpack(r)``). ``data_ptr(r)``: address of the first
    element of a result (default: read from the result's own ``__dlpack__``).
    ``readonly(r)``: whether a result is read-only (default: the READ_ONLY
    flag of its versioned export; None when unknown). ``cpu_device``: what
    ``device=`` takes for the CPU (None: no device keyword). ``spec``:
    ``"module:attr"`` naming this Consumer or its ``from_dlpack`` in a fresh
    process; without one, the cases run in a forked child.
    ``capsule_request``: None when ``from_dlpack`` takes an object with
    ``__dlpack__`` (the standard's form); for a ``from_dlpack`` that takes
    only a capsule, the keywords its users export with
    (``{}``: a legacy ``dltensor`` capsule, ``{"max_version": (1, 3)}``: a
    versioned one), and the checker hands it ``x.__dlpack__(**capsule_request)``;
    the cases about what ``from_dlpack`` asks of ``__dlpack__`` are then
    not supported. ``shapeless``: the results are byte buffers without shape
    or dtype (``tolist(r)`` returns their bytes), compared with the
    expected values' bytes in C order.
    """

    name: str
    from_dlpack: Callable[..., Any]
    tolist: Callable[[Any], Any] | None = None
    data_ptr: Callable[[Any], int] | None = None
    readonly: Callable[[Any], bool | None] | None = None
    cpu_device: Any = None
    spec: str | None = None
    capsule_request: dict | None = None
    shapeless: bool = False

    def values(self, r):
        return self.tolist(r) if self.tolist is not None else dlpack_ref.from_dlpack(r).tolist()

    def expected(self, values, dtype: str):
        """What :meth:`values` gives for a result holding ``values`` of
        ``dtype``: the values, or their bytes for a shapeless consumer."""
        return bytes(memoryview(dlpack_ref.asarray(values, dtype=dtype))) if self.shapeless else values

    def take(self, x, **kwargs):
        """``from_dlpack(x, **kwargs)``, handing a capsule-taking one the
        capsule its users would export from ``x``."""
        if self.capsule_request is not None:
            x = x.__dlpack__(**self.capsule_request)
        return self.from_dlpack(x, **kwargs)

    def pointer(self, r) -> int:
        if self.data_ptr is not None:
            return self.data_ptr(r)
        return first_element(read_capsule(export_any(r)))

    def is_readonly(self, r) -> bool | None:
        if self.readonly is not None:
            return self.readonly(r)
        info = read_capsule(export_any(r))
        return bool(info["flags"] & FLAG_READ_ONLY) if info["versioned"] else None


#: The keywords the standard gives ``__dlpack__``, each with the value a
#: consumer passes to ask for nothing in particular (``max_version``: the
#: version every consumer of this checker asks for).
KEYWORDS = {"max_version": dlpack_ref.DLPACK_VERSION, "stream": None, "dl_device": None, "copy": None}
_TAKEN: dict[type, frozenset] = {}


def keywords_taken(x) -> frozenset:
    """The keywords of :data:`KEYWORDS` that ``type(x).__dlpack__`` takes,
    probed once per type and process: a keyword whose plain value raises
    TypeError is not taken. Without ``max_version`` the producer is a pre-1.0
    one, which a consumer asks without it (the spec's fallback)."""
    taken = _TAKEN.get(type(x))
    if taken is None:
        found = set()
        for keyword, value in KEYWORDS.items():
            try:
                x.__dlpack__(**{keyword: value})
            except TypeError:
                continue
            except Exception:
                pass  # taken, and refused for a reason of the producer's own
            found.add(keyword)
        taken = frozenset(found)
        if taken:  # nothing taken may be this object's refusal of any export: ask again next time
            _TAKEN[type(x)] = taken
    return taken


def ask(x, **kwargs):
    """``x.__dlpack__(**kwargs)`` as a consumer that knows the producer's
    capability (:func:`keywords_taken`) calls it: ``max_version`` added
    when the producer takes it, never sent to a pre-1.0 producer.

    Raises
    ------
    NotSupported
        When a keyword in ``kwargs`` is one ``__dlpack__`` does not take:
        the request cannot be made, whatever the rule wanted to see.
    """
    taken = keywords_taken(x)
    missing = [k for k in kwargs if k not in taken]
    if missing:
        pre = ", a pre-1.0 producer" if "max_version" not in taken else ""
        raise NotSupported(f"__dlpack__ takes no {missing[0]} keyword (TypeError for {missing[0]}="
                           f"{KEYWORDS[missing[0]]!r}{pre})")
    if "max_version" in taken:
        kwargs.setdefault("max_version", KEYWORDS["max_version"])
    return x.__dlpack__(**kwargs)


def export_any(x):
    """A capsule of x, versioned when the producer has it: the plain request
    of a consumer (:func:`ask` with no keyword)."""
    return ask(x)


def data_pointer(x) -> int:
    """The address of the first element of what ``x`` exports."""
    return first_element(read_capsule(export_any(x)))


def dlpack_values(x):
    """The values of a producer or capsule as dlpack-ref imports them."""
    return dlpack_ref.from_dlpack(x).tolist()


def same_values(a, b) -> bool:
    """Nested values equal, NaN equal to NaN."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return False
    try:
        return a == b or (a != a and b != b)
    except Exception:
        return False


def first_element(info: dict) -> int:
    """The address of the first element of a tensor read by ``read_capsule``."""
    return info["data"] + info["byte_offset"]


def _python_scalar(x):
    """A 0-d array as a Python scalar, by the conversion its dtype calls for."""
    kind = str(getattr(x, "dtype", ""))
    if "bool" in kind:
        return bool(x)
    if "complex" in kind:
        return complex(x)
    if "int" in kind:
        return int(x)
    return float(x)


def elementwise_values(x):
    """Nested lists of an array's values read by indexing, as the array API
    allows (``x.shape``, ``x[i, j]`` and ``bool``/``int``/``float``/``complex``
    of a 0-d array); no ``tolist`` needed."""
    shape = tuple(x.shape)

    def at(prefix):
        if len(prefix) == len(shape):
            return _python_scalar(x[prefix])
        return [at(prefix + (i,)) for i in range(shape[len(prefix)])]
    return at(())


@dataclasses.dataclass
class CudaProducer:
    """What the CUDA checks (``cuda.*``) need to know about a library that can
    make arrays in CUDA memory.

    ``factory(kind, values)`` returns an array of ``kind`` (``"cuda"``:
    device memory of device 0, ``"managed"``: CUDA managed memory,
    ``"pinned"``: page-locked host memory) holding ``values`` (a float32
    NumPy array); it may still be being written on the library's default
    stream. It raises (any exception, ideally :class:`NotSupported`) for a
    kind the library cannot allocate. ``write(kind, values, stream)``, when
    the library can be told which stream to use: a new array of ``kind``
    whose data the library copies from ``values`` *enqueued on* ``stream``
    (a ``CUstream`` handle, as an int), without waiting for it; the CUDA
    checks keep that stream busy first, so the write is still pending when
    the array is exported. ``export_scope(stream)``: a context manager in
    which the exports happen, for libraries that order exports against
    their current stream (CuPy, PyTorch): it makes ``stream`` current
    (default: no scope).
    """

    name: str
    factory: Callable[[str, Any], Any]
    write: Callable[[str, Any, int], Any] | None = None
    export_scope: Callable[[int], Any] | None = None

    def make(self, kind: str, values):
        try:
            return self.factory(kind, values)
        except NotSupported:
            raise
        except Exception as e:
            raise NotSupported(f"{self.name} cannot make an array in {kind} memory", e) from e


@dataclasses.dataclass
class Subject:
    """A library under check: its name and version, what it produces and
    consumes (either may be None), and ``spec``, how a fresh process rebuilds
    it (an adapter name or ``"module"`` / ``"module:from_dlpack"``; None when
    it exists only in this process, as a lambda does). ``cuda``: how it makes
    CUDA arrays, for the CUDA checks (None: it cannot)."""

    name: str
    version: str
    producer: Producer | None
    consumer: Consumer | None
    spec: str | None = None
    cuda: CudaProducer | None = None
