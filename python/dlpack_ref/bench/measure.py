"""A whole ``dlpack-ref bench`` run, as one JSON-able document (described by
``bench.schema.json``).

A call that crashes cannot be timed in the process that times the others,
so every call runs once first in a child process (the pre-flight, through
the conformance runner: a crash or a hang is reported there, and a fresh
child takes the rest). Only the calls that returned are timed here: the
latency cases all interleaved in one set of rounds (every pair, every
producer method), then the copies of a large array interleaved with the
machine's memcpy of the same bytes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import time
from typing import Callable

from dlpack_ref.harness.output import Silent, environment, tool
from dlpack_ref.harness.processes import Interrupted
from dlpack_ref.harness.outcome import failure_of
from dlpack_ref.harness.registry import subject
from dlpack_ref.harness.runner import function_name, run_tasks, task

from . import callgrind, cases
from .cases import DTYPE, SMALL_SHAPE, Arrays, call_of, is_copy, name, plan
from .timing import compare

#: Bumped when a field of the JSON document changes meaning or goes away.
SCHEMA_VERSION = 1
#: A sleep before each copy sample: PyTorch's OpenMP workers spin for about
#: 10 ms after each of its calls and would share a core with the next sample.
QUIET_S = 0.02


@dataclasses.dataclass(frozen=True)
class Settings:
    """How long a run measures.

    ``rounds``: samples of each latency case, of ``budget_s`` seconds each;
    ``copy_rounds``: samples of each copy (one call each); ``copy_bytes``:
    the size of the large array; ``instructions``: count instructions per
    latency call too (callgrind), each call ``loops`` and twice ``loops``
    times.
    """

    rounds: int = 21
    budget_s: float = 0.01
    copy_rounds: int = 11
    copy_bytes: int = 64 << 20
    instructions: bool = False
    loops: int = 200
    quick: bool = False


#: ``--quick``: a smoke run (under a minute with six libraries).
QUICK = Settings(rounds=5, budget_s=0.004, copy_rounds=3, loops=50, quick=True)


@dataclasses.dataclass
class _Run:
    """What a run found, before it is written out as the document."""

    specs: list[str]
    subjects: dict
    producers: list[str]
    consumers: list[str]
    outcomes: dict[tuple[str, ...], dict]   # key -> what its pre-flight gave
    records: dict[tuple[str, ...], dict]    # key -> its timed record (or why not)
    tables: dict[str, list[int] | None]     # producer -> its type's exchange-table version


def machine() -> dict:
    """The CPU, its number of cores and the load average now."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count() or 1, "load_average": list(os.getloadavg())}


def overloaded(load: list[float], cores: int) -> bool:
    """Whether the 1-minute load average exceeds the cores: other work then
    takes turns with the calls timed, and their ratios mean little."""
    return load[0] > cores


def _record(status: str, reason: str | None = None) -> dict:
    return {"status": status, "ns_min": None, "ns_median": None, "calls_per_sample": None,
            "instructions": None, "reason": reason}


def _refusal(outcome: dict) -> dict:
    if "interrupted" in outcome:
        return _record("not measured", "the run was interrupted before this call's pre-flight")
    failure = failure_of(outcome)
    if failure is not None and failure.crashed:
        return _record("crashed", f"the call crashed its process ({failure.detail}); not timed")
    if failure is not None:
        return _record("error", failure.detail)
    what = "the array could not be made" if outcome.get("stage") == "make" else "refused"
    return _record("refused", f"{what}: {outcome['exc_type']}: {outcome['exc_message']}")


def _preflight(keys: list[tuple[str, ...]], copy_bytes: int, progress, outcomes: dict) -> None:
    """Each call of ``keys`` once in a child process: its outcome into
    ``outcomes`` as it comes (what came before a signal is kept)."""
    tasks = [task(cases.probe, kind="function", key=list(k), copy_bytes=copy_bytes) for k in keys]
    progress.say(f"pre-flight: {len(tasks)} calls, each once in a child process")
    tick = progress.phase("pre-flight", len(tasks))

    def done(task, outcome):
        failure = failure_of(outcome)
        tick(f"{name(tuple(task['key']))}: {failure.detail}; not timed" if failure else None, failure is not None)
        outcomes[tuple(task["key"])] = outcome

    run_tasks(tasks, spec="", on_done=done)


def _timed(calls: dict[tuple[str, ...], Callable[[], object]], progress, label: str, **options) -> dict:
    rounds = options["rounds"]
    progress.say(f"{label}: {len(calls)} calls interleaved, {rounds} rounds")
    began = time.monotonic()

    def done(r: int) -> None:
        if r % max(1, rounds // 4) == 0 or r == rounds:
            progress.say(f"  {label}: round {r}/{rounds}, {time.monotonic() - began:.1f} s")

    stats = compare({name(k): fn for k, fn in calls.items()}, on_round=done, **options)
    return {k: stats[name(k)] for k in calls}


def _make_calls(keys, arrays: Arrays, records: dict) -> dict:
    """The calls of ``keys`` in this process; a key whose arrays cannot be
    made here is recorded as an error instead."""
    made = {}
    for k in keys:
        try:
            made[k] = call_of(k, arrays)
        except Exception as e:
            records[k] = _record("error", f"the call could not be set up here: {type(e).__name__}: {e}")
    return made


def measure(specs: list[str], settings: Settings = Settings(), progress=None,
            missing: dict[str, str] | None = None) -> dict:
    """Benchmark the exchange between the libraries ``specs`` name.

    Parameters
    ----------
    specs : list of str
        Library specs as ``dlpack-ref check`` takes them (a known name,
        ``module``, ``module:from_dlpack``); each must be importable
        (``adapters.subject(spec)`` succeeds).
    settings : Settings
        Rounds, sizes, instruction counts.
    progress : object, optional
        With ``say(message)`` and ``phase(label, total)`` (the command line's
        progress on stderr); default: silent.
    missing : dict of str to str, optional
        Libraries looked for and not benchmarked, with why (the report lists
        them).

    Returns
    -------
    dict
        The run as ``bench.schema.json`` describes it.
    """
    progress = progress or Silent()
    start = machine()
    notes = []
    if overloaded(start["load_average"], start["cores"]):
        notes.append(f"the load average at the start ({start['load_average'][0]:.2f}) exceeds the "
                     f"{start['cores']} cores: other work shared the machine, and the ratios mean little")
        progress.say("warning: " + notes[-1])
    subjects = {s: subject(s) for s in specs}
    producers = [s for s in specs if subjects[s].producer is not None]
    consumers = [s for s in specs if subjects[s].consumer is not None]
    keys = plan(producers, consumers, numpy=importlib.util.find_spec("numpy") is not None)
    outcomes: dict[tuple[str, ...], dict] = {}
    stopped = _phase(lambda: _preflight(keys, settings.copy_bytes, progress, outcomes))
    outcomes |= {k: {"interrupted": True} for k in keys if k not in outcomes}
    records = {k: _refusal(o) for k, o in outcomes.items() if not o.get("ok")}
    tables = {k[1]: outcomes[k].get("table") for k in keys if k[0] == "capsule" and outcomes[k].get("ok")}
    # The import through __dlpack__ is measured beside the one through a table.
    for p in producers:
        if not tables.get(p) and ("capsule", p) not in records:
            records[("capsule", p)] = _record("not measured", "no exchange table: dlpack_ref imports through "
                                              "__dlpack__ (the pair's figure)")
    arrays = Arrays(settings.copy_bytes)
    latency = _make_calls([k for k in keys if k not in records and not is_copy(k)], arrays, records)
    copies = _make_calls([k for k in keys if k not in records and is_copy(k)], arrays, records)
    stats: dict = {}
    stopped = stopped or _phase(lambda: stats.update(_timed(latency, progress, "latency", rounds=settings.rounds,
                                                            budget_s=settings.budget_s)))
    stopped = stopped or _phase(lambda: stats.update(_timed(
        copies, progress, f"copies of {settings.copy_bytes >> 20} MiB", rounds=settings.copy_rounds, budget_s=0.0,
        quiet_s=QUIET_S)))
    for k in [*latency, *copies]:
        s = stats.get(k)
        records[k] = _record("not measured", "the run was interrupted before this call was timed") if s is None else \
            {**_record("measured"), "ns_min": s["min_ns"], "ns_median": s["median_ns"], "calls_per_sample": s["number"]}
    if settings.instructions and stopped is None:
        note = _count_instructions(list(latency), settings, records, progress)
        notes += [note] if note else []
    end = machine()
    if overloaded(end["load_average"], end["cores"]):
        notes.append(f"the load average at the end ({end['load_average'][0]:.2f}, this run included) exceeds the "
                     f"{end['cores']} cores: the ratios mean little")
        progress.say("warning: " + notes[-1])
    run = _Run(specs, subjects, producers, consumers, outcomes, records, tables)
    doc = _document(run, settings, start, end, notes, missing or {})
    if stopped is not None:
        timed = sum(r["status"] == "measured" for r in records.values())
        tried = sum("interrupted" not in o for o in outcomes.values())
        doc["partial"] = (f"interrupted by {stopped.signal}: {tried} of {len(keys)} pre-flight calls, {timed} calls "
                          "timed; every process it started was ended")
    return doc


def _phase(run: Callable[[], object]) -> Interrupted | None:
    """Run one phase of the measurement; the signal that stopped it, if one did."""
    try:
        run()
    except Interrupted as e:
        return e
    return None


def _count_instructions(keys, settings: Settings, records: dict, progress) -> str | None:
    """Instructions per call of ``keys`` into their records; the note to
    report when they could not be counted."""
    why = callgrind.missing()
    if why is None:
        progress.say(f"instructions: {len(keys)} calls under callgrind, {settings.loops} and "
                     f"{2 * settings.loops} times each (slow)")
        try:
            counts, _ = callgrind.count(function_name(cases.calls), [[list(k) for k in keys], settings.copy_bytes], settings.loops)
        except RuntimeError as e:
            why = str(e)
        else:
            for k in keys:
                records[k]["instructions"] = counts[name(k)]
            return None
    note = f"instructions were not counted: {why}"
    progress.say("warning: " + note)
    return note


def _zero_copy(outcomes: dict, key) -> bool | None:
    return outcomes[key].get("zero_copy") if outcomes[key].get("ok") else None


def _standing(records: dict, mine: tuple, others: list[tuple], what: str, of: str) -> dict:
    """dlpack_ref's median against the best other's, for one producer (or consumer)."""
    measured = {k: records[k]["ns_median"] for k in others if records[k]["status"] == "measured"}
    own = records[mine]["ns_median"] if records[mine]["status"] == "measured" else None
    best = min(measured, key=measured.__getitem__) if measured else None
    entry = {what: of, "dlpack_ref_ns_median": own, "best_other": None, "best_other_ns_median": None, "ratio": None}
    if best is not None:
        entry.update(best_other=best[2] if what == "producer" else best[1], best_other_ns_median=measured[best])
        if own is not None:
            entry["ratio"] = own / measured[best]
    return entry


def _document(run: _Run, settings: Settings, start: dict, end: dict, notes: list[str], missing: dict) -> dict:
    mine = "dlpack_ref"
    records, outcomes, producers, consumers = run.records, run.outcomes, run.producers, run.consumers
    pairs = [{"producer": k[1], "consumer": k[2], **records[k], "zero_copy": _zero_copy(outcomes, k)}
             for k in outcomes if k[0] == "pair"]
    # dlpack_ref's own Arrays are aliased by its from_dlpack, not imported through its table.
    by_table = {p: records[("pair", p, mine)] if run.tables.get(p) and mine in consumers and p != mine else None
                for p in producers}
    methods = [{"library": p, "dlpack": records[("dlpack", p)], "dlpack_device": records[("device", p)],
                "import_by_table": by_table[p], "import_by_dlpack": records[("capsule", p)]} for p in producers]
    memcpy = records[("memcpy",)]
    def copy_rows(kind):
        rows = []
        for c in consumers:
            if (kind, c) not in records:
                continue
            r = dict(records[(kind, c)])
            measured = r["status"] == "measured" and memcpy["status"] == "measured"
            r.update(library=c, copied=outcomes[(kind, c)].get("copied"), ready_by=outcomes[(kind, c)].get("ready_by"),
                     gb_per_s=settings.copy_bytes / r["ns_median"] if r["status"] == "measured" else None,
                     of_memcpy=memcpy["ns_median"] / r["ns_median"] if measured else None)
            rows.append(r)
        return rows
    standings: dict[str, list] = {"as_consumer": [], "as_producer": []}
    if mine in consumers:
        standings["as_consumer"] = [_standing(records, ("pair", p, mine),
                                              [("pair", p, c) for c in consumers if c != mine], "producer", p)
                                    for p in producers]
    if mine in producers:
        standings["as_producer"] = [_standing(records, ("pair", mine, c),
                                              [("pair", p, c) for p in producers if p != mine], "consumer", c)
                                    for c in consumers]
    return {
        "schema_version": SCHEMA_VERSION,
        "partial": None,
        "tool": tool(),
        "environment": environment(),
        "machine": {"cpu": start["cpu"], "cores": start["cores"],
                    "load_average": {"start": start["load_average"], "end": end["load_average"]},
                    "overloaded": overloaded(start["load_average"], start["cores"])
                    or overloaded(end["load_average"], end["cores"])},
        "settings": {"quick": settings.quick, "rounds": settings.rounds, "budget_s": settings.budget_s,
                     "copy_rounds": settings.copy_rounds, "copy_bytes": settings.copy_bytes,
                     "array": {"dtype": DTYPE, "shape": list(SMALL_SHAPE)},
                     "instructions": settings.instructions, "loops": settings.loops},
        "libraries": [{"name": s, "version": run.subjects[s].version, "producer": s in producers,
                       "consumer": s in consumers, "exchange_table": run.tables.get(s)} for s in run.specs],
        "pairs": pairs,
        "producers": methods,
        "copies": {"bytes": settings.copy_bytes, "memcpy": memcpy, "libraries": copy_rows("copy"),
                   "from_numpy": copy_rows("copy_numpy")},
        "dlpack_ref": standings,
        "missing": [{"name": lib, "reason": why} for lib, why in missing.items()],
        "notes": notes,
    }
