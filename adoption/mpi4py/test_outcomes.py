"""The outcomes of a verbose unittest run of mpi4py's tests (its test/main.py
-v), read from the log.

    test_outcomes.py summary LOG LABEL
        prints "LABEL: N passed, N failed, N skipped" (exit 1 when the run
        did not finish: a crash)
    test_outcomes.py compare RELEASED_LOG ADOPTED_LOG EXPECTED
        exit 1 on a regression: a test that fails or errs as adopted and not
        as released, unless EXPECTED lists it; a listed test whose change
        did not happen; a different number of tests run or skipped.

EXPECTED lists the tests whose outcome changes on purpose, one a line:
``module.Class.test  FAIL|ERROR  why`` (# starts a comment).
"""

from __future__ import annotations

import re
import sys

RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
VERDICT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$", re.M)
FAILED_TEST = re.compile(r"^(FAIL|ERROR): (\w+) \(([\w.]+?)(?:\.\2)?\)", re.M)


def read(log: str) -> dict:
    """ran, failures, errors, skipped and {test id: FAIL|ERROR} of a log
    (ran None when the run did not finish)."""
    text = open(log, encoding="utf-8", errors="replace").read()
    ran = RAN.findall(text)
    verdict = VERDICT.findall(text)
    counts = {"failures": 0, "errors": 0, "skipped": 0, "expected failures": 0, "unexpected successes": 0}
    if verdict:
        for item in filter(None, (p.strip() for p in verdict[-1][1].split(","))):
            key, _, value = item.partition("=")
            counts[key] = int(value)
    failed = {f"{cls}.{name}": kind for kind, name, cls in FAILED_TEST.findall(text)}
    return {"ran": int(ran[-1]) if ran and verdict else None, **counts, "failed": failed}


def summary(log: str, label: str) -> int:
    r = read(log)
    if r["ran"] is None:
        print(f"{label}: did not finish (crashed?): see {log}")
        return 1
    failed = r["failures"] + r["errors"] + r["unexpected successes"]
    passed = r["ran"] - failed - r["skipped"] - r["expected failures"]
    print(f"{label}: {passed} passed, {failed} failed, {r['skipped']} skipped")
    return 0


def expected_changes(path: str) -> dict[str, str]:
    out = {}
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            test, outcome = line.split()[:2]
            out[test] = outcome
    return out


def compare(released_log: str, adopted_log: str, expected_path: str) -> int:
    released, adopted = read(released_log), read(adopted_log)
    expected = expected_changes(expected_path)
    problems = []
    if released["ran"] is None or adopted["ran"] is None:
        problems.append("a run did not finish")
    elif (released["ran"], released["skipped"]) != (adopted["ran"], adopted["skipped"]):
        problems.append(f"ran/skipped {released['ran']}/{released['skipped']} as released, "
                        f"{adopted['ran']}/{adopted['skipped']} as adopted")
    for test, kind in sorted(adopted["failed"].items()):
        if test in released["failed"]:
            continue
        if expected.get(test) == kind:
            print(f"  changed on purpose (expected_changes.txt): {test} {kind}")
        else:
            problems.append(f"{test}: {kind} as adopted, passed as released")
    for test, kind in sorted(expected.items()):
        if adopted["failed"].get(test) != kind or test in released["failed"]:
            problems.append(f"{test}: listed as changing to {kind}, but it did not change so")
    for test in sorted(set(released["failed"]) - set(adopted["failed"])):
        print(f"  fixed by the adoption: {test}")
    for p in problems:
        print(f"  REGRESSION: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    sys.exit({"summary": summary, "compare": compare}[command](*args))
