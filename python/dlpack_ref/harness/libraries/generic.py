"""Any module that is not a known library: through its factory hook
(``__dlpack_conformance__``) when it has one, else through what the array
API and DLPack let a stranger find.

The generic adapter looks for a producer in ``asarray`` (with ``reshape``:
arrays of every dtype the module names) and, without one, in
``from_dlpack`` of NumPy arrays; either way the arrays must have
``__dlpack__``. It looks for a consumer in ``from_dlpack`` (or the attribute the
spec names), handed an object with ``__dlpack__``, or a capsule when that is
all it takes. What it looked for and did not find is said, never silently
dropped.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

from ..subject import Consumer, CudaProducer, NotSupported, Producer
from ._common import arange_values, numpy_array

#: The factory hook: a module that defines this (a callable returning
#: ``(Producer | None, Consumer | None)``, or with a third item its
#: ``CudaProducer | None``) is checked through it.
HOOK = "__dlpack_conformance__"


def hooked_subject(module_name: str):
    """The ``(producer, consumer, cuda_producer)`` the hook of ``module_name``
    returns (a hook that returns a pair has no CUDA producer).

    Raises
    ------
    TypeError
        When the hook returns anything else.
    """
    hook = getattr(importlib.import_module(module_name), HOOK)
    made = hook()
    sides = (Producer, Consumer, CudaProducer)
    if not (isinstance(made, (tuple, list)) and len(made) in (2, 3)
            and all(part is None or _is_a(part, kind) for part, kind in zip(made, sides))):
        raise TypeError(f"{module_name}.{HOOK}() returned {made!r:.80}; it must return (Producer or None, "
                        "Consumer or None), or with a third item, CudaProducer or None (dlpack_ref.conformance)")
    return tuple(None if part is None else _as_own(part, kind) for part, kind in zip((*made, None)[:3], sides))


def _is_a(part, kind: type) -> bool:
    """Whether ``part`` is a ``kind``: this module's, or, in a reproduction
    (which carries its own copy of the class), dlpack_ref's of that name."""
    return isinstance(part, kind) or any(k.__name__ == kind.__name__ for k in type(part).__mro__)


def _as_own(part, kind: type):
    """``part`` as an instance of this module's ``kind``. In a reproduction
    the hook's module makes dlpack_ref's classes while the checks carry
    copies: made again from its fields, ``part``'s methods are the copy's,
    so that the NotSupported they raise is the one the checks catch."""
    if isinstance(part, kind):
        return part
    return kind(**{field.name: getattr(part, field.name) for field in dataclasses.fields(kind)})


class ProbedConsumer(Consumer):
    """A Consumer whose ``capsule_request`` is found when first asked (an
    import of a NumPy array, then of its capsules), in the process that
    checks it, not when it is made: a consumer that crashes crashes a rule."""

    @property
    def capsule_request(self) -> dict | None:
        if "_capsule_request" not in self.__dict__:
            self.__dict__["_capsule_request"] = _consumer_request(self.from_dlpack)
        return self.__dict__["_capsule_request"]

    @capsule_request.setter
    def capsule_request(self, value: dict | None) -> None:
        if value is not None:
            self.__dict__["_capsule_request"] = value


def _consumer_request(from_dlpack):
    """What ``from_dlpack`` must be handed: None (an object with
    ``__dlpack__``), or the keywords of the capsule it takes instead, probed
    with a NumPy array. Whatever the probe raises is an answer, never the
    checker's error: anything but a TypeError (a library not initialised, a
    GPU library handed CPU memory) is a refusal each rule then observes
    itself, and a capsule that is refused too says the same."""
    try:
        import numpy as np
    except ImportError:
        return None
    try:
        from_dlpack(np.arange(3.0))
        return None
    except TypeError:
        pass
    except Exception:
        return None
    for request in ({"max_version": (1, 3)}, {}):
        try:
            from_dlpack(np.arange(3.0).__dlpack__(**request))
            return request
        except Exception:
            continue
    return None


def in_fork(fn, timeout: float = 60.0):
    """``fn()`` (a str or None) computed in a forked child, so that a crash
    or a hang of the library it calls is an answer here: ``"killed by
    SIGSEGV"``, ``"hung"``."""
    import json
    import os
    import select
    import signal
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    answer = os.read(read, 1 << 16) if ready else b""
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"trying it killed the process with {signal.Signals(os.WTERMSIG(status)).name}"
    return json.loads(answer) if answer else "trying it hung"


def generic_subject(module_name: str, attr: str | None = None):
    """``(producer, consumer, absent)`` of any module: each side or None,
    and for a None side what was looked for (``absent["producer"]``,
    ``absent["consumer"]``).

    Raises
    ------
    LookupError
        When ``attr`` names nothing in the module.
    """
    module = importlib.import_module(module_name)
    from_dlpack = module
    for part in (attr or "from_dlpack").split("."):
        from_dlpack = getattr(from_dlpack, part, None)
    if attr and from_dlpack is None:
        raise LookupError(f"{module_name} has no attribute {attr!r}")
    absent = {}
    spec = f"{module_name}:{attr}" if attr else module_name
    asarray, reshape = getattr(module, "asarray", None), getattr(module, "reshape", None)
    make, via_import = None, False
    if asarray is not None and reshape is not None:
        def make(dtype, shape, readonly=False):
            if readonly:
                raise NotSupported("the array API has no read-only arrays")
            dt = getattr(module, dtype, None)
            if dt is None:
                raise NotSupported(f"{module_name} has no {dtype}")
            return reshape(asarray(arange_values(math.prod(shape), dtype), dtype=dt), shape)
        source = f"{module_name}.asarray"
    elif callable(from_dlpack):
        def make(dtype, shape, readonly=False):
            return from_dlpack(numpy_array(dtype, shape, readonly))
        source, via_import = f"{module_name}.{attr or 'from_dlpack'} of NumPy arrays", True
    producer = None
    if make is None:
        absent["producer"] = (f"no producer: {module_name} has neither asarray (with reshape) nor a "
                              "from_dlpack to make arrays with")
    else:
        def unusable():
            try:
                made = make("float32", (2, 3))
            except Exception as e:
                return f"{type(e).__name__}: {e}"
            kind = f"{type(made).__module__}.{type(made).__qualname__}"
            if not hasattr(made, "__dlpack__"):
                return f"its {kind} objects have no __dlpack__"
            if via_import and kind.split(".")[0] != module_name.split(".")[0]:
                return f"it gives {kind} objects, not its own"
            return None
        # a from_dlpack is the consumer under check, and may crash: tried in a fork of its own
        why = in_fork(unusable) if via_import else unusable()
        if why is not None:
            absent["producer"] = f"no producer: {source} was tried, and {why}"
        else:
            def views():
                x = make("float64", (6,))
                cases = {"offset x[1:]": x[1:], "strided x[::2]": x[::2], "reversed x[::-1]": x[::-1]}
                try:
                    cases["transposed m.T"] = make("float64", (2, 3)).T
                except Exception:
                    pass  # a 1-D-only library: its 1-D views show the rule's point
                return cases
            producer = Producer(spec, make, views=views)
    consumer = None
    if callable(from_dlpack):
        try:
            cpu = getattr(asarray([0]), "device", None) if asarray is not None else None
        except Exception:
            cpu = None  # asarray refuses (the library wants setting up first): no device keyword to give
        consumer = ProbedConsumer(spec, from_dlpack, cpu_device=cpu, spec=spec)
    else:
        absent["consumer"] = f"no consumer: {module_name} has no {attr or 'from_dlpack'}"
    return producer, consumer, absent
