"""Library-agnostic DLPack conformance checks.

Check a producer (a factory of arrays) and a consumer (a ``from_dlpack``)
against the rules of the DLPack header, the DLPack Python spec and the array
API standard; every result names its rule, where it is written, and what was
observed. From the command line: ``python -m dlpack_ref check``. From a test
suite::

    from dlpack_ref.conformance import assert_conforms

    def test_dlpack():
        assert_conforms(producer_factory=make_array, from_dlpack=mylib.from_dlpack)

See docs/conformance.md.
"""

from __future__ import annotations

from typing import Any, Callable

from ._result import SOURCES, CheckFailed, NotSupported, Result, Rule, Status
from .consumer import CASES, Consumer, check_consumer
from .producer import CHECKS, Producer, check_producer

__all__ = [
    "SOURCES", "CheckFailed", "NotSupported", "Result", "Rule", "Status", "Producer", "Consumer",
    "check_producer", "check_consumer", "check", "assert_conforms", "format_results", "rules",
]


def rules() -> list[Rule]:
    """Every rule checked, producer rules first."""
    return [rule for rule, _ in CHECKS] + [case.rule for case in CASES]


def check(producer_factory: Callable | Producer | None = None, from_dlpack: Callable | Consumer | None = None,
          *, name: str = "library", isolate: bool | None = None, **producer_options: Any) -> list[Result]:
    """Run the producer checks (when ``producer_factory`` is given) and the
    consumer checks (when ``from_dlpack`` is given) and return the results.

    ``producer_factory(dtype, shape, readonly=False)``: see :class:`Producer`;
    ``producer_options`` (tolist, views, scalar, unexportable) go to it.
    ``from_dlpack``: a callable, or a :class:`Consumer` for more control
    (how to read values, pointers, read-only-ness). The malformed-capsule
    catalogue runs in child processes when the consumer can be imported there
    (``isolate=None``: when the callable's module and name lead back to it),
    so that a crash is reported instead of ending the test run.
    """
    results: list[Result] = []
    if producer_factory is not None:
        p = producer_factory if isinstance(producer_factory, Producer) else \
            Producer(name, producer_factory, **producer_options)
        results += check_producer(p)
    if from_dlpack is not None:
        c = from_dlpack if isinstance(from_dlpack, Consumer) else Consumer(name, from_dlpack,
                                                                         spec=_spec_of(from_dlpack))
        if isolate is False:
            c = Consumer(**{**c.__dict__, "spec": None})
        results += check_consumer(c)
    return results


def _spec_of(fn) -> str | None:
    """"module:qualname" when that leads back to fn in a fresh process."""
    import importlib
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        return None
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return f"{module}:{qualname}" if obj is fn else None


def format_results(results: list[Result], *, only_problems: bool = False) -> str:
    lines = []
    for r in results:
        if only_problems and r.status in (Status.PASS, Status.NOT_SUPPORTED):
            continue
        lines.append(r.line() + f"\n    rule: {r.rule.text}\n    where: {r.rule.citation()}")
    return "\n".join(lines)


def assert_conforms(producer_factory=None, from_dlpack=None, *, allow: tuple[str, ...] = (),
                    name: str = "library", isolate: bool | None = None, **producer_options) -> list[Result]:
    """Run :func:`check` and raise AssertionError listing every failed or
    erroring check (except the rule ids in ``allow``), each with its rule,
    where the rule is written and what was observed. Returns the results."""
    results = check(producer_factory, from_dlpack, name=name, isolate=isolate, **producer_options)
    bad = [r for r in results if r.status in (Status.FAIL, Status.ERROR) and r.rule.id not in allow]
    if bad:
        raise AssertionError(f"{len(bad)} DLPack conformance check(s) failed:\n" + format_results(bad))
    return results
