"""The base of the breaking consumers: dlpack-ref's ``from_dlpack`` in
steps (:class:`Importer`), one of which a subclass breaks: the keywords it
imports with, its ``__dlpack__`` call, what it does with the capsule before
importing it, with a refusal, or with the result."""

from __future__ import annotations

import dataclasses
import weakref

import dlpack_ref as dr
from dlpack_ref.harness.subject import Consumer
from dlpack_ref.testing.abi import (
    NAME_LEGACY, NAME_USED_LEGACY, NAME_USED_VERSIONED, NAME_VERSIONED, PyCapsule_GetPointer, PyCapsule_SetName,
)
from dlpack_ref.testing.reader import capsule_name, read_capsule

from .producers import own
from .surgery import is_capsule

__all__ = ["Importer", "Remembering", "Substitute", "USED_NAMES", "Widening", "importing", "live_result", "on_host",
           "remember", "take_without_release"]


class Substitute(Exception):
    """Raised within an import: the consumer returns ``result`` instead."""

    def __init__(self, result):
        super().__init__("substituted")
        self.result = result


def tensor_address(capsule) -> int:
    """The address a capsule of any name holds (0 for a NULL name)."""
    name = capsule_name(capsule)
    return 0 if name is None else PyCapsule_GetPointer(id(capsule), name) or 0


class _Asked:
    """The producer as an Importer's import calls it: each request goes
    through ``importer.ask``, each capsule through ``importer.edit``, with
    the address it holds and, for an unconsumed DLPack capsule, its fields
    (``info``; None for any other name, whose struct need not match it)."""

    def __init__(self, x, importer):
        self.x, self.importer = x, importer
        self.capsule, self.info, self.address, self.fell_back = None, None, 0, False

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        got = self.importer.ask(self, kwargs)
        if not is_capsule(got):
            return got
        self.capsule, self.address = got, tensor_address(got)
        self.info = read_capsule(got) if capsule_name(got) in (NAME_VERSIONED, NAME_LEGACY) else None
        return self.importer.edit(got, self.info, kwargs)


class Importer:
    """dlpack-ref's ``from_dlpack`` in steps, each of which a subclass
    breaks: the keywords it imports with, its ``__dlpack__`` call, what it
    does with the capsule before importing it, with a refusal, with the result."""

    def keywords(self, device, copy):
        return device, copy

    def ask(self, asked: _Asked, kwargs: dict):
        try:
            return asked.x.__dlpack__(**kwargs)
        except TypeError:
            asked.fell_back = asked.fell_back or "max_version" in kwargs
            raise

    def edit(self, capsule, info, kwargs):
        return capsule

    def refused(self, error: Exception, asked: _Asked):
        raise error

    def result(self, r, asked: _Asked, device, copy):
        return r

    def __call__(self, x, /, *, device=None, copy=None):
        device, copy = self.keywords(device, copy)
        asked = _Asked(x, self)
        try:
            r = dr.from_dlpack(asked, device=device, copy=copy)
        except Substitute as s:
            return s.result
        except Exception as e:
            return self.refused(e, asked)
        return self.result(r, asked, device, copy)


def importing(importer: Importer) -> Consumer:
    """dlpack-ref's consumer with ``importer`` as its from_dlpack."""
    return dataclasses.replace(own().consumer, name=f"dlpack_ref's from_dlpack as {type(importer).__name__}",
                               from_dlpack=importer, spec=None)


def on_host(r) -> bool:
    """Whether a result of dlpack-ref's from_dlpack is in (plain) host memory."""
    return int(r.device.type) == int(dr.DeviceType.CPU)


def take_without_release(capsule) -> None:
    """Rename ``capsule`` as a consumer that took it, and never call its deleter (a leak)."""
    versioned = capsule_name(capsule) == NAME_VERSIONED
    PyCapsule_SetName(id(capsule), NAME_USED_VERSIONED if versioned else NAME_USED_LEGACY)


#: address of a managed tensor imported here -> a weak reference to its result
_LIVE: dict[int, weakref.ref] = {}


def remember(r, asked: _Asked) -> None:
    """Keep the address of ``asked``'s tensor while its result ``r`` lives."""
    address = asked.address

    def forget(ref):
        if _LIVE.get(address) is ref:  # not a later import's entry at a reused address
            del _LIVE[address]

    _LIVE[address] = weakref.ref(r, forget)


def live_result(capsule):
    """The live result of an import here of the tensor ``capsule`` holds, or None."""
    ref = _LIVE.get(tensor_address(capsule))
    return ref() if ref is not None else None


USED_NAMES = (NAME_USED_VERSIONED, NAME_USED_LEGACY)


class Remembering(Importer):
    """An Importer that remembers the tensor of each import while its
    result lives (:func:`live_result` answers for a capsule of it)."""

    def result(self, r, asked, device, copy):
        remember(r, asked)
        return r


class Widening(Importer):
    """Converts results of the dtypes of its ``widened`` table to the dtype it maps them to."""

    widened: dict = {}

    def result(self, r, asked, device, copy):
        return dr.asarray(r, dtype=self.widened[str(r.dtype)]) if str(r.dtype) in self.widened else r
