"""``python -m dlpack_ref check | bench`` and the ``dlpack-ref`` console
script (see :mod:`dlpack_ref.cli`)."""

import sys

from dlpack_ref.cli import main


if __name__ == "__main__":
    sys.exit(main(prog="python -m dlpack_ref"))
