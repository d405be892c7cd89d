"""What every rule's check shares: how a check says its verdict
(:class:`CheckFailed`, :class:`~dlpack_ref.harness.subject.NotSupported`,
or a pass detail), how an outcome is made of a check (:func:`outcome`, run
alike by the checker's child and by a reproduction), how a reproduction
shows it (:func:`show`), and the small steps checks repeat. Pure Python
with ctypes: the reproductions carry these definitions as they are."""

from __future__ import annotations

import enum
import sys

from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.subject import NotSupported, export_any
from dlpack_ref.testing.reader import read_capsule

__all__ = ["CheckFailed", "outcome", "observed", "show", "must_succeed", "read_export", "plain_export",
           "refused_with_buffererror", "refused_streams", "flag_set", "device_value"]


class CheckFailed(Exception):
    """Raised inside a check: the rule is broken. ``exc`` is the library's
    exception that shows it, if any (or its (type name, message))."""

    def __init__(self, detail: str, exc: BaseException | None = None):
        super().__init__(detail)
        self.detail = detail
        self.exc = exc


def outcome(check, target) -> dict:
    """``check(target)`` as a verdict: pass with the detail it returns (or
    ``(detail, the library's exception)``), fail for CheckFailed, not
    supported for NotSupported, error for anything else (the check could
    not run), with the exception observed."""
    try:
        passed = check(target)
        detail, exc = passed if isinstance(passed, tuple) else (passed, None)
        status = "pass"
    except CheckFailed as e:
        status, detail, exc = "fail", e.detail, e.exc
    except NotSupported as e:
        status, detail, exc = "not supported", e.detail, e.exc
    except Exception as e:  # the check could not run: report what happened
        status, detail, exc = "error", "the check could not run", e
    exc_type, exc_message = observed(exc)
    return {"status": status, "detail": detail or "", "exception_type": exc_type, "exception_message": exc_message}


def observed(exc) -> tuple[str | None, str | None]:
    """(type name, short message) of an exception a library raised, given
    as the exception or as that pair already; (None, None) for none."""
    if exc is None or isinstance(exc, tuple):
        return exc or (None, None)
    return exc_name(exc), short(exc)


def show(rule: str, result: dict) -> None:
    """A reproduction's last step: print the rule and what was observed,
    and exit 1 where the rule is broken (0 where it holds)."""
    observed = result["detail"]
    if result["exception_type"]:
        observed += f" (observed {result['exception_type']}: {result['exception_message']})"
    if result["status"] == "pass":
        print("ok:", observed)
        return
    print("expected:", rule)
    print(f"observed: {observed}" if result["status"] == "fail" else f"{result['status']}: {observed}")
    sys.exit(1 if result["status"] in ("fail", "error") else 0)


def must_succeed(what: str, fn):
    """``fn()``, which must work: CheckFailed "``what`` raised" otherwise."""
    try:
        return fn()
    except NotSupported:
        raise
    except Exception as e:
        raise CheckFailed(f"{what} raised", e) from e


def read_export(what: str, fn) -> dict:
    """The fields of the capsule ``fn`` exports; CheckFailed naming ``what``
    when it raises or returns something that is no DLPack capsule."""
    capsule = must_succeed(what, fn)
    try:
        return read_capsule(capsule)
    except (TypeError, ValueError) as e:
        raise CheckFailed(f"{what} returned {short(repr(capsule), 80)}, not a DLPack capsule", e) from e


def plain_export(x) -> dict:
    """The fields of the plain export of an array the check goes on with."""
    return read_export("the plain export __dlpack__()", lambda: export_any(x))


def refused_with_buffererror(what: str, fn) -> str:
    """The pass detail when ``fn()`` raises BufferError; CheckFailed when it
    raises anything else or returns."""
    try:
        capsule = fn()
    except NotSupported:
        raise
    except BufferError as e:
        return f"{what}: BufferError ({short(e, 120)})"
    except Exception as e:
        raise CheckFailed(f"{what} raised {exc_name(e)}, not BufferError", e) from e
    del capsule
    raise CheckFailed(f"{what} was accepted; it must raise BufferError")


def refused_streams(export, streams, memory: str) -> list[str]:
    """The notes of ``export(stream)`` refused, with an exception, for each
    of ``streams``; CheckFailed when one is accepted, or refused by an
    assert (gone under ``python -O``)."""
    notes = []
    for stream in streams:
        try:
            export(stream)
        except AssertionError as e:
            raise CheckFailed(f"stream={stream!r} refused by an assert (gone under python -O)", e) from e
        except Exception as e:
            notes.append(f"stream={stream!r}: {exc_name(e)}")
            continue
        raise CheckFailed(f"stream={stream!r} was accepted for {memory}")
    return notes


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


def device_value(part):
    """A part of a ``__dlpack_device__`` answer as the number it stands for:
    an int, an IntEnum, a plain Enum of DLDeviceType values (its
    ``value``); anything else as it is."""
    if isinstance(part, enum.Enum) and not isinstance(part, int):
        part = part.value
    return int(part) if isinstance(part, int) else part
