"""The model of the conformance checks: the rules (:class:`Rule`), their
outcomes (:class:`Result`, :class:`Status`). A leaf: it imports nothing of
the checker. What is checked (Producer, Consumer, CudaProducer, Subject) is
the harness's (:mod:`dlpack_ref.harness.subject`), shared with ``bench``."""

from __future__ import annotations

import dataclasses
import enum

from dlpack_ref.harness.observe import short
from dlpack_ref.harness.outcome import failure_of

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
    """The outcome of one rule for one ``subject`` (a library name);
    ``crash``: the signal that ended the library's process (``SIGSEGV``),
    None when this result is no crash."""

    rule: Rule
    status: Status
    detail: str = ""
    exc_type: str | None = None
    exc_message: str | None = None
    subject: str = ""
    crash: str | None = None

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


def result_from_outcome(outcome: dict, rule: Rule, subject: str) -> Result:
    """The Result of what a check's child sent back (the harness's
    ``crashed`` and ``worker_error`` outcomes included)."""
    failure = failure_of(outcome)
    if failure is not None and failure.crashed:
        side = "consumer" if rule.id.startswith("consumer.") else "library"
        return Result(rule, Status.FAIL, f"the {side} crashed the process ({failure.detail})", subject=subject,
                      crash=failure.signal_name)
    if failure is not None:
        return Result(rule, Status.ERROR, failure.detail, subject=subject)
    return Result(rule, Status(outcome["status"]), outcome.get("detail", ""), outcome.get("exception_type"),
                  outcome.get("exception_message"), subject=outcome.get("subject", subject))


def result_from_dict(d: dict, rule: Rule) -> Result:
    """The inverse of Result.to_dict (a report's results read back)."""
    return Result(rule, Status(d["status"]), d.get("detail", ""), d.get("exception_type"),
                  d.get("exception_message"), subject=d.get("subject", ""), crash=d.get("crash"))
