"""Results of conformance checks: the rule each one tests, where the rule is
written, and what was observed."""

from __future__ import annotations

import dataclasses
import enum
from typing import Callable

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

    def line(self) -> str:
        text = f"[{self.status.value}] {self.subject + ': ' if self.subject else ''}{self.rule.id}: {self.detail}"
        if self.exc_type:
            text += f" (observed {self.exc_type}: {self.exc_message})"
        return text


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


def result_from_dict(d: dict, rules: dict[str, Rule]) -> Result:
    """The inverse of Result.to_dict for results sent back by a worker."""
    rule = rules.get(d["check"]) or Rule(d["check"], d.get("rule", ""), "dlpack-ref")
    return Result(rule, Status(d["status"]), d.get("detail", ""), d.get("exception_type"),
                  d.get("exception_message"), subject=d.get("subject", ""))
