"""The text of a figure: tables as the reports of dlpack-ref write them, and sizes."""

from __future__ import annotations

from dlpack_ref.harness import output


def grid(header: list[str], rows: list[list]) -> str:
    """A Markdown table, every cell escaped as the reports of dlpack-ref escape it."""
    return output.grid(header, [[str(c) for c in r] for r in rows], markdown=True)


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
