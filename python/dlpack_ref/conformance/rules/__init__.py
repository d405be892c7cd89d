"""The rules, each written once, by chapter (:mod:`.chapters`: versions,
layout, read-only, copies, devices, dtypes, ownership, streams, the C
exchange API, errors, malformed input): a rule is a function of the
library's producer, consumer or CUDA producer that returns a pass detail or
raises (:class:`~.support.CheckFailed`, ``NotSupported``). The checker's
child runs that function; a failure's reproduction prints that function,
and what it calls, as they stand (:mod:`..reproduce`).

Adding a rule touches one file, its chapter's (or a new module of
:mod:`.chapters`, found by itself): the check under
``@rule(side=..., source=..., where=...)`` of :mod:`.table` (``side``
``producer``, ``consumer`` or ``cuda``; ``source`` a key of
:data:`~dlpack_ref.conformance.model.SOURCES`), and right after it the
subject made to break it, a small class under ``@breaks(check, shows=...)``
(its base from :mod:`.breaking`). The rule then runs in ``check``, stands in
the docs' table of what is checked, and the tests hold that dlpack-ref
passes it, that its breaker fails exactly it, and that the failure's
reproduction shows it. The parts the chapters share: :mod:`.support` (a
verdict and its reproduction's last step), :mod:`.producer_cases`,
:mod:`.consumer_cases` and :mod:`.consumer_judges` (how a case of each side
is made and judged), :mod:`.cuda_lab` (the checker's side of CUDA).
"""

from __future__ import annotations

import importlib
import pkgutil

from dlpack_ref.harness.runner import task

from . import chapters
from .table import BREAKERS, RULES, SIDES, Breaker, Entry, breaks, rule

__all__ = ["BREAKERS", "Breaker", "Entry", "RULES", "breaks", "entries", "perform", "rule", "tasks_for"]

#: The chapters, each a module of :mod:`.chapters`, found by listing it.
CHAPTERS = [importlib.import_module(f"{chapters.__name__}.{m.name}")
            for m in sorted(pkgutil.iter_modules(chapters.__path__), key=lambda m: m.name)]

#: The order of the rules in reports as it stood before the rules went by
#: chapter, kept so that reports read as before; a rule not listed follows
#: its side's listed rules, by chapter (in the order of their names) and
#: declaration.
REPORT_ORDER = (
    "producer.legacy_without_max_version", "producer.versioned_capsule", "producer.newer_major_requested",
    "producer.strides_not_null", "producer.zero_dim", "producer.size_zero", "producer.read_only_flag",
    "producer.read_only_legacy_refused", "producer.copy_true_copies", "producer.copy_true_flag",
    "producer.copy_false_no_copy", "producer.dl_device_own", "producer.dl_device_unsupported", "producer.stream_cpu",
    "producer.buffererror_for_unexportable", "producer.dlpack_device_type", "producer.scalar",
    "producer.dtype_bool", "producer.dtype_complex", "producer.dtype_bfloat16", "producer.dtype_float8",
    "producer.dtype_float4", "producer.deleter_once", "producer.view_values", "producer.exchange_api",
    "producer.exchange_api_matches_dlpack",
    "consumer.zero_copy_import", "consumer.max_version_passed", "consumer.legacy_fallback",
    "consumer.capsule_renamed", "consumer.consumed_twice", "consumer.byte_offset", "consumer.negative_strides",
    "consumer.null_strides_v1_1", "consumer.null_strides_legacy", "consumer.legacy_answer",
    "consumer.null_strides_v1_3", "consumer.minor_version_newer", "consumer.read_only", "consumer.null_deleter",
    "consumer.size_zero_null_data", "consumer.dtype_signed", "consumer.dtype_unsigned",
    "consumer.dtype_narrow_float", "consumer.copy_true", "consumer.copy_false", "consumer.copy_false_is_copied",
    "consumer.device_cpu", "consumer.producer_buffererror", "consumer.producer_returns_non_capsule",
    "consumer.bad_name", "consumer.used_name", "consumer.major_version_2", "consumer.ndim_negative",
    "consumer.shape_negative", "consumer.shape_null", "consumer.data_null", "consumer.extent_overflow",
    "consumer.dtype_unknown_code", "consumer.dtype_bad_bits", "consumer.dtype_lanes", "consumer.device_opencl",
    "consumer.device_cuda_unreachable",
    "cuda.stream_handle_waits", "cuda.stream_object_waits", "cuda.stream_legacy_waits", "cuda.stream_no_sync",
    "cuda.stream_per_thread_waits", "cuda.stream_invalid_refused", "cuda.stream_none_waits",
    "cuda.copy_true_copies", "cuda.copy_true_flag", "cuda.dl_device_cpu_readable", "cuda.dl_device_cpu_on_stream",
    "cuda.dl_device_cpu_flag", "cuda.managed_device", "cuda.pinned_device", "cuda.device_reported",
)


def _place(entry: Entry, declared: int) -> tuple:
    listed = entry.rule.id in REPORT_ORDER
    return (SIDES.index(entry.side), not listed,
            (REPORT_ORDER.index(entry.rule.id),) if listed else (entry.chapter, declared))


#: Every rule, producer rules first, then consumer and CUDA rules.
ENTRIES = [e for _, e in sorted(((_place(e, i), e) for i, e in enumerate(RULES.values())), key=lambda p: p[0])]


def entries() -> list[Entry]:
    """Every rule beside its check, producer rules first, then consumer and CUDA rules."""
    return list(ENTRIES)


def tasks_for(sides: dict[str, bool], only: set[str] | None = None, spec: str | None = None) -> list[dict]:
    """The tasks that check a library with the given sides (``producer``,
    ``consumer``, ``cuda``: whether it has them), those in ``only`` when given."""
    return [task(perform, rule=e.rule.id, **({"spec": spec} if spec else {}))
            for e in ENTRIES if sides.get(e.side) and (only is None or e.rule.id in only)]


def perform(task: dict, subjects) -> dict:
    """Child side: the outcome of one rule on the worker's subject (or the
    task's ``spec``)."""
    from .support import outcome
    entry = RULES[task["rule"]]
    subject = subjects.of(task["spec"]) if task.get("spec") else subjects.own()
    return outcome(entry.check, getattr(subject, entry.side))
