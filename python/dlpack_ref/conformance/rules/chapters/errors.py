"""Errors: what cannot be exported raises BufferError, and a producer's
BufferError reaches the consumer's caller as BufferError."""

from __future__ import annotations

from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.subject import NotSupported, export_any

from ..breaking.consumers import Importer
from ..breaking.producers import Unexportable, completed
from ..consumer_cases import import_asked, judged
from ..consumer_judges import refuses_with_buffererror
from ..support import CheckFailed
from ..table import breaks, rule


@rule(side="producer", source="array-api", where="from_dlpack / array.__dlpack__, Raises: BufferError")
def buffererror_for_unexportable(p) -> str:
    """what cannot be exported raises BufferError from __dlpack__ (and __dlpack_device__ does not raise another type)"""
    if p.unexportable is None:
        raise NotSupported("no unexportable objects given for this library")
    cases = p.unexportable()
    if not cases:
        raise NotSupported("the library has no arrays that cannot be exported")
    notes, bad = [], []
    for label, obj in cases.items():
        try:
            obj.__dlpack_device__()
        except BufferError:
            pass
        except Exception as e:
            bad.append(f"{label}: __dlpack_device__ raised {exc_name(e)}: {short(e, 100)}")
        try:
            export_any(obj)  # a SIGABRT or SIGSEGV here is the library's
        except BufferError:
            notes.append(f"{label}: BufferError")
            continue
        except Exception as e:
            bad.append(f"{label}: __dlpack__ raised {exc_name(e)}: {short(e, 100)}")
            continue
        bad.append(f"{label}: exported")
    if bad:
        raise CheckFailed("; ".join(bad))
    return "; ".join(notes)


@breaks(buffererror_for_unexportable, shows="an array of Python objects: __dlpack__ raised TypeError",
        subject=lambda cls: completed(unexportable=cls))
class UnexportableTypeError(Unexportable):
    """Refuses an export with TypeError, not BufferError."""

    error = TypeError


@rule(side="consumer", source="array-api", where="from_dlpack, Raises")
def producer_buffererror(c):
    """a BufferError from __dlpack__ reaches the caller as BufferError"""
    return judged(c, lambda f: import_asked(c, f, {}, raises=BufferError("cannot export (test)")),
                  refuses_with_buffererror, deleters=0, asks_producer=True)


@breaks(producer_buffererror, shows="refused with RuntimeError, not BufferError")
class ProducerErrorWrapped(Importer):
    """Wraps the producer's BufferError in a RuntimeError."""

    def ask(self, asked, kwargs):
        try:
            return super().ask(asked, kwargs)
        except BufferError as e:
            raise RuntimeError(f"the producer failed: {e}") from e
