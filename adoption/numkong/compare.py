"""Judge numkong adopted against numkong released (adoption/numkong/run.sh).

Reads, from the work folder, each build's pytest JUnit XML (tests-BUILD.xml)
and conformance report (check-BUILD.json), and from docs/adoption.md the
tests whose outcome changes on purpose: the rows of the table in section
"## numkong" whose first cell is a test id in backquotes and whose second
is the adopted outcome (`passed`, `failed` or `skipped`). Prints per build
`numkong NAME: N passed, N failed, N skipped` and the checker's counts, then
every regression, and exits 1 if there is any (adoption/lib.sh prints the
verdict):
- a test released passes that the adopted build does not, unless listed;
- a listed test whose adopted outcome is not the one listed;
- a checker rule that passes released and does not pass adopted;
- a producer rule of the checker that fails released and neither passes
  nor is "not supported" adopted (numkong's consumer, `numkong.from_dlpack`,
  was not moved onto the header: its rules are held only to not regress).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

BUILDS = ("released", "adopted")


def test_outcomes(xml: Path) -> dict[str, str]:
    """test id (file::name[param]) -> passed, failed or skipped."""
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[test_id] = "failed"
        elif case.find("skipped") is not None:
            outcomes[test_id] = "skipped"
        else:
            outcomes[test_id] = "passed"
    return outcomes


def listed_changes(docs: Path) -> dict[str, str]:
    """test id -> the adopted outcome docs/adoption.md lists for it."""
    text = docs.read_text() if docs.exists() else ""
    section = re.search(r"^## numkong\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if section is None:
        return {}
    rows = re.findall(r"^\| `([^`]+::[^`]+)` \| (passed|failed|skipped)\b", section.group(1), re.M)
    return dict(rows)


def check_results(report: Path) -> dict[tuple[str, str], str]:
    """(subject, check) -> pass, fail, not supported or error, for numkong."""
    data = json.loads(report.read_text())
    results = {}
    for lib in data["libraries"]:
        if lib["name"] == "numkong":
            for r in lib["results"]:
                results[(r["subject"], r["check"])] = r["status"]
    return results


def counts(values, names) -> str:
    return ", ".join(f"{sum(v == n for v in values)} {n}" for n in names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--docs", type=Path, required=True)
    args = parser.parse_args()
    tests, checks, problems = {}, {}, []
    for build in BUILDS:
        xml, report = args.work / f"tests-{build}.xml", args.work / f"check-{build}.json"
        tests[build] = test_outcomes(xml) if xml.exists() else {}
        if not tests[build]:
            problems.append(f"{build}: numkong's tests did not run (see {args.work / f'tests-{build}.log'})")
        print(f"numkong {build}: {counts(tests[build].values(), ('passed', 'failed', 'skipped'))}")
        try:
            checks[build] = check_results(report)
        except (OSError, ValueError, KeyError) as e:
            checks[build] = {}
            problems.append(f"{build}: no checker report ({e}; see {args.work / f'check-{build}.log'})")
        if not checks[build]:
            problems.append(f"{build}: the checker reported nothing for numkong")
        print(f"numkong {build} check: {counts(checks[build].values(), ('pass', 'fail', 'not supported', 'error'))}")

    listed = listed_changes(args.docs)
    for test_id, expected in sorted(listed.items()):
        got = tests["adopted"].get(test_id)
        if got != expected:
            problems.append(f"listed change {test_id}: docs say {expected}, adopted build {got}")
        else:
            print(f"changed on purpose (docs/adoption.md): {test_id}: "
                  f"released {tests['released'].get(test_id)}, adopted {got}")
    for test_id, outcome in sorted(tests["released"].items()):
        if outcome == "passed" and test_id not in listed and tests["adopted"].get(test_id) != "passed":
            problems.append(f"test regressed: {test_id}: released passed, adopted {tests['adopted'].get(test_id)}")

    kept = []
    for key, before in sorted(checks["released"].items()):
        after = checks["adopted"].get(key)
        name = f"{key[1]} ({key[0]})"
        moved = not key[1].startswith("consumer.")
        if before == "pass" and after != "pass":
            problems.append(f"checker rule regressed: {name}: released pass, adopted {after}")
        elif before in ("fail", "error") and after not in ("pass", "not supported"):
            if moved:
                problems.append(f"checker rule still {after}: {name} (released {before})")
            else:
                kept.append(key[1])
        elif before != after:
            print(f"checker: {name}: released {before}, adopted {after}")
    if kept:
        print(f"checker: still failing in numkong's own consumer (not moved onto the header): {', '.join(kept)}")

    for p in problems:
        print("REGRESSION:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
