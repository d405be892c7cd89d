"""tools/check_docs_render.py, the documentation site's render check, on
small pages made here: each fault it is there to catch (a code block that
scrolls sideways, a table that spills out of the content column, a page
wider than the window, a navigation column cut off, an image that failed
to load, a chart shrunk below 60 % of its width) is reported with its page
and element, and a clean page is not. Needs a Chromium (Debian's
chromium-headless-shell; .ci/lanes/build_checks.sh installs it): the
tests that render skip without one."""

import importlib.util
import pathlib
import struct
import zlib

import pytest

pytestmark = pytest.mark.harness

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_docs_render", ROOT / "tools" / "check_docs_render.py")
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)

BROWSER = render.find_chromium(None)
needs_chromium = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (apt-get install -y chromium-headless-shell)")


def png(width: int, height: int) -> bytes:
    """A grey PNG of that size."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# A page of Sphinx's basic layout: a 600 px content column beside a 200 px
# navigation column, in a 1280 px window.
PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; font: 16px sans-serif; display: flex; }}
nav {{ flex: none; width: 200px; overflow-x: hidden; }}
div.body {{ flex: none; width: 600px; padding: 0 20px; }}
pre {{ overflow-x: auto; white-space: pre; }}
</style></head><body>
<nav><a href="ok.html">home</a>{nav}</nav>
<div class="body" role="main"><section id="the-section"><h1>A page</h1>
<p>Some text that wraps as text does, however long it runs on the page.</p>
{body}</section></div></body></html>"""

PAGES = {
    "ok": '<pre>short = "code"</pre><img src="chart.png" alt="a chart that fits"><table><tr><td>1</td></tr></table>',
    "wide_code": "<pre>" + "x = 1  # " + "a comment that runs on " * 10 + "</pre>",
    "wide_table": "<table><tr>" + "<td>a_cell_without_breaks</td>" * 12 + "</tr></table>",
    "wide_page": '<div style="width: 2000px">a box as wide as two windows</div>',
    "cut_nav": "",
    "broken_image": '<img src="missing.png" alt="a chart that was never drawn">',
    "shrunk_image": '<img src="big.png" style="width: 300px" alt="a chart drawn too wide">',
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    for name, body in PAGES.items():
        nav = '<span style="white-space: nowrap">' + "a long navigation entry " * 5 + "</span>" \
            if name == "cut_nav" else ""
        (folder / f"{name}.html").write_text(PAGE.format(body=body, nav=nav))
    (folder / "chart.png").write_bytes(png(400, 100))
    (folder / "big.png").write_bytes(png(1000, 100))
    return folder


@pytest.fixture(scope="module")
def found(site):
    return render.check_site(site, list(PAGES), BROWSER, log=lambda *_: None)


@needs_chromium
def test_a_clean_page_passes(found):
    assert found["ok"] == []


@needs_chromium
@pytest.mark.parametrize("page, expected", [
    ("wide_code", ["section#the-section > pre", '"x = 1 # a comment', "scrolls sideways", "px hidden"]),
    ("wide_table", ["section#the-section > table", "spills", "out of the content column"]),
    ("wide_page", ["the page scrolls sideways", "in a 1280 px window"]),
    ("cut_nav", ["nav", "scrolls sideways"]),
    ("broken_image", ['img "missing.png"', "image failed to load"]),
    ("shrunk_image", ['img "big.png"', "shown at 30% of its natural width", "1000 px drawn into 300 px"]),
])
def test_each_fault_is_reported_with_its_element(found, page, expected):
    problems = found[page]
    assert problems, f"{page}: nothing reported"
    assert any(all(part in problem for part in expected) for problem in problems), problems


@needs_chromium
def test_a_spilling_table_is_reported_once_not_cell_by_cell(found):
    # The table, and the page it makes wider than the window; not its cells.
    assert len(found["wide_table"]) == 2, found["wide_table"]
    assert not [p for p in found["wide_table"] if " > td" in p or " > tr" in p]


@needs_chromium
def test_the_exit_status_and_the_message(site, capsys):
    assert render.main(["--site", str(site), "--page", "ok"]) == 0
    assert "render check ok: 1 page(s) fit 1280 px" in capsys.readouterr().out
    assert render.main(["--site", str(site), "--page", "ok", "--page", "broken_image"]) == 1
    out = capsys.readouterr().out
    assert "render check FAILED: 1 problem(s) on 1 of 2 page(s)" in out
    assert "  broken_image: " in out and "image failed to load" in out
    assert render.main(["--site", str(site), "--page", "no_such_page"]) == 2
    assert "pages missing from the site" in capsys.readouterr().err


@needs_chromium
def test_the_window_width_and_the_bar_change_the_verdict(site, capsys):
    # 300 of 1000 px is 30 %: legible enough only for a bar under that.
    assert render.main(["--site", str(site), "--page", "shrunk_image", "--min-scale", "0.25"]) == 0
    # The clean page's 200 + 640 px do not fit a 700 px window.
    assert render.main(["--site", str(site), "--page", "ok", "--width", "700"]) == 1
    assert "ok: the page scrolls sideways: 840 px wide in a 700 px window" in capsys.readouterr().out


@needs_chromium
def test_screenshots_are_written(site, tmp_path):
    shots = tmp_path / "shots"
    assert render.main(["--site", str(site), "--page", "ok", "--screenshots", str(shots)]) == 0
    assert (shots / "ok.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_browser_it_says_so_and_exits_2(tmp_path, capsys):
    assert render.main(["--site", str(tmp_path), "--chromium", "/nonexistent/chromium"]) == 2
    assert "no Chromium found" in capsys.readouterr().err


def test_page_names_and_fragments(tmp_path):
    assert render.page_file(tmp_path, "benchmarks#results") == (tmp_path / "benchmarks.html", "results")
    assert render.page_file(tmp_path, "api") == (tmp_path / "api.html", "")
    assert set(render.KEY_PAGES) == {"index", "semantics", "conformance", "benchmarks", "ecosystem", "cuda",
                                     "vendoring", "api"}
