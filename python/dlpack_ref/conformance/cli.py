"""``python -m dlpack_ref check``: run the conformance checks on the
libraries installed here and print the matrix."""

from __future__ import annotations

import argparse
import sys
import time

from ._result import Result, Status, result_from_dict
from .adapters import KNOWN, installed, version_of
from .consumer import CASES, judge
from .producer import RULES as PRODUCER_RULES, check_ids


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dlpack_ref",
                                description="DLPack conformance checks of the array libraries installed here.")
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run the producer, consumer and exchange checks")
    check.add_argument("--library", action="append", choices=list(KNOWN), metavar="NAME",
                       help=f"a library to check (repeatable; default: every installed one of {', '.join(KNOWN)})")
    check.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    check.add_argument("--no-matrix", action="store_true", help="skip the pairwise exchange matrix")
    return p


def run(libraries: list[str], matrix: bool = True, progress=None) -> dict:
    """Run everything for these libraries, each in its own worker process."""
    from ._worker import run_tasks
    say = progress or (lambda msg: None)
    versions, producer, consumer = {}, {}, {}
    usable = []
    for lib in libraries:
        try:
            versions[lib] = version_of(lib)
        except Exception as e:
            say(f"{lib}: cannot be imported ({type(e).__name__}: {e}); skipped")
            continue
        usable.append(lib)
        tasks = [{"kind": "producer", "library": lib, "check": cid} for cid in check_ids()]
        tasks += [{"kind": "case", "consumer": lib, "case": k.rule.id} for k in CASES]
        say(f"{lib} {versions[lib]}: {len(tasks)} checks")
        start = time.monotonic()
        outcomes = run_tasks(tasks, lambda task, out: _tick(say, lib, task, out))
        producer[lib], consumer[lib] = [], []
        for task, out in zip(tasks, outcomes):
            if task["kind"] == "producer":
                if "check" in out:
                    producer[lib].append(result_from_dict(out, PRODUCER_RULES))
                else:
                    rule = PRODUCER_RULES[task["check"]]
                    why = out.get("crashed") or out.get("worker_error")
                    status = Status.FAIL if "crashed" in out else Status.ERROR
                    producer[lib].append(Result(rule, status, f"the check ended the process ({why})"
                                                if "crashed" in out else why, subject=lib))
            else:
                case = next(k for k in CASES if k.rule.id == task["case"])
                status, detail, et, em = judge(case, out)
                consumer[lib].append(Result(case.rule, status, detail, et, em, subject=lib))
        say(f"{lib}: done in {time.monotonic() - start:.1f} s")
    cells = {}
    if matrix and usable:
        pairs = [{"kind": "pair", "producer": p, "consumer": c} for p in usable for c in usable]
        say(f"exchange matrix: {len(pairs)} pairs")
        for task, out in zip(pairs, run_tasks(pairs)):
            cells[(task["producer"], task["consumer"])] = out
    return {"versions": versions, "producer": producer, "consumer": consumer, "matrix": cells}


def _tick(say, lib, task, out):
    failed = out.get("status") in ("fail", "error") or "crashed" in out
    if failed:
        name = task.get("check") or task.get("case")
        say(f"  {lib}: {name}: {out.get('crashed') or out.get('status')}")


def main(argv=None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    libraries = args.library or installed()
    if "dlpack_ref" not in libraries and not args.library:
        libraries.insert(0, "dlpack_ref")
    result = run(libraries, matrix=not args.no_matrix,
                 progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    from .report import render
    print(render(result, args.format))
    own = result["producer"].get("dlpack_ref", []) + result["consumer"].get("dlpack_ref", [])
    return 1 if any(r.status in (Status.FAIL, Status.ERROR) for r in own) else 0
