"""A subject made to break exactly one rule, for every rule of the checker.

Each is dlpack-ref's own adapter (``registry.subject("dlpack_ref")``) with
one defect: a producer whose arrays sit behind a small class of a library's
own whose ``__dlpack__`` or ``__dlpack_device__`` misbehaves in one way
(:mod:`.breaking_producers`), a ``from_dlpack`` that is dlpack-ref's with
one step broken (:mod:`.breaking_consumers`), or a CUDA producer built like
the producer (:mod:`.breaking_cuda`).
:data:`BREAKERS` says, for each rule id, what its subject does wrong and a
part of the failure the checker must report for it.

The checker's children and a failure's reproduction import a breaker by
spec: a module holding ``__dlpack_conformance__ = hook(rule_id)``
(tests/test_rules_proven.py writes one per rule). :func:`control` is the
subject that passes the two rules dlpack-ref's adapter cannot show passing
(it has no scalar type and no array that cannot be exported).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from . import breaking_consumers as consumers
from . import breaking_cuda as cuda
from . import breaking_producers as producers

__all__ = ["Breaker", "BREAKERS", "hook", "control"]


@dataclasses.dataclass(frozen=True)
class Breaker:
    """A rule's breaking subject: what it does wrong (``defect``), a part of
    the failure's detail that names it (``shows``), and ``build()``, which
    returns the subject as a factory hook does: (producer, consumer, CUDA
    producer), only the rule's side not None."""

    defect: str
    shows: str
    build: Callable[[], tuple]


def _defect(cls: type) -> str:
    return " ".join(cls.__doc__.split())


def producing(cls: type, shows: str) -> Breaker:
    return Breaker(_defect(cls), shows, lambda: (producers.wrapping(cls), None, None))


def consuming(cls: type, shows: str) -> Breaker:
    return Breaker(_defect(cls), shows, lambda: (None, consumers.importing(cls()), None))


def cuda_producing(cls: type, shows: str) -> Breaker:
    return Breaker(_defect(cls), shows, lambda: (None, None, cuda.cuda_wrapping(cls)))


# What several failures show: a malformed capsule imported, a refusal that
# never called the deleter, a read that did not wait for the pending write.
ACCEPTED = "accepted (result Array on device_type 1, device_id 0)"
LEAKED = "deleter ran 0 times, expected 1"
STALE = "bytes differ from the array's values"

P, C, K = producers, consumers, cuda  # short names, for the table's lines
#: rule id -> its breaker
BREAKERS: dict[str, Breaker] = {
    "producer.legacy_without_max_version": producing(
        P.VersionedWithoutMaxVersion, "capsule named b'dltensor_versioned', expected b'dltensor'"),
    "producer.versioned_capsule": producing(P.StampsMajorTwo, "stamped version (2, 0), major must be 1"),
    "producer.newer_major_requested": producing(P.RefusesNewerMajor, "__dlpack__(max_version=(2, 0)) raised"),
    "producer.strides_not_null": producing(P.NullStrides, "NULL strides in a version (1, 3) capsule"),
    "producer.zero_dim": producing(P.ZeroDimAsVector, "ndim 1 for a 0-d array"),
    "producer.size_zero": producing(P.EmptyFlattened, "shape (0,), expected (0, 3)"),
    "producer.read_only_flag": producing(P.ReadOnlyUnflagged, "READ_ONLY not set for read-only data"),
    "producer.read_only_legacy_refused": producing(P.ReadOnlyAsLegacy, "__dlpack__() of read-only data was accepted"),
    "producer.copy_true_copies": producing(P.InPlaceCopy, "copy=True exported the same data pointer"),
    "producer.copy_true_flag": producing(P.UnflaggedCopy, "IS_COPIED not set on a copy"),
    "producer.copy_false_no_copy": producing(P.CopiesForCopyFalse, ", the array is at "),
    "producer.dl_device_own": producing(P.CopiesForOwnDevice, "dl_device equal to the array's own device made a copy"),
    "producer.dl_device_unsupported": producing(P.IgnoresDlDevice, "dl_device=(4, 0) was accepted"),
    "producer.stream_cpu": producing(P.AcceptsAnyStream, "stream=1 was accepted for CPU data"),
    "producer.buffererror_for_unexportable": Breaker(
        _defect(P.UnexportableTypeError), "an array of Python objects: __dlpack__ raised TypeError",
        lambda: (P.completed(unexportable=P.UnexportableTypeError), None, None)),
    "producer.dlpack_device_type": producing(P.PlainIntDevice, "device_type 1 is a plain int, not an Enum member"),
    "producer.scalar": Breaker(_defect(P.ScalarAsVector), "scalar exported with ndim 1",
                               lambda: (P.completed(scalar=P.ScalarAsVector), None, None)),
    "producer.dtype_bool": producing(P.BoolAsUint8, "bool: exported (code, bits, lanes)=(1, 8, 1)"),
    "producer.dtype_complex": producing(P.ComplexAsFloatPairs, "complex64: exported (code, bits, lanes)=(2, 32, 2)"),
    "producer.dtype_bfloat16": producing(P.BfloatAsFloat16, "bfloat16: exported (code, bits, lanes)=(2, 16, 1)"),
    "producer.dtype_float8": producing(P.Float8AsUint8, "float8_e4m3fn: exported (code, bits, lanes)=(1, 8, 1)"),
    "producer.dtype_float4": producing(P.Float4AsFloatCode, "float4_e2m1fn: exported (code, bits, lanes)=(2, 4, 1)"),
    "producer.deleter_once": producing(P.DeletesConsumed, "versioned, consumed: deleter ran 2 times, expected once"),
    "producer.view_values": producing(P.ReversalDropped, "reversed x[::-1]: exported [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"),
    "producer.exchange_api": Breaker(
        "Its type's exchange table: current_work_stream succeeds without storing a stream.",
        "returned without storing a stream", lambda: (P.wrapping(P.table_without_stream()), None, None)),
    "producer.exchange_api_matches_dlpack": Breaker(
        _defect(P.RefusesViews), "offset x[1:]: __dlpack__ refused 'BufferError', the table values [1.0, 2.0",
        lambda: (P.wrapping(P.table_exporting_views()), None, None)),
    "consumer.zero_copy_import": consuming(C.CopiesPlainImports, "copied (pointer"),
    "consumer.max_version_passed": consuming(C.AsksWithoutMaxVersion, "no max_version >= (1, 0)"),
    "consumer.legacy_fallback": consuming(C.ProbesAfterFallback, "no call without max_version after the TypeError"),
    "consumer.capsule_renamed": consuming(
        C.RenamesOtherwise, "capsule named 'consumed_dltensor' after import, expected 'used_dltensor_versioned'"),
    "consumer.consumed_twice": consuming(C.SharesLiveImports, "the same capsule was imported twice"),
    "consumer.byte_offset": consuming(C.IgnoresByteOffset, "values [0.0, 1.0, 2.0], expected [1.0, 2.0, 3.0]"),
    "consumer.negative_strides": consuming(C.StridesMadePositive, "values [3.0, 2.0, 1.0], expected [1.0, 2.0, 3.0]"),
    "consumer.null_strides_v1_1": consuming(C.RefusesNullStridesVersioned, "refused"),
    "consumer.null_strides_legacy": consuming(C.RefusesNullStridesLegacy, "refused"),
    "consumer.legacy_answer": consuming(C.RefusesLegacyAnswer, "refused"),
    "consumer.null_strides_v1_3": consuming(C.LeaksNullStridesRefusal, LEAKED),
    "consumer.minor_version_newer": consuming(C.LeaksNewerMinorRefusal, LEAKED),
    "consumer.read_only": consuming(C.DropsReadOnly, "imported READ_ONLY data as a writable array"),
    "consumer.null_deleter": consuming(C.RefusesNullDeleter, "refused"),
    "consumer.size_zero_null_data": consuming(C.LeaksEmptyNullData, LEAKED),
    "consumer.dtype_signed": consuming(C.WidensSigned, "int8: imported as (code, bits, lanes)=(0, 64, 1)"),
    "consumer.dtype_unsigned": consuming(C.UnsignedAsSigned, "uint8: values [0, 7, -6], expected [0, 7, 250]"),
    "consumer.dtype_narrow_float": consuming(C.WidensNarrowFloats,
                                             "float16: imported as (code, bits, lanes)=(2, 64, 1)"),
    "consumer.copy_true": consuming(C.IgnoresCopyTrue, "copy=True imported in place (same pointer)"),
    "consumer.copy_false": consuming(C.CopiesForCopyFalseImport, "copied (pointer"),
    "consumer.copy_false_is_copied": consuming(C.CopyFalseAsNone, "accepted a tensor flagged IS_COPIED for copy=False"),
    "consumer.device_cpu": consuming(C.CopiesForDevice, "copied (pointer"),
    "consumer.producer_buffererror": consuming(C.ProducerErrorWrapped, "refused with RuntimeError, not BufferError"),
    "consumer.producer_returns_non_capsule": consuming(C.AsarrayOfNonCapsule, ACCEPTED),
    "consumer.bad_name": consuming(C.AnyNameIsVersioned, ACCEPTED),
    "consumer.used_name": consuming(C.AcceptsUsedName, ACCEPTED),
    "consumer.major_version_2": consuming(C.MajorTwoAsOne, ACCEPTED),
    "consumer.ndim_negative": consuming(C.NegativeNdimAsZero, ACCEPTED),
    "consumer.shape_negative": consuming(C.NegativeExtentAsZero, ACCEPTED),
    "consumer.shape_null": consuming(C.EmptyForNullShape, ACCEPTED),
    "consumer.data_null": consuming(C.ZerosForNullData, ACCEPTED),
    "consumer.extent_overflow": consuming(C.EmptyForOverflow, ACCEPTED),
    "consumer.dtype_unknown_code": consuming(C.TypeErrorForUnknownCode, "refused with TypeError, not BufferError"),
    "consumer.dtype_bad_bits": consuming(C.ValueErrorForBadBits, "refused with ValueError, not BufferError"),
    "consumer.dtype_lanes": consuming(C.IgnoresLanes, ACCEPTED),
    "consumer.device_opencl": consuming(C.ValueErrorForOpenCL, "refused with ValueError, not BufferError"),
    "consumer.device_cuda_unreachable": consuming(C.CudaAsHost, "the consumer crashed the process ("),
    "cuda.stream_handle_waits": cuda_producing(K.NoWaitForHandles, STALE),
    "cuda.stream_legacy_waits": cuda_producing(K.NoWaitForLegacy, STALE),
    "cuda.stream_per_thread_waits": cuda_producing(K.NoWaitForPerThread, STALE),
    "cuda.stream_none_waits": cuda_producing(K.NoWaitForNone, STALE),
    "cuda.stream_object_waits": cuda_producing(K.NoWaitForObjects, STALE),
    "cuda.stream_no_sync": cuda_producing(K.SyncsOnMinusOne, "the producer synchronized"),
    "cuda.stream_invalid_refused": cuda_producing(K.AcceptsStreamZero, "stream=0 was accepted for CUDA memory"),
    "cuda.copy_true_copies": cuda_producing(K.InPlaceDeviceCopy, "copy=True exported the array's own data pointer"),
    "cuda.copy_true_flag": cuda_producing(K.UnflaggedDeviceCopy, "IS_COPIED not set on a copy"),
    "cuda.dl_device_cpu_readable": cuda_producing(K.HostCopyUnwaited, "the host copy read on return: "),
    "cuda.dl_device_cpu_on_stream": cuda_producing(K.HostCopyOffStream, "the host copy once S is synchronized: "),
    "cuda.dl_device_cpu_flag": cuda_producing(K.UnflaggedHostCopy, "IS_COPIED not set on a copy"),
    "cuda.managed_device": cuda_producing(K.ManagedAsCuda, "managed memory is kDLCUDAManaged (13)"),
    "cuda.pinned_device": cuda_producing(K.PinnedAsCpu, "pinned memory is kDLCUDAHost (3)"),
    "cuda.device_reported": cuda_producing(K.CudaOnDeviceOne,
                                           "__dlpack_device__() (2, 1), capsule (2, 0): they disagree"),
}


def hook(rule_id: str) -> Callable[[], tuple]:
    """The factory hook (``__dlpack_conformance__``) of the subject that breaks ``rule_id``."""
    def __dlpack_conformance__():
        return BREAKERS[rule_id].build()
    return __dlpack_conformance__


def control() -> tuple:
    """The factory hook of dlpack-ref's producer with a scalar type and an
    array that cannot be exported, both done right: it passes the two rules
    dlpack-ref's own adapter can only answer "not supported" (it has neither)."""
    return producers.completed(), None
