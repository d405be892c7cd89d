"""What ``check`` and ``bench`` share in their output: stdout holds the
report alone (:func:`report_stdout`), progress and warnings go to stderr
(:class:`Progress`), the exit statuses, the paths a run will write checked
before anything is measured, the tables (plain text or Markdown) and the
tool and environment that every JSON report carries."""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import stat
import sys
import tempfile
import time

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_MISSING", "report_stdout", "unwritable", "unwritable_folder", "write_report",
           "OutputError", "Progress",
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
    failed = None
    try:
        yield report
    finally:
        try:
            report.flush()
        except OSError as e:   # a full disk, a reader gone (EPIPE): said once, below
            failed = e
        with contextlib.suppress(OSError):
            report.close()     # retries a flush that failed
        if restore:
            sys.stdout = real
            os.dup2(saved, 1)
        os.close(saved)
    if failed is not None:
        raise OutputError(f"stdout: {failed.strerror or failed} (the report is incomplete)")


#: Kernel interfaces: a report written there is lost or harms the machine.
_KERNEL_FOLDERS = ("/proc", "/sys")


class OutputError(Exception):
    """A report file that cannot be written: the one line a user reads
    (the option, the path and why), exit status 2."""


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot take a report, or None when it can: checked
    before a run measures anything, so that a long run never ends in a
    traceback. A FIFO is never opened here (opening and closing it would
    end its reader's input); :func:`write_report` waits for its reader."""
    if not path:
        return "'': an empty path"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"{path}: {e.strerror}"
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return None if os.access(path, os.W_OK) else f"{path} cannot be written (permission denied)"
    if _under(os.path.abspath(path), _KERNEL_FOLDERS) or _under(os.path.realpath(path), _KERNEL_FOLDERS):
        return f"{path}: a kernel interface under /proc or /sys, not a place for a report"
    if st is not None and stat.S_ISDIR(st.st_mode):
        return f"{path} is a folder"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return f"{path} is neither a regular file, a FIFO nor a character device"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{path}: the folder {folder} does not exist"
    if st is not None and not os.access(path, os.W_OK):
        return f"{path} cannot be written (permission denied)"
    if not os.access(folder, os.W_OK):
        return f"{path}: the folder {folder} cannot be written (permission denied)"
    return None


def unwritable_folder(path: str) -> str | None:
    """Why ``path`` cannot be a folder a run writes its files into (it is
    made when missing), or None when it can."""
    if not path:
        return "'': an empty path"
    if _under(os.path.abspath(path), _KERNEL_FOLDERS) or _under(os.path.realpath(path), _KERNEL_FOLDERS):
        return f"{path}: a kernel interface under /proc or /sys, not a place for reports"
    if os.path.isdir(path):
        return None if os.access(path, os.W_OK) else f"{path}: the folder cannot be written (permission denied)"
    return unwritable(path)


#: How long a report waits for a reader to open the FIFO it goes to.
FIFO_WAIT_S = 5.0


def _write_fifo(path: str, data: bytes) -> None:
    """Open without blocking (a FIFO nobody reads would block ``open``
    forever), waiting up to FIFO_WAIT_S for a reader, then write blocking."""
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() > deadline:
                raise OSError(errno.ENXIO, f"nobody read the FIFO within {FIFO_WAIT_S:.0f} s") from None
            time.sleep(0.05)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_atomic(path: str, write) -> None:
    """``write(temporary_path)`` into a file beside ``path``, renamed over
    ``path`` once complete: a reader sees the old report or the new one,
    never half of one, and a failed write leaves the old one."""
    folder, name = os.path.split(os.path.abspath(path))
    suffix = os.path.splitext(name)[1]   # matplotlib picks the format by it
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=f".partial{suffix}", dir=folder)
    try:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
        os.close(fd)
        fd = -1
        write(temporary)
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_report(flag: str, path: str, data: str | bytes | None = None, draw=None) -> None:
    """Write a report file: ``data``, or what ``draw(path)`` writes. A
    regular file is written atomically (:func:`_write_atomic`); a FIFO or a
    character device (``/dev/stdout``, ``/dev/null``) is written in place.

    Raises
    ------
    OutputError
        For any OSError (a full disk, a reader gone, a folder removed
        meanwhile), naming ``flag`` and ``path``.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data

    def write(target: str) -> None:
        if draw is not None:
            draw(target)
        else:
            with open(target, "wb") as f:
                f.write(payload)

    try:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISFIFO(st.st_mode):
            if draw is not None:   # drawn whole first: a chart library may seek
                with tempfile.TemporaryDirectory() as folder:
                    drawn = os.path.join(folder, "chart" + os.path.splitext(path)[1])
                    draw(drawn)
                    with open(drawn, "rb") as f:
                        payload = f.read()
            _write_fifo(path, payload)
        elif st is not None and stat.S_ISCHR(st.st_mode):
            write(path)
        else:   # through a symbolic link to the file it names: the link stays
            _write_atomic(os.path.realpath(path), write)
    except OSError as e:
        raise OutputError(f"{flag} {path}: {e.strerror or e} (nothing was written there)") from None


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
