"""``python -m dlpack_ref check``: the conformance matrix of the libraries installed."""

import sys


def main(argv=None) -> int:
    from dlpack_ref.conformance.cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
