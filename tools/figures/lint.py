"""Measurements quoted outside the blocks: each page's numbers with a unit
of measurement, less the settings and targets listed for it."""

from __future__ import annotations

import re
from pathlib import Path

from figures import checkout
from figures.markers import BLOCK, INLINE


# A number with the unit of a measurement: a time, a rate, instructions, a
# ratio, a percentage, test counts.
MEASUREMENT = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ns|µs|us|ms|s|sec|seconds|min|minutes|GB/s|MB/s|GiB/s)(?![\w/])"
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s+instructions\b"
    r"|(?<![\w.])\d+(?:\.\d+)?x(?![\w])"
    r"|(?<![\w.])\d+(?:\.\d+)?\s?%"
    r"|(?<![\w.])\d[\d,]*\s+(?:passed|failed|skipped|xfailed|pass|fail)\b")



def outside_blocks(text: str) -> str:
    """The text with its generated blocks and inline figures blanked (line numbers kept)."""
    text = BLOCK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return INLINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _setting(phrase: str) -> re.Pattern:
    """A phrase of the settings as a pattern: its spaces match any run of white
    space (a line break of the page included)."""
    return re.compile(r"\s+".join(re.escape(word) for word in phrase.split()))


def _without_code(text: str) -> str:
    """The text with its fenced code blocks and HTML comments blanked (line
    numbers kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"^```.*?^```", blank, text, flags=re.S | re.M)
    return re.sub(r"<!--.*?-->", blank, text, flags=re.S)


# The header of a table of measurements: a column in a unit of time or rate,
# of instructions, or of ratios.
UNIT_HEADER = re.compile(r"^\|.*\|\s*(?:ns|µs|ms|s|seconds|GB/s|MB/s|instructions|ratio|geomean)\s*(?:\(.*?\))?\s*\|",
                         re.M | re.I)


# Table cells of measurements without a unit: "72 (68)" (median (min)),
# "1898 (0.69)" (a count and its ratio), and counts of three digits or more.
PAIRED_CELL = re.compile(r"^\d[\d,]*(?:\.\d+)? \(\d[\d,]*(?:\.\d+)?\)(?: copy)?$")
COUNT_CELL = re.compile(r"^\d{3,}$|^\d{1,3}(?:,\d{3})+$")


def unbacked(page: Path, settings: dict[str, list[str]]) -> list[tuple[int, str]]:
    """(line, text) of each measurement the page quotes outside a generated
    block and outside the settings listed for it, and of each table of
    measurements there (by its header)."""
    text = outside_blocks(page.read_text(encoding="utf-8"))
    for phrase in settings.get(page.name, []):
        text = _setting(phrase).sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    text = _without_code(text)
    found = []
    for m in MEASUREMENT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found.append((line, m.group(0)))
    for m in UNIT_HEADER.finditer(text):
        found.append((text.count("\n", 0, m.start()) + 1, "a table of measurements: " + m.group(0)[:60]))
    for i, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        paired = sum(bool(PAIRED_CELL.match(c)) for c in cells)
        counts = sum(bool(COUNT_CELL.match(c)) for c in cells)
        if paired >= 2 or counts >= 3:
            found.append((i, "a table row of measurements: " + line[:60]))
    return sorted(found)


def stale_settings(settings: dict[str, list[str]]) -> list[str]:
    """The phrases of `settings` their page no longer has (an allowance nothing needs)."""
    out = []
    for name, phrases in settings.items():
        page = checkout.DOCS / name
        if not page.exists():
            continue
        text = outside_blocks(page.read_text(encoding="utf-8"))
        out += [f"docs/{name}: '{ph}'" for ph in phrases if not _setting(ph).search(text)]
    return out
