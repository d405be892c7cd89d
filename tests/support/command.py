"""The command line as the tests run it: ``dlpack-ref`` in this process with
its output caught, and tests/ on PYTHONPATH for the child processes that
import the test doubles of tests/support by spec, as a user's own module
would be found."""

import contextlib
import io
import os
from pathlib import Path

import pytest

from dlpack_ref.conformance import cli

TESTS = Path(__file__).resolve().parent.parent


def run(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``dlpack-ref ARGV``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv, prog="dlpack-ref")
    return rc, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def support_importable():
    """tests/ on PYTHONPATH while the block runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        yield
