"""The command line as the tests run it: ``python -m dlpack_ref`` in a
child process, as a user runs it (its stdout is the report alone, at the
file-descriptor level), with tests/ on PYTHONPATH for the child processes
that import the test doubles of tests/support by spec, as a user's own
module would be found."""

import contextlib
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent


def run(argv: list[str], timeout: float = 900) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``python -m dlpack_ref ARGV``."""
    done = subprocess.run([sys.executable, "-m", "dlpack_ref", *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def run_here(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``dlpack-ref ARGV`` run in this
    process (for tests that patch it), file descriptors 1 and 2 caught as a
    child's would be: what the command writes at the descriptor level counts."""
    from dlpack_ref import cli
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved_fds, saved_streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb"), write_through=True)
        try:
            rc = cli.main(argv, prog="dlpack-ref")
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.close()
            sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
        out.seek(0)
        err.seek(0)
        return rc, out.read().decode(), err.read().decode()


@contextlib.contextmanager
def support_importable(*more: str):
    """tests/ (and ``more`` folders) on PYTHONPATH while the block runs."""
    with pytest.MonkeyPatch.context() as patch:
        path = [*more, str(TESTS), os.environ.get("PYTHONPATH")]
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))
        for folder in more:
            patch.syspath_prepend(folder)
        yield
