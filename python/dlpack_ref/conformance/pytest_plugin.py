"""The pytest plugin (entry point ``pytest11``, installed with dlpack-ref):
a :class:`dlpack_ref.conformance.Suite` assigned to a ``test_*`` name in a
test module becomes one test item per rule.

- Items are named by rule id (``test_dlpack[producer.copy_true_copies]`` is
  shown as ``test_dlpack::producer.copy_true_copies``), so ``-k`` selects them.
- A rule allowed by the suite, by ``--dlpack-allow FILE`` or by the ini
  option ``dlpack_allow_file`` (the CLI's allow-file format) is marked xfail
  with its reason; ``marks=`` adds any pytest mark.
- The selected items of a suite run as one batch through the runner when the
  first of them runs: every case in a child process, whatever the consumer.
- pass: the rule holds; skipped: "not supported" (the library lacks what the
  rule needs); failed: the rule is broken, with the rule's text, where it is
  written and what was observed.

Nothing of dlpack-ref is imported until a test module holds a Suite.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("dlpack-ref", "DLPack conformance (dlpack-ref)")
    group.addoption("--dlpack-allow", metavar="FILE", default=None,
                    help="allow file for dlpack-ref conformance tests: 'LIBRARY RULE REASON' lines; "
                    "the rules listed are marked xfail")
    parser.addini("dlpack_allow_file", "allow file for dlpack-ref conformance tests (as --dlpack-allow)")


def _is_suite(obj) -> bool:
    cls = type(obj)
    return cls.__name__ == "Suite" and cls.__module__ == "dlpack_ref.conformance"


def pytest_pycollect_makeitem(collector, name, obj):
    if _is_suite(obj) and collector.funcnamefilter(name):
        return ConformanceSuite.from_parent(collector, name=name, suite=obj)
    return None


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

    def _allow_list(self):
        path = self.config.getoption("dlpack_allow") or self.config.getini("dlpack_allow_file")
        if not path:
            return self.suite.allow
        from dlpack_ref.conformance import AllowList
        extra = AllowList.read(str(self.config.rootpath / path) if not str(path).startswith("/") else path)
        return AllowList(self.suite.allow.allowances + extra.allowances)

    def collect(self):
        import fnmatch

        from dlpack_ref.conformance.rules import entries
        from dlpack_ref.conformance.run import sides
        allow = self._allow_list()
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
        result = self.parent.result_for(self)
        if result.status is Status.NOT_SUPPORTED:
            pytest.skip(f"not supported: {result.detail}")
        if result.failed:
            raise RuleBroken(result)

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
