"""Library-agnostic DLPack conformance checks.

Check a producer (a factory of arrays) and a consumer (a ``from_dlpack``)
against the rules of the DLPack header, the DLPack Python spec and the array
API standard; every result names its rule, where it is written, and what was
observed. Every check runs in a child process (the harness's runner). From
the command line: ``dlpack-ref check`` (a CI gate). From a test suite: the
pytest plugin (one test per rule, see the conformance page of the docs) or::

    from dlpack_ref.conformance import assert_conforms

    def test_dlpack():
        assert_conforms(producer_factory=make_array, from_dlpack=mylib.from_dlpack)

Modules: ``model`` (Rule, Result, Status), ``rules`` (each rule once, as the
check that runs and that its reproduction prints, by chapter in
``rules.chapters``, beside the subject that breaks it), ``run`` (a library's rules and the
exchange matrix in child processes), ``reproduce`` (each failure as Python
that shows it with its library alone), ``gate`` (allowances), ``report``,
``ecosystem`` (the table of a JSON report), ``pytest_plugin``. What is
checked (Producer, Consumer, CudaProducer, Subject) comes from
:mod:`dlpack_ref.harness`, which ``dlpack-ref bench`` shares.
"""

import dataclasses
from typing import Any, Callable

from dlpack_ref.harness.subject import Consumer, CudaProducer, NotSupported, Producer, Subject

from .gate import AllowList, blocking
from .model import SOURCES, Result, Rule, Status
from .rules import entries
from .rules.support import CheckFailed
from .run import run

__all__ = [
    "SOURCES", "AllowList", "CheckFailed", "NotSupported", "Result", "Rule", "Status", "Producer", "Consumer",
    "CudaProducer", "Subject", "Suite", "check", "assert_conforms", "conformance_tests", "format_results", "rules",
    "subject_of",
]


def rules() -> list[Rule]:
    """Every rule checked, producer rules first."""
    return [e.rule for e in entries()]


def subject_of(producer_factory: Callable | Producer | None = None,
               from_dlpack: Callable | Consumer | None = None, *, name: str = "library",
               cuda: CudaProducer | None = None, **producer_options: Any) -> Subject:
    """A :class:`Subject` from a factory and a ``from_dlpack``.

    Parameters
    ----------
    producer_factory : callable or Producer, optional
        ``factory(dtype, shape, readonly=False)``, see :class:`Producer`;
        ``producer_options`` (tolist, views, scalar, unexportable,
        single_use) go to it.
    from_dlpack : callable or Consumer, optional
        A callable, or a :class:`Consumer` for more control (how to read
        values, pointers, read-only-ness, the CPU device).
    name : str
        The name results carry.
    cuda : CudaProducer, optional
        How the library makes CUDA arrays: the CUDA rules (``cuda.*``) run too.

    Returns
    -------
    Subject
        Without a spec: the runner forks to check it, so lambdas and local
        functions work.
    """
    p = producer_factory if isinstance(producer_factory, Producer) or producer_factory is None else \
        Producer(name, producer_factory, **producer_options)
    c = from_dlpack if isinstance(from_dlpack, Consumer) or from_dlpack is None else Consumer(name, from_dlpack)
    return Subject(name, "", p, c, None, cuda)


def check(producer_factory: Callable | Producer | None = None, from_dlpack: Callable | Consumer | None = None,
          *, name: str = "library", only=None, cuda: CudaProducer | None = None,
          **producer_options: Any) -> list[Result]:
    """Run the producer checks (when ``producer_factory`` is given), the
    consumer checks (when ``from_dlpack`` is given) and the CUDA checks (when
    ``cuda`` is given), each in a child process, and return the results (see
    :func:`subject_of` for the parameters; ``only``: rule ids to run)."""
    return run(subject_of(producer_factory, from_dlpack, name=name, cuda=cuda, **producer_options), only=only)


def format_results(results: list[Result], *, only_problems: bool = False) -> str:
    """One block per result: its line, the rule's text and where it is written."""
    lines = []
    for r in results:
        if only_problems and not r.failed:
            continue
        lines.append(r.line() + f"\n    rule: {r.rule.text}\n    where: {r.rule.citation()}")
    return "\n".join(lines)


def assert_conforms(producer_factory=None, from_dlpack=None, *, allow: tuple[str, ...] | AllowList = (),
                    name: str = "library", **producer_options) -> list[Result]:
    """Run :func:`check` and raise AssertionError listing every failed or
    erroring check not allowed (``allow``: rule ids, or an :class:`AllowList`),
    each with its rule, where the rule is written and what was observed.

    Returns
    -------
    list of Result

    Raises
    ------
    AssertionError
        When a rule that is not allowed fails.
    """
    allowed = allow if isinstance(allow, AllowList) else AllowList().plus(list(allow))
    results = check(producer_factory, from_dlpack, name=name, **producer_options)
    bad = blocking({name: results}, allowed)
    if bad:
        raise AssertionError(f"{len(bad)} DLPack conformance check(s) failed:\n" + format_results(bad))
    return results


@dataclasses.dataclass
class Suite:
    """What :func:`conformance_tests` returns: the pytest plugin turns it into
    one test per rule. ``subject``: a Subject made in the test's process, or
    the spec of a library that only child processes import."""

    subject: Subject | str
    allow: AllowList
    marks: dict[str, Any]
    name: str = "library"
    #: read by the plugin, a relative path from the pytest rootdir
    allow_file: str | None = None


def conformance_tests(library: str | None = None, *, producer_factory=None, from_dlpack=None,
                      name: str | None = None, allow: tuple[str, ...] = (), allow_file: str | None = None,
                      marks: dict[str, Any] | None = None, **producer_options: Any) -> Suite:
    """The conformance rules as pytest tests: assign the result to a
    ``test_*`` name in a test module and the plugin (installed with
    dlpack-ref, entry point ``pytest11``) collects one test per rule, named by
    its rule id (``-k copy_true`` selects), each case in a child process.

    Parameters
    ----------
    library : str, optional
        A spec as ``dlpack-ref check --library`` takes it: a known library
        (``"numpy"``), ``"module"`` (its factory hook, or the generic
        adapter) or ``"module:from_dlpack"``.
    producer_factory, from_dlpack, **producer_options
        Instead of ``library``: what :func:`subject_of` takes (lambdas work:
        the cases run in a forked child).
    name : str, optional
        The library's name in results and allow files (default: ``library``, else "library").
    allow : tuple of str
        Rule ids (or patterns) expected to fail: their tests are marked xfail.
    allow_file : str, optional
        An allow file (``LIBRARY RULE REASON`` lines, see :mod:`.gate`),
        read when the tests are collected; a relative path is read from the
        pytest rootdir. A missing or unreadable one is a usage error.
    marks : dict, optional
        Rule id (or pattern) -> a pytest mark (``pytest.mark.xfail(...)``,
        ``pytest.mark.skip(...)``) added to that rule's test.

    Returns
    -------
    Suite

    The library named by ``library`` is imported only in child processes
    (the tests' collection asks one what the library has).
    """
    target = library if library is not None else \
        subject_of(producer_factory, from_dlpack, name=name or "library", **producer_options)
    return Suite(target, AllowList().plus(list(allow), "allowed in conformance_tests(allow=...)"), dict(marks or {}),
                 name or (library if library is not None else "library"), allow_file)
