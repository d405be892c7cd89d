"""A library under check or benchmark: what it produces (:class:`Producer`),
what it consumes (:class:`Consumer`), what it makes in CUDA memory
(:class:`CudaProducer`), together a :class:`Subject`; and how a consumer
asks a producer for a capsule once it knows what the producer's
``__dlpack__`` takes (:func:`ask`).

Pure Python with ctypes (the reproductions carry these definitions as they
are): a capsule is read with :mod:`dlpack_ref.testing.reader`, never
through dlpack-ref's core.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Callable

from dlpack_ref.testing.abi import DLPACK_VERSION, FLAG_READ_ONLY
from dlpack_ref.testing.reader import read_capsule, read_values

from .observe import elementwise_values

__all__ = ["NotSupported", "Producer", "Consumer", "CudaProducer", "Subject", "KEYWORDS", "keywords_taken", "ask",
           "export_any", "data_pointer", "first_element", "result_values"]


class NotSupported(Exception):
    """Raised by a factory or a check: the library does not offer what the
    check needs (a dtype, read-only arrays, a scalar type, a keyword, ...)."""

    def __init__(self, detail: str, exc: BaseException | None = None):
        super().__init__(detail)
        self.detail = detail
        self.exc = exc


#: The keywords the standard gives ``__dlpack__``, each with the value a
#: consumer passes to ask for nothing in particular (``max_version``: the
#: version every consumer of this checker asks for).
KEYWORDS = {"max_version": DLPACK_VERSION, "stream": None, "dl_device": None, "copy": None}
_TAKEN: dict[type, frozenset] = {}


def keywords_taken(x, fresh: Callable[[], Any] | None = None) -> frozenset:
    """The keywords of :data:`KEYWORDS` that ``type(x).__dlpack__`` takes,
    probed once per type and process: a keyword whose plain value raises
    TypeError is not taken. Each probe asks ``fresh()`` (another object of
    the same kind) when given, so that ``x`` itself is not exported by the
    probe. Without ``max_version`` the producer is a pre-1.0 one, which a
    consumer asks without it (the spec's fallback)."""
    taken = _TAKEN.get(type(x))
    if taken is None:
        found = set()
        for keyword, value in KEYWORDS.items():
            try:
                (fresh() if fresh is not None else x).__dlpack__(**{keyword: value})
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


def result_values(r):
    """The values of a consumer's result: read from its own ``__dlpack__``,
    else by the library's own means (``tolist()``, ``to_numpy()``,
    ``__array__``), as nested lists.

    Raises
    ------
    LookupError
        When none of them reads it (what each raised, or lacked, said).
    """
    tried = []
    try:
        return read_values(export_any(r))
    except Exception as e:
        tried.append(f"__dlpack__: {type(e).__name__}: {str(e)[:80]}")
    means = (("tolist()", lambda: r.tolist()), ("to_numpy()", lambda: r.to_numpy().tolist()),
             ("__array__()", lambda: r.__array__().tolist()))
    for what, read in means:
        try:
            return read()
        except Exception as e:
            tried.append(f"{what}: {type(e).__name__}")
    raise LookupError("; ".join(tried))


def first_element(info: dict) -> int:
    """The address of the first element of a tensor read by ``read_capsule``."""
    return info["data"] + info["byte_offset"]


def data_pointer(x) -> int:
    """The address of the first element of what ``x`` exports."""
    return first_element(read_capsule(export_any(x)))


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
    (export must raise BufferError). ``single_use``: each array exports
    once (a second ``__dlpack__`` of it raises): every request is made of a
    fresh array, and a rule that must export one array twice is not
    supported; None (the default): found out when first needed, by two
    plain exports of one array.
    """

    name: str
    factory: Callable[..., Any]
    tolist: Callable[[Any], Any] | None = None
    views: Callable[[], dict] | None = None
    scalar: Callable[[], Any] | None = None
    unexportable: Callable[[], dict] | None = None
    single_use: bool | None = None

    def make(self, dtype: str, shape: tuple, readonly: bool = False):
        """An array of the factory, its producer's capability known (probed
        on arrays of its own, not on this one)."""
        def made():
            try:
                return self.factory(dtype, shape, readonly) if readonly else self.factory(dtype, shape)
            except NotSupported:
                raise
            except Exception as e:
                what = f"read-only {dtype}" if readonly else dtype
                raise NotSupported(f"{self.name} cannot make a {what} array of shape {shape}", e) from e
        x = made()
        keywords_taken(x, fresh=made)
        return x

    def values(self, x):
        if self.tolist is None:
            return elementwise_values(x)
        return self.tolist(x)

    def exports_once(self) -> bool:
        """Whether each array exports once: ``single_use``, found out (and
        kept) when it is None: an array whose second plain export raises
        after a first that worked."""
        if self.single_use is None:
            x = self.make("float32", (6,))  # 1-D: every library has those
            try:
                x.__dlpack__()
            except Exception:
                return False  # not single use: refused, whatever the reason; asked again next time
            try:
                x.__dlpack__()
                self.single_use = False
            except Exception:
                self.single_use = True
        return self.single_use

    def twice(self, what: str) -> None:
        """Before a second export of one array: NotSupported for a
        single-use producer, which cannot give it."""
        if self.exports_once():
            raise NotSupported(f"{what} needs a second export of one array, and {self.name}'s arrays export "
                               "once (single use)")


@dataclasses.dataclass
class Consumer:
    """What the consumer checks need to know about a ``from_dlpack``.

    ``tolist(r)``: values of a result (default: read from the result's own
    ``__dlpack__`` with ctypes). ``data_ptr(r)``: address of the first
    element of a result (default: read from the result's own
    ``__dlpack__``). ``readonly(r)``: whether a result is read-only
    (default: the READ_ONLY flag of its versioned export; None when
    unknown). ``cpu_device``: what ``device=`` takes for the CPU (None: no
    device keyword). ``spec``: ``"module:attr"`` naming this Consumer or its
    ``from_dlpack`` in a fresh process; without one, the cases run in a
    forked child. ``capsule_request``: None when ``from_dlpack`` takes an
    object with ``__dlpack__`` (the standard's form); for a ``from_dlpack``
    that takes only a capsule, the keywords its users export with (``{}``:
    a legacy ``dltensor`` capsule, ``{"max_version": (1, 3)}``: a versioned
    one), and the checker hands it ``x.__dlpack__(**capsule_request)``; the
    cases about what ``from_dlpack`` asks of ``__dlpack__`` are then not
    supported. ``shapeless``: the results are byte buffers without shape or
    dtype (``tolist(r)`` returns their bytes), compared with the expected
    values' bytes in C order.
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
        if self.tolist is None:
            return result_values(r)
        return self.tolist(r)

    def expected(self, values, dtype: str):
        """What :meth:`values` gives for a result holding ``values`` of
        ``dtype`` (``float64`` or ``float32``): the values, or their bytes
        in C order for a shapeless consumer."""
        if self.shapeless:
            flat, pending = [], [values]
            while pending:
                v = pending.pop()
                if isinstance(v, list):
                    pending.extend(reversed(v))
                else:
                    flat.append(v)
            return struct.pack(f"<{len(flat)}{'d' if dtype == 'float64' else 'f'}", *flat)
        return values

    def take(self, x, **kwargs):
        """``from_dlpack(x, **kwargs)``, handing a capsule-taking one the
        capsule its users would export from ``x``."""
        if self.capsule_request is not None:
            x = x.__dlpack__(**self.capsule_request)
        return self.from_dlpack(x, **kwargs)

    # Each fallback stands alone under its `if`: a reproduction of a library
    # whose adapter gives the option carries neither it nor what it reads.
    def pointer(self, r) -> int:
        if self.data_ptr is None:
            return data_pointer(r)
        return self.data_ptr(r)

    def is_readonly(self, r) -> bool | None:
        if self.readonly is None:
            info = read_capsule(export_any(r))
            return bool(info["flags"] & FLAG_READ_ONLY) if info["versioned"] else None
        return self.readonly(r)


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
    CUDA arrays, for the CUDA checks (None: it cannot). ``absent``: for a
    side that is None, what was looked for and not found. ``adapter``: how
    it was built (``known``: its library file, ``hook``: its factory hook,
    ``generic``: the generic adapter; ``""``: by the caller)."""

    name: str
    version: str
    producer: Producer | None
    consumer: Consumer | None
    spec: str | None = None
    cuda: CudaProducer | None = None
    absent: dict[str, str] = dataclasses.field(default_factory=dict)
    adapter: str = ""
