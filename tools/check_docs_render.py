"""Render the documentation site's key pages in headless Chromium at a
laptop's width and fail on what a reader would see broken.

    python tools/check_docs_render.py                    # build (tools/build_docs.sh) into a temp dir, then check
    python tools/check_docs_render.py --site DIR         # check a site already built
    python tools/check_docs_render.py --site DIR --all   # every page, not only the key ones
    python tools/check_docs_render.py --site DIR --screenshots /tmp/shots [--full-page]
    python tools/check_docs_render.py --site DIR --page benchmarks#results --page api

For each page (default: index, semantics, conformance, benchmarks, ecosystem,
cuda, vendoring, api), at --width x --height CSS pixels (1280 x 800), it
fails, naming the page and the element, on:

- an element of the content column that spills out of it (a table, a code
  block, an unbreakable word: its box passes the column's left or right
  edge), or the page itself scrolling sideways;
- an element anywhere on the page that scrolls sideways (``overflow-x``
  auto, scroll or hidden with more content than width: a code block or a
  table wrapper that hides part of its lines, a navigation column cut
  off). Wide tables must fit, not scroll;
- an image that failed to load (``naturalWidth`` 0), and one shown at less
  than --min-scale (0.6) of its natural width: a chart shrunk until its
  numbers cannot be read. Charts are drawn for the page's width.

Exit status: 0 when every page is clean, 1 when a page has a problem (one
line per problem), 2 when the check could not run (no Chromium, the build
failed, a page is missing).

Text is set in DejaVu alone (Debian's fonts-dejavu-core, through a
fontconfig file of the check's own), whatever other fonts the machine has:
DejaVu is wider than Arial, Helvetica, Segoe UI or San Francisco, so a page
that fits here fits a reader's laptop too, and the verdict does not depend
on which fonts happen to be installed. --system-fonts renders with them all.

What it needs, all offline: a Chromium binary, Debian's
``chromium-headless-shell`` (``apt-get install -y --no-install-recommends
chromium-headless-shell fonts-dejavu-core``, about 250 MB installed) or
``chromium``, found on PATH or given by --chromium / $CHROMIUM. It drives
the browser through the Chrome DevTools Protocol over a pipe
(``--remote-debugging-pipe``: JSON messages on file descriptors 3 and 4),
so the Python side is the standard library alone: no Playwright or
Selenium, and no browser download (Playwright's would fail offline). The
site build needs the ``docs`` extra (tools/build_docs.sh installs it). A
run takes about a second for the browser and a quarter of a second a page
on 2 cores (3 s for all 14 pages; plus 5 to 10 s when it builds the site).
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

KEY_PAGES = ("index", "semantics", "conformance", "benchmarks", "ecosystem", "cuda", "vendoring", "api")

#: Browsers tried in order when neither --chromium nor $CHROMIUM names one.
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "chrome")

#: Where Debian's fonts-dejavu-core puts DejaVu Sans, Serif and Sans Mono.
DEJAVU = pathlib.Path("/usr/share/fonts/truetype/dejavu")

# The machine's rules (sans-serif, monospace, system-ui: which family each
# means) over DejaVu's folder alone.
FONTCONFIG = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir>{fonts}</dir>
  <cachedir>{cache}</cachedir>
  <include ignore_missing="yes">/etc/fonts/conf.d</include>
  <alias><family>system-ui</family><prefer><family>DejaVu Sans</family></prefer></alias>
</fontconfig>
"""

#: The main content column of the themes this site has used: pydata-sphinx-theme,
#: furo, Sphinx's alabaster/basic; the first that matches is the column.
COLUMN_SELECTORS = ("article.bd-article", "main#furo-main-content article", "div.body[role=main]",
                    "div.body", "[role=main]", "main")

# Runs in the page; returns {"problems": [...], "column": str} or {"error": str}.
# Elements are named by a short CSS path and the start of their text.
CHECK_JS = r"""
(async (columnSelectors, minScale) => {
  for (const img of document.images) img.loading = "eager";
  await document.fonts.ready;
  await Promise.all([...document.images].map(img => img.complete ? null :
    new Promise(done => { img.addEventListener("load", done); img.addEventListener("error", done); })));
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));

  const describe = el => {
    const parts = [];
    for (let e = el; e && e !== document.body && parts.length < 4; e = e.parentElement) {
      let part = e.tagName.toLowerCase();
      if (e.id) { part += "#" + e.id; parts.unshift(part); break; }
      const classes = [...e.classList].slice(0, 2);
      if (classes.length) part += "." + classes.join(".");
      parts.unshift(part);
    }
    let text = (el.tagName === "IMG" ? el.getAttribute("src") : el.innerText || el.textContent || "").replace(/\s+/g, " ").trim();
    if (text.length > 60) text = text.slice(0, 57) + "...";
    const section = el.closest("section[id]");
    return parts.join(" > ") + (text ? ` "${text}"` : "") + (section ? ` (section #${section.id})` : "");
  };

  let column = null, selector = null;
  for (const s of columnSelectors) { column = document.querySelector(s); if (column) { selector = s; break; } }
  if (!column) return {error: "no content column found (tried " + columnSelectors.join(", ") + ")"};
  const cs = getComputedStyle(column), box = column.getBoundingClientRect();
  const left = box.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft);
  const right = box.right - parseFloat(cs.borderRightWidth) - parseFloat(cs.paddingRight);
  const problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > window.innerWidth + 1)
    problems.push(`the page scrolls sideways: ${root.scrollWidth} px wide in a ${window.innerWidth} px window`);

  const reported = [];
  const hidden = el => { const st = getComputedStyle(el); return st.display === "none" || st.visibility === "hidden"; };
  const scrolls = el => ["auto", "scroll", "hidden"].includes(getComputedStyle(el).overflowX) &&
                        el.scrollWidth > el.clientWidth + 1;
  const scrollProblem = el => `${describe(el)} scrolls sideways: ${el.scrollWidth} px of content in ` +
                              `${el.clientWidth} px, ${el.scrollWidth - el.clientWidth} px hidden`;
  const skip = el => reported.some(r => r.contains(el)) || hidden(el) ||
                     el.closest(".headerlink, .visually-hidden, .sr-only, dialog:not([open])") ||
                     (() => { const r = el.getBoundingClientRect(); return r.width === 0 && r.height === 0; })();
  // In the content column: nothing scrolls sideways, nothing passes its edges.
  for (const el of column.querySelectorAll("*")) {
    if (skip(el)) continue;
    const r = el.getBoundingClientRect();
    if (scrolls(el)) {
      problems.push(scrollProblem(el));
      reported.push(el);
    } else if (r.right > right + 1 || r.left < left - 1) {
      const by = Math.round(Math.max(r.right - right, left - r.left));
      problems.push(`${describe(el)} spills ${by} px out of the content column ` +
                    `(${Math.round(r.width)} px wide, the column ${Math.round(right - left)} px)`);
      reported.push(el);
    }
  }
  // Elsewhere (the navigation columns, the header): nothing scrolls
  // sideways; the column's own containers only when nothing inside it did.
  for (const el of document.body.querySelectorAll("*")) {
    if (column.contains(el) || skip(el)) continue;
    if (el.contains(column) && problems.length) continue;
    if (scrolls(el)) {
      problems.push(scrollProblem(el));
      reported.push(el);
    }
  }
  if (!problems.length && column.scrollWidth > column.clientWidth + 1)
    problems.push(`the content column overflows: ${column.scrollWidth} px of content in ${column.clientWidth} px`);

  for (const img of document.images) {
    if (img.closest("header, nav, footer, .bd-header, .bd-footer") && !column.contains(img)) {
      if (img.complete && img.naturalWidth === 0 && !hidden(img))
        problems.push(`${describe(img)}: image failed to load`);
      continue;
    }
    if (!img.complete || img.naturalWidth === 0) {
      problems.push(`${describe(img)}: image failed to load`);
      continue;
    }
    const shown = img.getBoundingClientRect().width;
    if (shown < minScale * img.naturalWidth)
      problems.push(`${describe(img)}: image shown at ${Math.round(100 * shown / img.naturalWidth)}% of its ` +
                    `natural width (${img.naturalWidth} px drawn into ${Math.round(shown)} px; ` +
                    `at least ${Math.round(100 * minScale)}% needed to stay legible)`);
  }
  return {problems, column: `${selector}, ${Math.round(right - left)} px wide`};
})
"""


class BrowserError(RuntimeError):
    """Chromium could not be started or stopped answering."""


class Chromium:
    """A headless Chromium driven over the DevTools Protocol through a pipe."""

    def __init__(self, executable: str, width: int, height: int, timeout: float = 30.0,
                 fonts: pathlib.Path | None = DEJAVU):
        self.timeout = timeout
        self.width, self.height = width, height
        self.profile = tempfile.mkdtemp(prefix="docs-render-profile-")
        env = dict(os.environ)
        if fonts is not None and fonts.is_dir():
            # Every page in DejaVu alone, whatever else the machine has: the
            # widest of the common fonts, so a page that fits here fits with
            # Arial, Helvetica, Segoe UI or San Francisco too.
            config = pathlib.Path(self.profile) / "fonts.conf"
            config.write_text(FONTCONFIG.format(fonts=fonts, cache=pathlib.Path(self.profile) / "fontcache"))
            env["FONTCONFIG_FILE"] = str(config)
        args = [executable, "--headless", "--remote-debugging-pipe", "--disable-gpu", "--hide-scrollbars",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--allow-file-access-from-files", "--force-device-scale-factor=1",
                f"--window-size={width},{height}", f"--user-data-dir={self.profile}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
        # Chromium reads commands on fd 3 and writes replies on fd 4; its
        # output goes to a log read back if it dies. posix_spawn wires them
        # (no code runs between fork and exec); every descriptor of ours is
        # above 4 and closed on exec, so that the wiring clobbers nothing and
        # nothing else leaks into the browser.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        cmd_read, cmd_write = os.pipe()
        reply_read, reply_write = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        theirs = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (null, self.log.fileno(), cmd_read, reply_write)]
        for fd in (null, cmd_read, reply_write):
            os.close(fd)
        devnull, log, child_read, child_write = theirs
        try:
            self.pid = os.posix_spawn(executable, args, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2),
                (os.POSIX_SPAWN_DUP2, child_read, 3), (os.POSIX_SPAWN_DUP2, child_write, 4)])
        except OSError as e:
            os.close(cmd_write)
            os.close(reply_read)
            self.log.close()
            raise BrowserError(f"cannot start {executable}: {e}") from e
        finally:
            for fd in theirs:
                os.close(fd)
        self.status: int | None = None
        self.out, self.inp = cmd_write, reply_read
        self.buffer = b""
        self.events: list[dict] = []
        self.next_id = 0
        self.session = None

    def _wait(self, seconds: float) -> int | None:
        """The browser's exit status once it has exited, waiting up to
        ``seconds``; None while it runs."""
        deadline = time.monotonic() + seconds
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
            elif time.monotonic() >= deadline:
                break
            else:
                time.sleep(0.05)
        return self.status

    def _died(self) -> BrowserError:
        status = self._wait(5)
        self.log.seek(0)
        tail = self.log.read()[-2000:].decode(errors="replace")
        return BrowserError(f"Chromium exited (status {status}):\n{tail}")

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise self._died()
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: bool = True, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self.out, data):]
        except BrokenPipeError:
            raise self._died() from None
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self.events):
                if event["method"] == method:
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    def open_tab(self) -> None:
        target = self.send("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", session=False, targetId=target,
                                 flatten=True)["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)

    def navigate(self, url: str) -> None:
        self.events.clear()
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"cannot load {url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def screenshot(self, path: pathlib.Path, full_page: bool, max_height: int = 6000) -> None:
        params = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": self.width,
                                "height": min(size["height"], max_height), "scale": 1})
        else:
            scroll = self.evaluate("[window.scrollX, window.scrollY]")
            params["clip"] = {"x": scroll[0], "y": scroll[1], "width": self.width, "height": self.height,
                              "scale": 1}
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))

    def close(self) -> None:
        try:
            if self._wait(0) is None:
                try:
                    self.send("Browser.close", session=False)
                except BrowserError:
                    pass
                if self._wait(5) is None:
                    os.kill(self.pid, signal.SIGKILL)
                    self._wait(5)
        finally:
            os.close(self.out)
            os.close(self.inp)
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)


def find_chromium(given: str | None) -> str | None:
    """The browser to run: --chromium, else $CHROMIUM, else the first of
    BROWSERS on PATH; None when there is none."""
    for name in ([given] if given else []) + ([os.environ["CHROMIUM"]] if os.environ.get("CHROMIUM") else []) \
            + list(BROWSERS):
        found = shutil.which(name)
        if found:
            return found
        if given:
            return None
    return None


def page_file(site: pathlib.Path, page: str) -> tuple[pathlib.Path, str]:
    """The HTML file of PAGE ("benchmarks" or "benchmarks#results") and
    its fragment."""
    name, _, fragment = page.partition("#")
    return site / (name if name.endswith(".html") else name + ".html"), fragment


def check_site(site: pathlib.Path, pages, browser: str, width: int = 1280, height: int = 800,
               min_scale: float = 0.6, screenshots: pathlib.Path | None = None, full_page: bool = False,
               column_selectors=COLUMN_SELECTORS, fonts: pathlib.Path | None = DEJAVU,
               log=print) -> dict[str, list[str]]:
    """Load every page of ``pages`` from the built ``site`` and return
    {page: [problem, ...]}, an empty list for a clean page.

    Raises
    ------
    BrowserError
        When a page is missing or Chromium fails.
    """
    files = [(page, *page_file(site, page)) for page in pages]
    missing = [str(f) for _, f, _ in files if not f.is_file()]
    if missing:
        raise BrowserError(f"pages missing from the site: {', '.join(missing)}")
    chrome = Chromium(browser, width, height, fonts=fonts)
    found = {}
    try:
        chrome.open_tab()
        for page, path, fragment in files:
            chrome.navigate(path.resolve().as_uri() + (f"#{fragment}" if fragment else ""))
            result = chrome.evaluate(f"{CHECK_JS}({json.dumps(list(column_selectors))}, {min_scale})")
            if "error" in result:
                raise BrowserError(f"{page}: {result['error']}")
            found[page] = result["problems"]
            count = len(result["problems"])
            log(f"  {page}: {f'{count} problem(s)' if count else 'ok'} (content column {result['column']})")
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                shot = screenshots / f"{page.replace('#', '-')}.png"
                if fragment:
                    chrome.evaluate(f"document.getElementById({json.dumps(fragment)})?.scrollIntoView()")
                chrome.screenshot(shot, full_page)
                log(f"    screenshot: {shot}")
    finally:
        chrome.close()
    return found


def build_site(out: pathlib.Path) -> None:
    """tools/build_docs.sh into ``out``."""
    subprocess.run(["bash", str(ROOT / "tools" / "build_docs.sh"), str(out)], check=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--site", type=pathlib.Path, help="a built site (default: build one into a temp dir)")
    p.add_argument("--page", action="append", dest="pages", metavar="NAME[#FRAGMENT]",
                   help=f"a page to check, repeatable (default: {', '.join(KEY_PAGES)})")
    p.add_argument("--all", action="store_true",
                   help="every page of the site but genindex, search and py-modindex (instead of --page)")
    p.add_argument("--width", type=int, default=1280, help="window width in CSS px (default 1280)")
    p.add_argument("--height", type=int, default=800, help="window height in CSS px (default 800)")
    p.add_argument("--min-scale", type=float, default=0.6,
                   help="the least fraction of its natural width an image may be shown at (default 0.6)")
    p.add_argument("--chromium", help="the browser binary (default: $CHROMIUM, else " + ", ".join(BROWSERS) + ")")
    p.add_argument("--screenshots", type=pathlib.Path, metavar="DIR", help="write PAGE.png of every page here")
    p.add_argument("--full-page", action="store_true", help="screenshots of the whole page (up to 6000 px)")
    p.add_argument("--system-fonts", action="store_true",
                   help=f"render with every font of the machine, not DejaVu alone ({DEJAVU})")
    args = p.parse_args(argv)

    browser = find_chromium(args.chromium)
    if browser is None:
        print("check_docs_render: no Chromium found (apt-get install -y chromium-headless-shell, "
              "or --chromium PATH)", file=sys.stderr)
        return 2
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="docs-render-site-") as scratch:
        site = args.site
        if site is None:
            site = pathlib.Path(scratch) / "html"
            try:
                build_site(site)
            except subprocess.CalledProcessError as e:
                print(f"check_docs_render: the site build failed (exit {e.returncode})", file=sys.stderr)
                return 2
        pages = args.pages or list(KEY_PAGES)
        if args.all and args.pages:
            print("check_docs_render: --all or --page, not both", file=sys.stderr)
            return 2
        if args.all:
            skip = {"genindex", "search", "py-modindex"}
            pages = sorted(f.stem for f in site.glob("*.html") if f.stem not in skip)
        fonts = "the machine's fonts" if args.system_fonts or not DEJAVU.is_dir() else "DejaVu fonts"
        print(f"== render check: {len(pages)} page(s) of {site} at {args.width}x{args.height} px in "
              f"{os.path.basename(browser)}, {fonts}")
        try:
            found = check_site(site, pages, browser, args.width, args.height, args.min_scale,
                               args.screenshots, args.full_page, fonts=None if args.system_fonts else DEJAVU)
        except BrowserError as e:
            print(f"check_docs_render: {e}", file=sys.stderr)
            return 2
    bad = {page: problems for page, problems in found.items() if problems}
    seconds = time.monotonic() - start
    if bad:
        print(f"render check FAILED: {sum(map(len, bad.values()))} problem(s) on {len(bad)} of {len(found)} "
              f"page(s) at {args.width} px ({seconds:.1f} s):")
        for page, problems in bad.items():
            for problem in problems:
                print(f"  {page}: {problem}")
        return 1
    print(f"render check ok: {len(found)} page(s) fit {args.width} px, every image loaded and legible "
          f"({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
