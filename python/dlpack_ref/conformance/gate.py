"""The gate: which failures are allowed (an allow file, ``--allow``), and
whether a run passes.

An allow file has one allowance a line, ``LIBRARY RULE REASON``: the library
as it is checked (``numpy``, ``mylib``, ``mylib:from_dlpack``, or ``*`` for
every library), a rule id (shell-style wildcards allowed, e.g.
``consumer.dtype_*``) and a reason, which is required. Blank lines and lines
starting with ``#`` are ignored::

    # library  rule                         reason
    numpy      producer.dlpack_device_type  NumPy returns a plain int device type (tracked upstream)
    *          producer.scalar              our scalars are 0-d arrays
"""

from __future__ import annotations

import dataclasses
import fnmatch

from .model import Result


@dataclasses.dataclass(frozen=True)
class Allowance:
    library: str
    rule: str
    reason: str

    def covers(self, library: str, rule_id: str) -> bool:
        return self.library in ("*", library) and fnmatch.fnmatchcase(rule_id, self.rule)


class AllowList:
    """Allowed failures, each with its reason."""

    def __init__(self, allowances: list[Allowance] | None = None):
        self.allowances = list(allowances or [])

    @classmethod
    def parse(cls, text: str, origin: str = "<allow file>") -> AllowList:
        """An AllowList from the text of an allow file.

        Raises
        ------
        ValueError
            For a line without a library, a rule and a reason, naming the line.
        """
        allowances = []
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise ValueError(f"{origin}:{number}: expected 'LIBRARY RULE REASON', got {line!r} "
                                 "(every allowance needs a reason)")
            allowances.append(Allowance(*parts))
        return cls(allowances)

    @classmethod
    def read(cls, path: str) -> AllowList:
        """An AllowList from an allow file (OSError, ValueError when unusable)."""
        with open(path, encoding="utf-8") as f:
            return cls.parse(f.read(), path)

    def plus(self, rules: list[str], reason: str = "allowed on the command line") -> AllowList:
        """This list and ``rules`` allowed for every library."""
        return AllowList(self.allowances + [Allowance("*", rule, reason) for rule in rules])

    def reason(self, library: str, rule_id: str) -> str | None:
        """Why this library may fail this rule, or None when it may not."""
        for a in self.allowances:
            if a.covers(library, rule_id):
                return a.reason
        return None


def blocking(results: dict[str, list[Result]], allow: AllowList, fail_on: list[str] | None = None) -> list[Result]:
    """The failures that fail the gate: FAIL or ERROR results not allowed, of
    the libraries in ``fail_on`` (every library when None)."""
    return [r for lib, rs in results.items() if fail_on is None or lib in fail_on
            for r in rs if r.failed and allow.reason(lib, r.rule.id) is None]
