"""What ``dlpack-ref bench`` measures: each call named by a key, built from
the harness's library adapters (the arrays every library's factory makes,
each consumer's import as its users call it), and the probe that runs one
call once in a child process before the benchmark runs it in its own.

Keys (tuples of strings; lists once they have been through JSON):

``("pair", P, C)``
    C's import of x, a small array of producer P (the result dropped): its
    ``from_dlpack(x)``, or ``from_dlpack(x.__dlpack__(...))`` for a
    consumer that takes capsules.
``("dlpack", P)``, ``("device", P)``
    ``x.__dlpack__()`` and ``x.__dlpack_device__()`` alone.
``("capsule", P)``
    ``dlpack_ref.from_dlpack(x.__dlpack__(max_version=(1, 3)))``: the import
    through ``__dlpack__``, measured beside ``("pair", P, "dlpack_ref")``
    (the import through P's C exchange table) for types that publish one.
``("copy", L)``
    L's import of big with ``copy=True``, big a large array of L itself,
    timed until the copy can be read (:func:`readable`).
``("copy_numpy", L)``
    L's import of a large NumPy array with ``copy=True``: every consumer's
    copy of the same source, timed the same way.
``("memcpy",)``
    ``memmove`` of the same bytes between two buffers made once: what the
    machine's own copy costs.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable

import dlpack_ref

from dlpack_ref.harness.exchange import exchange
from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.registry import subject
from dlpack_ref.harness.subject import data_pointer

#: The small array every producer makes for the latency cases.
SMALL_SHAPE = (16,)
DTYPE = "float32"
_ITEMSIZE = 4


def plan(producers: list[str], consumers: list[str], numpy: bool = True) -> list[tuple[str, ...]]:
    """Every key of the latency cases and the copies, in report order
    (``numpy``: whether NumPy is there to be the copies' common source)."""
    keys: list[tuple[str, ...]] = [("pair", p, c) for p in producers for c in consumers]
    for p in producers:
        keys += [("dlpack", p), ("device", p), ("capsule", p)]
    keys += [("copy", c) for c in consumers]
    if numpy:
        keys += [("copy_numpy", c) for c in consumers]
    keys.append(("memcpy",))
    return keys


def is_copy(key: tuple[str, ...]) -> bool:
    """Whether a key names a call on the large array (bandwidth, not latency)."""
    return key[0] in ("copy", "copy_numpy", "memcpy")


def name(key: tuple[str, ...]) -> str:
    """A key as one string (the name callgrind and progress lines use)."""
    return "|".join(key)


def importer(spec: str, **kwargs) -> Callable[[object], object]:
    """Library ``spec``'s import as its users call it: ``from_dlpack(x,
    **kwargs)``, or of ``x.__dlpack__(...)`` for a consumer that takes
    capsules (no wrapper in the timed call when it takes the object)."""
    consumer = subject(spec).consumer
    if consumer is None:
        raise LookupError(f"{spec} has no from_dlpack adapter")
    from_dlpack, request = consumer.from_dlpack, consumer.capsule_request
    if request is None:
        return (lambda x: from_dlpack(x, **kwargs)) if kwargs else from_dlpack
    return lambda x: from_dlpack(x.__dlpack__(**request), **kwargs)


def readable(spec: str) -> Callable[[object], None]:
    """``ready(result)``: returns once a copy made by library ``spec`` can
    be read, the wait (:func:`ready_by`) timed with the copy.

    A library may return from ``from_dlpack(x, copy=True)`` before its copy
    is made (JAX dispatches it, and its array is ready later): timed to the
    return, such a copy would look faster than memcpy. Whatever the library,
    the result's own ``__dlpack__()`` hands out memory that a CPU consumer
    reads at once, so it waits for the work pending on the result: the
    plain export, its capsule dropped, ends every timed copy. A result
    without ``__dlpack__`` is read through the adapter's data pointer, the
    one reading of it every consumer has.
    """
    pointer = subject(spec).consumer.pointer

    def ready(result) -> None:
        if ready_by(result) == "__dlpack__":
            result.__dlpack__()
        else:
            pointer(result)
    return ready


def ready_by(result) -> str:
    """How :func:`readable` waits for ``result``: ``"__dlpack__"`` or ``"data pointer"``."""
    return "__dlpack__" if getattr(type(result), "__dlpack__", None) is not None else "data pointer"


class Arrays:
    """The arrays the calls work on, made once each, on first use (a library
    whose factory fails is met only by the keys that need it)."""

    def __init__(self, copy_bytes: int):
        self.copy_bytes = copy_bytes

    @functools.cache
    def small(self, spec: str):
        """Producer ``spec``'s small array."""
        producer = subject(spec).producer
        if producer is None:
            raise LookupError(f"{spec} has no producer adapter")
        return producer.make(DTYPE, SMALL_SHAPE)

    @functools.cache
    def filled(self, which: str) -> dlpack_ref.Array:
        """A large dlpack_ref array written once (pages mapped, not the zero
        page): ``"source"`` and ``"target"`` of the memcpy."""
        a = dlpack_ref.empty((self.copy_bytes // _ITEMSIZE,), dtype=DTYPE)
        a[...] = 1.0 if which == "source" else 0.0
        return a

    @functools.cache
    def big(self, spec: str):
        """Library ``spec``'s own large array: the source imported by its
        ``from_dlpack``."""
        return importer(spec)(self.filled("source"))

    @functools.cache
    def numpy_big(self):
        """A large NumPy array holding the source's values."""
        import numpy as np
        return np.array(self.filled("source"), copy=True)


def call_of(key: tuple[str, ...], arrays: Arrays) -> Callable[[], object]:
    """The call a key names, its arrays made (see the module docstring)."""
    kind = key[0]
    # Every call is a Python function calling one thing, as callgrind's
    # empty call (the loop's cost, subtracted) is.
    if kind == "pair":
        x, take = arrays.small(key[1]), importer(key[2])
        return lambda: take(x)
    if kind == "dlpack":
        x = arrays.small(key[1])
        return lambda: x.__dlpack__()
    if kind == "device":
        x = arrays.small(key[1])
        return lambda: x.__dlpack_device__()
    if kind == "capsule":
        x, version, import_capsule = arrays.small(key[1]), dlpack_ref.DLPACK_VERSION, dlpack_ref.from_dlpack
        return lambda: import_capsule(x.__dlpack__(max_version=version))
    if kind in ("copy", "copy_numpy"):
        big = arrays.big(key[1]) if kind == "copy" else arrays.numpy_big()
        take, ready = importer(key[1], copy=True), readable(key[1])

        def copy():
            result = take(big)
            ready(result)
            return result
        return copy
    if kind == "memcpy":
        dst, src, n = arrays.filled("target").data_ptr, arrays.filled("source").data_ptr, arrays.copy_bytes
        return lambda: ctypes.memmove(dst, src, n)
    raise ValueError(f"unknown case {key!r}")


def calls(keys: list[list[str]], copy_bytes: int) -> dict[str, Callable[[], object]]:
    """name -> call of each key: the factory the instruction counts run
    (``callgrind.count("dlpack_ref.bench.cases:calls", ...)``)."""
    arrays = Arrays(copy_bytes)
    return {name(tuple(k)): call_of(tuple(k), arrays) for k in keys}


@functools.cache
def _process_arrays(copy_bytes: int) -> Arrays:
    return Arrays(copy_bytes)


def probe(task: dict, subjects=None) -> dict:
    """Child side of the pre-flight: run the call of ``task["key"]`` once.

    Returns
    -------
    dict
        ``{"ok": True}`` with what the call showed (``zero_copy`` for a pair:
        the exchange's judgement by pointer; ``copied`` and ``ready_by``
        (:func:`ready_by`) for a copy;
        ``table``: the exchange-table version dlpack_ref would use for the
        producer's type, or None), or ``{"ok": False, "stage", "exc_type",
        "exc_message"}`` when the arrays could not be made (stage
        ``"make"``) or the call raised (stage ``"call"``). A crash or a hang
        is the runner's to report.
    """
    key = tuple(task["key"])
    arrays = _process_arrays(task["copy_bytes"])
    try:
        call = call_of(key, arrays)
    except Exception as e:
        return {"ok": False, "stage": "make", "exc_type": exc_name(e), "exc_message": short(e)}
    try:
        result = call()
    except Exception as e:
        return {"ok": False, "stage": "call", "exc_type": exc_name(e), "exc_message": short(e)}
    outcome: dict = {"ok": True}
    if key[0] == "pair":
        cell = exchange(subject(key[1]).producer, subject(key[2]).consumer, SMALL_SHAPE, DTYPE)
        outcome["zero_copy"] = cell.get("zero_copy")
    elif key[0] in ("copy", "copy_numpy"):
        source = arrays.big(key[1]) if key[0] == "copy" else arrays.numpy_big()
        try:
            same = subject(key[1]).consumer.pointer(result) == data_pointer(source)
        except Exception:
            same = None
        outcome["copied"] = None if same is None else not same
        outcome["ready_by"] = ready_by(result)
    elif key[0] == "capsule":
        version = dlpack_ref.exchange_api_version(type(arrays.small(key[1])))
        outcome["table"] = None if version is None else list(version)
    return outcome
