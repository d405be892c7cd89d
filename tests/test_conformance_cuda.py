"""The checker's CUDA rules (``cuda.*``): dlpack-ref passes every one (on the
simulated driver in CI, on the GPU where there is one), each rule fails for
a producer broken the way it describes, and a library that cannot make what
a rule needs, or a process without a CUDA device, gets "not supported".

The broken producers (the rules' own breakers, and some combined here to
break several rules at once) wrap dlpack-ref arrays and break one promise each:
a wait dropped, a synchronization added, stream 0 accepted, copy=True
aliasing, a flag cleared, a host copy on a stream of their own, managed or
pinned memory reported as something else.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlpack_ref.conformance import CudaProducer, Status, subject_of
from dlpack_ref.conformance.rules import BREAKERS, entries, tasks_for
from dlpack_ref.conformance.rules.breaking.cuda import DroppedWait, HostCopyOnOwnStream, cuda_wrapping, is_int
from dlpack_ref.conformance.rules.breaking.producers import Wrapped
from dlpack_ref.conformance.rules.breaking.surgery import set_flag
from dlpack_ref.conformance.run import run, run_here
from dlpack_ref.harness.registry import subject as library
from dlpack_ref.testing import FLAG_IS_COPIED
from support import cudasim, cudatest

pytestmark = [*cudatest.marks(), pytest.mark.harness]

CUDA_RULES = [e.rule.id for e in entries() if e.side == "cuda"]


def check_cuda(cp: CudaProducer, only=None):
    """The CUDA rules on ``cp`` in this process."""
    return run_here(subject_of(cuda=cp, name=cp.name), only)
ORDERING_RULES = {"cuda.stream_handle_waits", "cuda.stream_legacy_waits", "cuda.stream_per_thread_waits",
                  "cuda.stream_none_waits", "cuda.stream_object_waits", "cuda.stream_no_sync",
                  "cuda.dl_device_cpu_readable", "cuda.dl_device_cpu_on_stream"}


def _problems(results):
    return [r.line() for r in results if r.failed]


def _own():
    return library("dlpack_ref").cuda


def _failing(results) -> set[str]:
    return {r.rule.id for r in results if r.status is Status.FAIL}


def _errors(results) -> list[str]:
    return [r.line() for r in results if r.status is Status.ERROR]


def _sim_env() -> dict:
    """The environment of a child process that must run where this one does:
    on the simulator (preloaded: its SONAME answers libcuda.so.1) when this
    process runs on it."""
    env = dict(os.environ)
    if cudasim.loaded() is not None:
        # After what is preloaded already: the sanitizer lane's ASan runtime
        # must stay first in the list.
        env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), cudasim.build()]))
    return env


# Producers that break several rules at once (one rule each: the rules'
# breakers, proven by tests/test_rules_proven.py), made of the same pieces.
class NoStreamWait(DroppedWait):
    """Exports in place without ordering any consumer stream after its pending work (as for stream=-1)."""

    @staticmethod
    def dropped(stream) -> bool:
        return stream is None or hasattr(stream, "__cuda_stream__") or (is_int(stream) and stream > 0)


class HostCopyOnItsOwnStream(HostCopyOnOwnStream):
    """Copies to the host for dl_device=(kDLCPU, 0) with any stream on a stream of its own, never waited for."""

    @staticmethod
    def diverted(stream) -> bool:
        return True


class AliasingCopy(Wrapped):
    """copy=True exports the array in place."""

    def __dlpack__(self, copy=None, **kwargs):
        return self._a.__dlpack__(**kwargs)


class NoCopiedFlag(Wrapped):
    """Copies, but clears DLPACK_FLAG_BITMASK_IS_COPIED."""

    def __dlpack__(self, **kwargs):
        return set_flag(self._a.__dlpack__(**kwargs), FLAG_IS_COPIED, False)


def test_every_cuda_rule_is_cited_and_has_a_task_for_a_library_with_a_cuda_side():
    assert CUDA_RULES and all(r.startswith("cuda.") for r in CUDA_RULES)
    assert all(e.rule.citation() for e in entries() if e.side == "cuda")
    tasks = tasks_for({"producer": True, "consumer": True, "cuda": True})
    assert [t["rule"] for t in tasks if t["rule"].startswith("cuda.")] == CUDA_RULES
    # NumPy cannot make CUDA arrays: no CUDA tasks at all
    assert library("numpy").cuda is None
    assert not [t for t in tasks_for({"producer": True, "consumer": True, "cuda": False})
                if t["rule"].startswith("cuda.")]


def test_without_a_cuda_device_every_cuda_rule_is_not_supported():
    if cudasim.loaded() is None and cudatest.unavailable() is None:
        pytest.skip("a real CUDA driver is present")
    env = dict(os.environ, DLPACK_REF_CUDA_SIM="0")
    code = ("from dlpack_ref.conformance import subject_of\n"
            "from dlpack_ref.conformance.run import run_here\n"
            "from dlpack_ref.harness.registry import subject\n"
            "for r in run_here(subject_of(cuda=subject('dlpack_ref').cuda), only=None):\n"
            "    print(r.status.value, r.rule.id, r.exc_message)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == len(CUDA_RULES)
    assert all(line.startswith("not supported cuda.") for line in lines), out
    assert "CUDA needs the NVIDIA driver" in out


def test_dlpack_ref_passes_every_cuda_rule():
    results = check_cuda(_own())
    assert [r.rule.id for r in results] == CUDA_RULES
    assert [r.line() for r in results if r.status is not Status.PASS] == []


def test_dlpack_ref_passes_every_cuda_rule_through_the_runner(monkeypatch):
    # the runner's worker is a fresh interpreter: it runs where this process does
    monkeypatch.setenv("LD_PRELOAD", _sim_env().get("LD_PRELOAD", ""))
    results = run("dlpack_ref", only=CUDA_RULES)
    assert [r.rule.id for r in results] == CUDA_RULES
    assert [r.line() for r in results if r.status is not Status.PASS] == []


def test_the_cli_runs_the_cuda_rules_alone_and_reports_them():
    out = subprocess.run([sys.executable, "-m", "dlpack_ref", "check", "--library", "dlpack_ref", "--rules", "cuda.*",
                          "--no-matrix", "--format", "json"], env=_sim_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    import json
    report = json.loads(out.stdout)
    checks = {r["check"]: r["status"] for r in report["libraries"][0]["results"]}
    assert checks == dict.fromkeys(CUDA_RULES, "pass")
    table = subprocess.run([sys.executable, "-m", "dlpack_ref", "check", "--library", "dlpack_ref", "--rules",
                            "cuda.copy_*", "--no-matrix"], env=_sim_env(), capture_output=True, text=True).stdout
    assert "CUDA checks" in table and "cuda.copy_true_copies" in table and "cuda.managed_device" not in table


COMBINED = [
    (NoStreamWait, {"cuda.stream_handle_waits", "cuda.stream_legacy_waits", "cuda.stream_per_thread_waits",
                    "cuda.stream_none_waits", "cuda.stream_object_waits"}),
    (AliasingCopy, {"cuda.copy_true_copies", "cuda.copy_true_flag"}),
    (NoCopiedFlag, {"cuda.copy_true_flag", "cuda.dl_device_cpu_flag"}),
    (HostCopyOnItsOwnStream, {"cuda.dl_device_cpu_readable", "cuda.dl_device_cpu_on_stream"}),
]
#: The combined producers, then the breaker each rule declares for the rules
#: none of them breaks, each breaking exactly its rule.
BROKEN = COMBINED + [(BREAKERS[rule].cls, {rule}) for rule in CUDA_RULES
                     if not any(rule in broken for _, broken in COMBINED)]


@pytest.mark.parametrize("wrapper, broken", BROKEN, ids=[w.__name__ for w, _ in BROKEN])
def test_a_broken_producer_fails_exactly_its_rules(wrapper, broken):
    results = check_cuda(cuda_wrapping(wrapper))
    assert _errors(results) == []
    assert _failing(results) == broken, [r.line() for r in results if r.failed]
    assert all(r.status is Status.PASS for r in results if r.rule.id not in broken)


class IntStreamsOnly(Wrapped):
    def __dlpack__(self, stream=None, **kwargs):
        if stream is not None and not isinstance(stream, int):
            raise TypeError("stream must be an int")
        return self._a.__dlpack__(stream=stream, **kwargs)


def test_what_a_library_cannot_do_is_not_supported_never_a_pass():
    own = _own()

    def device_memory_only(kind, values):
        if kind != "cuda":
            raise RuntimeError(f"no {kind} memory in this library")
        return own.factory(kind, values)

    # JAX's case: arrays, but no way to tell the library which stream to write on
    results = {r.rule.id: r for r in check_cuda(CudaProducer("no-streams", device_memory_only))}
    unsupported = {k for k, r in results.items() if r.status is Status.NOT_SUPPORTED}
    assert unsupported == ORDERING_RULES | {"cuda.managed_device", "cuda.pinned_device"}
    assert "cannot tell it which stream" in results["cuda.stream_handle_waits"].detail
    assert results["cuda.managed_device"].exc_message == "no managed memory in this library"
    assert all(r.status is Status.PASS for k, r in results.items() if k not in unsupported)
    ints = {r.rule.id: r for r in check_cuda(cuda_wrapping(IntStreamsOnly), only=["cuda.stream_object_waits"])}
    assert ints["cuda.stream_object_waits"].status is Status.NOT_SUPPORTED


class RefusesDeviceCopy(Wrapped):
    """Refuses copy=True between CUDA arrays (seed 000: CuPy 14.0.1)."""

    def __dlpack__(self, copy=None, dl_device=None, **kwargs):
        if copy and dl_device is None:
            raise BufferError("copy=True is only supported for a copy to the host")
        return self._a.__dlpack__(copy=copy, dl_device=dl_device, **kwargs)


def test_copy_true_refused_on_the_device_is_a_failure_not_unsupported():
    results = {r.rule.id: r for r in check_cuda(cuda_wrapping(RefusesDeviceCopy),
                                                only=["cuda.copy_true_copies", "cuda.copy_true_flag"])}
    copies = results["cuda.copy_true_copies"]
    assert copies.status is Status.FAIL and copies.exc_type == "BufferError"
    assert "must always copy" in copies.detail
    assert results["cuda.copy_true_flag"].status is Status.NOT_SUPPORTED
