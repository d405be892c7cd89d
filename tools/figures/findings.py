"""The findings of docs/ecosystem.md against the committed reports: each
rule they cite must be one that some library fails or crashes on."""

from __future__ import annotations

import re

from figures import checkout
from figures.checkout import RESULTS, source

def failed_rules(paths: list[str]) -> dict[str, set[str]]:
    """rule -> the libraries that fail it or crash on it, in the committed reports of ``paths``."""
    out: dict[str, set[str]] = {}
    for path in paths:
        d = source(path).data
        for lib in (d or {}).get("libraries", []):
            for r in lib["results"]:
                if r["status"] == "fail" or r.get("crash"):
                    out.setdefault(r["check"], set()).add(lib["name"])
    return out


# The findings of docs/ecosystem.md cite rules: each must be one that some
# library of the committed reports fails or crashes on.
FINDINGS = ("ecosystem.md", "## What the findings mean for you", "## Per library",
            [f"{RESULTS}/ecosystem_1.json", f"{RESULTS}/ecosystem_2.json"])


def stale_findings() -> list[str]:
    """Rules the findings cite that no library fails in the committed
    reports (empty until every report is committed)."""
    name, begin, end, paths = FINDINGS
    if any(source(path).data is None for path in paths):
        return []
    text = (checkout.DOCS / name).read_text(encoding="utf-8")
    text = text[text.index(begin):text.index(end)]
    failed = failed_rules(paths)
    cited = dict.fromkeys(re.findall(r"`((?:producer|consumer|cuda)\.[a-z0-9_]+)`", text))
    return [f"docs/{name}: the findings cite `{rule}`, which no library fails in " + ", ".join(paths)
            for rule in cited if rule not in failed]
