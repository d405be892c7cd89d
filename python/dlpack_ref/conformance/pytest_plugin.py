"""The pytest plugin, installed with dlpack-ref: a
:class:`dlpack_ref.conformance.Suite` assigned to a ``test_*`` name in a
test module becomes one test item per rule. Its entry point (``pytest11``)
is the module ``_dlpack_ref_pytest``, which imports this one when a test
module first holds a Suite: a pytest start pays nothing for the plugin
until then.

- Items are named by rule id (``test_dlpack[producer.copy_true_copies]`` is
  shown as ``test_dlpack::producer.copy_true_copies``), so ``-k`` selects them.
- A rule allowed by the suite, by ``--dlpack-allow FILE`` or by the ini
  option ``dlpack_allow_file`` (the CLI's allow-file format) is marked xfail
  with its reason; ``marks=`` adds any pytest mark. A relative allow file
  (``allow_file=`` too) is read from the pytest rootdir; one that is missing
  or unreadable stops the run with one usage error naming it.
- The selected items of a suite run as one batch through the runner when the
  first of them runs: every case in a child process, whatever the consumer.
- pass: the rule holds; skipped: "not supported" (the library lacks what the
  rule needs); failed: the rule is broken, with the rule's text, where it is
  written and what was observed.
"""

from __future__ import annotations

import os

import pytest


class AllowFileError(Exception):
    """An allow file that cannot be used: shown as its one line."""


class RuleBroken(Exception):
    """A rule's test failed: carries the Result."""

    def __init__(self, result):
        super().__init__(result.line())
        self.result = result


class ConformanceSuite(pytest.Collector):
    """The rules of one Suite: one :class:`RuleItem` each."""

    def __init__(self, *, suite, **kwargs):
        super().__init__(**kwargs)
        self.suite = suite
        self.results: dict[str, object] = {}

    def _read_allow_file(self, path: str, origin: str):
        """The AllowList of ``path`` (relative: from the rootdir); a file
        that is missing, unreadable or malformed is a usage error, one line."""
        from dlpack_ref.conformance import AllowList
        full = path if os.path.isabs(path) else os.path.join(str(self.config.rootpath), path)
        try:
            return AllowList.read(full)
        except OSError as e:
            why = e.strerror or str(e)
        except ValueError as e:
            why = str(e)
        raise AllowFileError(f"dlpack-ref: {origin} {full}: {why}")

    def _allow_list(self):
        from dlpack_ref.conformance import AllowList
        allow = self.suite.allow
        if self.suite.allow_file:
            allow = AllowList(self._read_allow_file(self.suite.allow_file, "allow_file=").allowances
                              + allow.allowances)
        path = self.config.getoption("dlpack_allow") or self.config.getini("dlpack_allow_file")
        if path:
            allow = AllowList(allow.allowances + self._read_allow_file(str(path), "--dlpack-allow").allowances)
        return allow

    def collect(self):
        import fnmatch

        from dlpack_ref.conformance.rules import entries
        from dlpack_ref.conformance.run import sides
        allow = self.allow = self._allow_list()
        unknown, duplicates = allow.problems([e.rule.id for e in entries()])
        for line in unknown + duplicates:
            self.warn(pytest.PytestWarning(f"dlpack-ref allow file: {line}"))
        name = self.suite.name
        has = sides(self.suite.subject)
        for rule in (e.rule for e in entries() if has[e.side]):
            item = RuleItem.from_parent(self, name=rule.id, rule=rule)
            reason = allow.reason(name, rule.id)
            if reason is not None:
                item.add_marker(pytest.mark.xfail(reason=f"allowed: {reason}", raises=RuleBroken, strict=False))
            for pattern, mark in self.suite.marks.items():
                if fnmatch.fnmatchcase(rule.id, pattern):
                    item.add_marker(mark)
            yield item

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, AllowFileError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def result_for(self, item):
        """The Result of item's rule, running every selected rule of this
        suite not run yet in one batch."""
        if item.rule.id not in self.results:
            from dlpack_ref.conformance.run import run
            selected = [i.rule.id for i in item.session.items
                        if isinstance(i, RuleItem) and i.parent is self and i.rule.id not in self.results]
            for r in run(self.suite.subject, only=selected or [item.rule.id]):
                r.subject = self.suite.name
                self.results[r.rule.id] = r
        return self.results[item.rule.id]


class RuleItem(pytest.Item):
    """One rule of a Suite."""

    # pytest-run-parallel: the item forks children and must not run in its
    # thread pool; the attribute says so without a warning per run.
    _parallel_custom_item = True

    def __init__(self, *, rule, **kwargs):
        super().__init__(**kwargs)
        self.rule = rule

    def runtest(self):
        from dlpack_ref.conformance import Status
        from dlpack_ref.conformance.gate import verdict
        result = self.parent.result_for(self)
        if result.status is Status.NOT_SUPPORTED:
            pytest.skip(f"not supported: {result.detail}")
        fails_gate, reason = verdict(self.parent.suite.name, result, self.parent.allow)
        if fails_gate:
            raise RuleBroken(result)
        if result.failed:
            # Allowed: xfail with the allowance's reason, as its mark says
            # (the mark also shows an allowed rule that passes as XPASS).
            pytest.xfail(f"allowed: {reason}")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, RuleBroken):
            r = excinfo.value.result
            lines = [f"{r.rule.id} [{r.status.value}]: {r.detail}"]
            if r.exc_type:
                lines.append(f"observed: {r.exc_type}: {r.exc_message}")
            lines += [f"rule: {r.rule.text}", f"where: {r.rule.citation()}"]
            return "\n".join(lines)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        # a line number is required where a mark skips the item
        return self.path, 0, f"{self.parent.name}::{self.rule.id}"
