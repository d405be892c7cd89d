"""Every rule proven to fail. dlpack-ref passes each
rule; beside it, a subject made to break exactly that rule
(declared beside it, ``@breaks``) fails it and passes, or is not supported by,
every other rule of its side; and the failure's reproduction, run in a
fresh interpreter, shows that failure. A rule nothing can fail is a defect:
a rule without a breaker fails here, named.

Each breaker is checked as a user's library is: named by spec (a hook
module per rule, written to a folder on PYTHONPATH with tests/), its whole
side in one ``dlpack-ref check`` (one child process), two checks at a time.
The CUDA rules run where tests/test_conformance_cuda.py runs them: on the
simulated driver without a GPU (its children preloaded with it), on the GPU
where there is one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from dlpack_ref.conformance.rules import entries
from support import breakers, command, cudasim, cudatest

pytestmark = [pytest.mark.thread_unsafe(reason="checks two breakers at a time from one cache of child processes"), pytest.mark.harness]

RULES = {e.rule.id: e.rule for e in entries()}
SIDES = {e.rule.id: e.side for e in entries()}
#: The rules dlpack-ref's adapter can only answer "not supported": it has
#: no scalar type and no array that cannot be exported. The control
#: subject (dlpack-ref with both, done right) passes them.
LACKED = {"producer.scalar": "the library has no scalar type separate from 0-d arrays",
          "producer.buffererror_for_unexportable": "the library has no arrays that cannot be exported"}
CONTROL = "brk_control"


def module_of(rule: str) -> str:
    """The hook module that names the breaker of ``rule``."""
    return "brk_" + rule.replace(".", "_")


def rules_of(side: str) -> list[str]:
    return [rule for rule, s in SIDES.items() if s == side]


def with_marks(side: str) -> list:
    """The rules of ``side`` as parameters, the CUDA ones marked as tests/test_conformance_cuda.py's."""
    marks = cudatest.marks() if side == "cuda" else []
    return [pytest.param(rule, marks=marks, id=rule) for rule in rules_of(side)]


def needs_cuda(test):
    """``test`` marked as tests/test_conformance_cuda.py's tests are (skipped, with why, without CUDA)."""
    for mark in cudatest.marks():
        test = mark(test)
    return test


@pytest.fixture(scope="module", autouse=True)
def hooks(tmp_path_factory):
    """A folder of hook modules, one per breaker and the control, on
    PYTHONPATH with tests/ while this module's tests run: the checker's
    children and the reproductions import them by name."""
    folder = tmp_path_factory.mktemp("breakers")
    for rule in breakers.BREAKERS:
        (folder / f"{module_of(rule)}.py").write_text(
            f"from support.breakers import hook\n__dlpack_conformance__ = hook({rule!r})\n")
    (folder / f"{CONTROL}.py").write_text("from support.breakers import control as __dlpack_conformance__\n")
    with command.support_importable(str(folder)):
        yield folder


def environment(side: str) -> dict:
    """The environment of a child process checking ``side``: for the CUDA
    rules, preloaded with the simulator when this process runs on it (after
    what is preloaded already: the sanitizer lane's ASan runtime stays first)."""
    env = dict(os.environ)
    if side == "cuda" and cudasim.loaded() is not None:
        env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), cudasim.build()]))
    return env


def check(spec: str, side: str) -> dict:
    """Rule id -> result (the JSON report's) of every rule of ``side`` on the library ``spec``."""
    done = subprocess.run([sys.executable, "-m", "dlpack_ref", "check", "--library", spec, "--rules", f"{side}.*",
                           "--format", "json", "--no-matrix"], capture_output=True, text=True, timeout=300,
                          env=environment(side), stdin=subprocess.DEVNULL)
    assert done.returncode in (0, 1), f"exit {done.returncode}: {done.stderr[-2000:]}"
    [library] = json.loads(done.stdout)["libraries"]
    return {r["check"]: r for r in library["results"]}


def statuses(results: dict) -> dict:
    return {rule: r["status"] for rule, r in results.items()}


@dataclasses.dataclass
class Proof:
    """A breaker's check (its side's results) and its rule's reproduction, run."""

    results: dict
    reproduction: subprocess.CompletedProcess | None


def prove(rule: str, folder) -> Proof:
    """Check the breaker of ``rule`` and run its failure's reproduction (if any) in a fresh interpreter."""
    results = check(module_of(rule), SIDES[rule])
    source = results[rule]["reproduction"]
    if source is None:
        return Proof(results, None)
    path = folder / f"repro_{module_of(rule)}.py"
    path.write_text(source)
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                         env=environment(SIDES[rule]), stdin=subprocess.DEVNULL, cwd=folder)
    return Proof(results, run)


@pytest.fixture(scope="module")
def proven(hooks):
    """``proven(rule)``: the Proof of ``rule``'s breaker; a side's breakers
    are proved together, two at a time, when the first of them is asked for
    (what went wrong in proving one is raised by each of its tests)."""
    done: dict[str, Proof | Exception] = {}

    def attempt(rule: str) -> Proof | Exception:
        try:
            return prove(rule, hooks)
        except Exception as e:  # the check itself failed: that rule's tests say so, the others go on
            return e

    def proof(rule: str) -> Proof:
        if rule not in done:
            side = [r for r in rules_of(SIDES[rule]) if r in breakers.BREAKERS]
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                done.update(zip(side, pool.map(attempt, side)))
        if isinstance(done[rule], Exception):
            raise done[rule]
        return done[rule]
    return proof


# --- every rule has a breaker, and dlpack-ref passes every rule -----------------------------------

def test_every_rule_has_a_breaker_and_every_breaker_a_rule():
    assert [rule for rule in RULES if rule not in breakers.BREAKERS] == []
    assert [rule for rule in breakers.BREAKERS if rule not in RULES] == []


@pytest.mark.parametrize("side", ["producer", "consumer"])
def test_dlpack_ref_passes_every_rule_but_what_its_adapter_lacks(side):
    results = check("dlpack_ref", side)
    lacked = {rule: why for rule, why in LACKED.items() if SIDES[rule] == side}
    assert statuses(results) == {rule: "not supported" if rule in lacked else "pass" for rule in rules_of(side)}
    assert {rule: results[rule]["detail"] for rule in lacked} == lacked


def test_what_dlpack_ref_lacks_done_right_passes_every_producer_rule():
    results = check(CONTROL, "producer")
    assert statuses(results) == dict.fromkeys(rules_of("producer"), "pass")
    assert results["producer.scalar"]["detail"] == "0-d, value 1.5"
    assert results["producer.buffererror_for_unexportable"]["detail"] == "an array of Python objects: BufferError"


@needs_cuda
def test_dlpack_ref_passes_every_cuda_rule():
    assert statuses(check("dlpack_ref", "cuda")) == dict.fromkeys(rules_of("cuda"), "pass")


# --- each breaker fails exactly its rule, and its reproduction shows it -----------------------------

EVERY_RULE = with_marks("producer") + with_marks("consumer") + with_marks("cuda")


@pytest.mark.parametrize("rule", EVERY_RULE)
def test_the_breaker_fails_exactly_its_rule(rule, proven):
    results = proven(rule).results
    assert set(results) == set(rules_of(SIDES[rule]))
    assert results[rule]["status"] == "fail"
    assert breakers.BREAKERS[rule].shows in results[rule]["detail"]
    others = {r: f"{res['status']}: {res['detail']}" for r, res in results.items()
              if r != rule and res["status"] not in ("pass", "not supported")}
    assert others == {}


def observed(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith("observed: ")]


def as_shown(result: dict) -> str:
    """The ``observed:`` line a reproduction prints for ``result`` (a JSON
    report's), addresses and counts of bytes (which differ from run to run)
    written as #."""
    line = f"observed: {result['detail']}"
    if result["exception_type"]:
        line += f" (observed {result['exception_type']}: {result['exception_message']})"
    return unaddressed(line)


def unaddressed(line: str) -> str:
    return re.sub(r"0x[0-9a-f]+|\d{5,}", "#", line)


@pytest.mark.parametrize("rule", EVERY_RULE)
def test_the_reproduction_shows_the_failure(rule, proven):
    proof = proven(rule)
    run, detail = proof.reproduction, proof.results[rule]["detail"]
    assert run is not None, f"{rule} failed without a reproduction"
    what = f"exit {run.returncode}; stdout {run.stdout[-500:]!r}; stderr {run.stderr[-1500:]!r}"
    if "crashed the process" in detail:
        # a crash is shown by the reproduction's own death (the sanitizer lane leaves SIGSEGV alone)
        assert run.returncode < 0 and not observed(run), what
        return
    assert run.returncode == 1, what
    assert f"expected: {RULES[rule].text}" in run.stdout.splitlines(), what
    assert [unaddressed(line) for line in observed(run)] == [as_shown(proof.results[rule])], what
