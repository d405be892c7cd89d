"""``python -m dlpack_ref check`` and the ``dlpack-ref`` console script: the
conformance checks as a CI gate (see docs/conformance.md)."""

import sys

from dlpack_ref.conformance.cli import main as _cli_main


def main(argv=None) -> int:
    """The console script's entry point; returns the exit status."""
    return _cli_main(argv)


if __name__ == "__main__":
    sys.exit(_cli_main(prog="python -m dlpack_ref"))
