"""What ``check`` and ``bench`` share in their output: stdout holds the
report alone (:func:`report_stdout`), progress and warnings go to stderr
(:class:`Progress`), the exit statuses, the paths a run will write checked
before anything is measured, the tables (plain text or Markdown) and the
tool and environment that every JSON report carries."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_MISSING", "report_stdout", "unwritable", "Progress",
           "md_escape", "grid", "tool", "environment"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_MISSING = 0, 1, 2, 3


@contextlib.contextmanager
def report_stdout(restore: bool = True):
    """Inside, whatever anything writes to stdout (Python's ``print``, a C
    library's ``printf``, a child process) goes to stderr, at the
    file-descriptor level; the file object yielded writes to the real
    stdout, which holds the report alone. Without ``restore`` (a process
    that is the command alone), file descriptor 1 stays on stderr after:
    what a library writes at interpreter exit (an ``atexit`` handler, a
    ``__del__``, a daemon thread) never reaches the report."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real, sys.stdout = sys.stdout, sys.stderr
    report = os.fdopen(os.dup(saved), "w", encoding="utf-8", closefd=True)
    try:
        yield report
    finally:
        report.flush()
        report.close()
        if restore:
            sys.stdout = real
            os.dup2(saved, 1)
        os.close(saved)


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written, or None when it can: checked before
    a run measures anything, so that a long run never ends in a traceback."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{path}: the folder {folder} does not exist"
    if os.path.isdir(path):
        return f"{path} is a folder"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return f"{path} cannot be written (permission denied)"
    return None


class Progress:
    """Counts on stderr while a phase runs."""

    def say(self, msg: str) -> None:
        # File descriptor 2 itself: a library may have replaced sys.stderr
        # (with a closed file, even) when it was imported in this process.
        data = (msg + "\n").encode("utf-8", "replace")
        while data:
            data = data[os.write(2, data):]

    def phase(self, label: str, total: int):
        state = {"done": 0, "failing": 0, "start": time.monotonic()}
        step = max(1, total // 5)

        def tick(line: str | None = None, failed: bool = False):
            state["done"] += 1
            state["failing"] += failed
            if line:
                self.say(f"  {label}: {line}")
            if state["done"] % step == 0 or state["done"] == total:
                self.say(f"  {label}: {state['done']}/{total} done, {state['failing']} failing, "
                         f"{time.monotonic() - state['start']:.1f} s")
        return tick


class Silent(Progress):
    def say(self, msg: str) -> None:
        pass


def md_escape(text: str) -> str:
    """Text that Markdown shows as written (``__dlpack__`` is not bold)."""
    for ch in "\\`*_{}[]<>#|":
        text = text.replace(ch, "\\" + ch)
    return text


def grid(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    """Rows under a header: a Markdown table, or plain text in aligned columns."""
    if markdown:
        lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*r) for r in rows])


def tool() -> dict:
    """This tool's name and version, and the DLPack version it implements, for reports."""
    import dlpack_ref
    return {"name": "dlpack-ref", "version": dlpack_ref.__version__, "dlpack_version": list(dlpack_ref.DLPACK_VERSION)}


def environment() -> dict:
    """Python and platform, for reports."""
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "machine": platform.machine(), "executable": sys.executable}
