"""The gate: which failures are allowed (an allow file, ``--allow``), and
whether a run passes.

An allow file has one allowance a line, ``LIBRARY RULE REASON``: the library
as it is checked (``numpy``, ``mylib``, ``mylib:from_dlpack``, or ``*`` for
every library), a rule id (shell-style wildcards allowed, e.g.
``consumer.dtype_*``) and a reason, which is required. Blank lines and lines
starting with ``#`` are ignored. The file is UTF-8, with or without a
byte-order mark, with LF or CRLF line ends::

    # library  rule                         reason
    numpy      producer.dlpack_device_type  NumPy returns a plain int device type (tracked upstream)
    *          producer.scalar              our scalars are 0-d arrays

:meth:`AllowList.problems` names the lines that allow no rule there is
and the lines that repeat another; :func:`stale` the allowances for rules
that now pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch

from .model import Result


@dataclasses.dataclass(frozen=True)
class Allowance:
    library: str
    rule: str
    reason: str
    #: where it was written: ``FILE:LINE``, or ``--allow``
    origin: str = dataclasses.field(default="", compare=False)

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
        for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise ValueError(f"{origin}:{number}: expected 'LIBRARY RULE REASON', got {line!r} "
                                 "(every allowance needs a reason)")
            allowances.append(Allowance(*parts, origin=f"{origin}:{number}"))
        return cls(allowances)

    @classmethod
    def read(cls, path: str) -> AllowList:
        """An AllowList from an allow file (OSError, ValueError when unusable:
        UnicodeDecodeError, a ValueError, for a file that is not UTF-8)."""
        with open(path, encoding="utf-8") as f:
            return cls.parse(f.read(), path)

    def plus(self, rules: list[str], reason: str = "allowed on the command line") -> AllowList:
        """This list and ``rules`` allowed for every library."""
        return AllowList(self.allowances + [Allowance("*", rule, reason, "--allow") for rule in rules])

    def aliased(self, name: str, spec: str) -> AllowList:
        """This list with the allowances written for ``name`` (a hook's
        name for its library) also given to ``spec`` (its module)."""
        return AllowList(self.allowances + [dataclasses.replace(a, library=spec, origin=a.origin)
                                            for a in self.allowances if a.library == name])

    def reason(self, library: str, rule_id: str) -> str | None:
        """Why this library may fail this rule, or None when it may not."""
        for a in self.allowances:
            if a.covers(library, rule_id):
                return a.reason
        return None


    def problems(self, rule_ids: list[str]) -> tuple[list[str], list[str]]:
        """(lines that allow no rule there is, lines that repeat an earlier
        one), each naming where it was written and, for an unknown id, the
        closest rule ids."""
        unknown, duplicates, seen = [], [], {}
        for a in self.allowances:
            if not any(fnmatch.fnmatchcase(r, a.rule) for r in rule_ids):
                close = difflib.get_close_matches(a.rule, rule_ids, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                unknown.append(f"{a.origin}: {a.rule!r} is no rule id and matches none{hint}")
            key = (a.library, a.rule)
            if key in seen:
                duplicates.append(f"{a.origin}: {a.library} {a.rule} repeats {seen[key]}")
            else:
                seen[key] = a.origin
        return unknown, duplicates


def stale(results: dict[str, list[Result]], allow: AllowList) -> list[Allowance]:
    """The allowances of the libraries checked that allow nothing: every
    rule they cover ran and none of those failed. An allowance whose rules
    did not run here (another library's, a rule not selected) is not stale."""
    found = []
    for a in allow.allowances:
        ran = [(lib, r) for lib, rs in results.items() for r in rs if a.covers(lib, r.rule.id)]
        if ran and not any(r.failed for _, r in ran):
            found.append(a)
    return found


def verdict(library: str, result: Result, allow: AllowList) -> tuple[bool, str | None]:
    """The gate's verdict on one result of ``library``: (whether it fails the
    gate, the allowance's reason or None). A FAIL or ERROR result fails the
    gate unless an allowance covers it; any other result does not. The one
    verdict of the command line, :func:`assert_conforms` and the pytest
    plugin."""
    reason = allow.reason(library, result.rule.id)
    return result.failed and reason is None, reason


def blocking(results: dict[str, list[Result]], allow: AllowList, fail_on: list[str] | None = None) -> list[Result]:
    """The failures that fail the gate (:func:`verdict`), of the libraries
    in ``fail_on`` (every library when None)."""
    return [r for lib, rs in results.items() if fail_on is None or lib in fail_on
            for r in rs if verdict(lib, r, allow)[0]]
