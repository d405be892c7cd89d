"""The documentation pages as a user reads them: user documentation only
(no test names in headings, no history of the project's own work), install
lines that work where the reader stands, and no page that sends the reader
into the tests."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if p.name != "changelog.md")
# Words of a log of the project's own work, not of what a user gets.
WORK_LOG = re.compile(r"earlier measurement|the first version of|relies on today|"
                      r"CI's first job|seed \d{3}|issue #?\d|\bwe (?:tried|first|had)\b|"
                      r"a quiet rerun|rerun of that version|went from [\d,.]+ to|before this rule|"
                      r"in an earlier run", re.I)


def _prose(page: Path) -> str:
    """The page without its code blocks."""
    return re.sub(r"```.*?```", "", page.read_text(), flags=re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_heading_carries_test_names(page):
    headings = [line for line in page.read_text().splitlines() if line.startswith("#") and "[test_" in line]
    assert headings == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_reads_as_a_log_of_our_work(page):
    assert WORK_LOG.findall(_prose(page)) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_installing_from_an_index_is_given_only_as_what_it_will_be(page):
    # dlpack-ref is on no package index yet: `pip install dlpack-ref` works nowhere
    paragraphs = [p for p in page.read_text().split("\n\n")
                  if re.search(r"pip install ['\"]?dlpack-ref(?![-\w])", p)
                  and not re.search(r"once\s+(?:it\s+is\s+|dlpack-ref\s+is\s+)?published|is\s+published", p, re.I)]
    assert paragraphs == []


def test_the_install_page_builds_a_wheel_and_installs_from_a_checkout():
    text = (DOCS / "install.md").read_text()
    assert "pip install ." in text and "pip wheel . --no-deps -w dist" in text
    assert "pip install dist/dlpack_ref-*.whl" in text
