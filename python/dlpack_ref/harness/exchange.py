"""One exchange: a producer's array handed to a consumer's ``from_dlpack``,
judged as both commands judge it (``check``'s exchange matrix, ``bench``'s
pre-flight): does it work, is the result the producer's memory (by
pointer), are the values right."""

from __future__ import annotations

import math

from .observe import exc_name, same_values, short
from .outcome import failure_of
from .subject import NotSupported, data_pointer

__all__ = ["exchange", "exchange_task", "cell_text", "CELL_LEGEND", "cell_reason"]


def exchange(p, c, shape: tuple = (2, 3), dtype: str = "float32") -> dict:
    """One cell: ``{"works", "zero_copy", "values_ok"}`` (None where the
    result cannot be read), ``{"works": False, "exc_type",
    "exc_message"}`` for a refusal, or ``{"works": False,
    "not_supported": why}`` where the producer cannot make the array (a
    factory's NotSupported: the library has no such array, which is no
    refusal of the exchange)."""
    if p is None or c is None:
        return {"works": False, "exc_type": None, "exc_message": "not a producer" if p is None else "no from_dlpack"}
    try:
        x = p.make(dtype, shape)
    except NotSupported as first:
        try:
            x = p.make(dtype, (math.prod(shape),))  # a 1-D-only library (pyarrow)
        except NotSupported:
            return {"works": False, "exc_type": None, "exc_message": None,
                    "not_supported": short(first.detail + (f" ({exc_name(first.exc)}: {short(first.exc, 100)})"
                                                           if first.exc is not None else ""))}
    try:
        want_values, unread = c.expected(p.values(x), dtype), None
    except Exception as e:  # the producer's own reading is not the exchange's point
        want_values, unread = None, f"the producer's values unreadable: {exc_name(e)}"
    try:
        y = c.take(x)
    except Exception as e:
        return {"works": False, "exc_type": exc_name(e), "exc_message": short(e)}
    # read while the result holds its memory: a producer that exports a fresh
    # copy each time cannot hand this export the address of the one imported
    cell = {"works": True}
    try:
        # read while the result holds its memory: a producer that exports a fresh
        # copy each time cannot hand this export the address of the one imported
        want_ptr = data_pointer(x)
        cell["zero_copy"] = c.pointer(y) == want_ptr
    except Exception as e:
        cell["zero_copy"] = None
        cell["note"] = f"pointer unreadable: {exc_name(e)}"
    try:
        cell["values_ok"] = None if unread else same_values(c.values(y), want_values)
        if unread:
            cell["note"] = unread
    except Exception as e:
        cell["values_ok"] = None
        cell["note"] = f"values unreadable: {exc_name(e)}: {short(e, 100)}"
    return cell


def exchange_task(task: dict, subjects) -> dict:
    """Child side: the cell of ``task["producer"]`` -> ``task["consumer"]``."""
    return exchange(subjects.of(task["producer"]).producer, subjects.of(task["consumer"]).consumer,
                    tuple(task.get("shape", (2, 3))))


def cell_text(cell: dict) -> str:
    """The word a report shows for a cell."""
    failure = failure_of(cell)
    if failure is not None and failure.hung:
        return "HANG"
    if failure is not None and failure.crashed:
        return f"CRASH ({failure.signal_name})" if failure.signal_name else "CRASH"
    if failure is not None:
        return "error"
    if cell.get("not_supported"):
        return "n/s"
    if not cell.get("works"):
        return f"refused ({cell.get('exc_type')})" if cell.get("exc_type") else "n/a"
    if cell.get("values_ok") is False:
        return "WRONG VALUES"
    if cell.get("zero_copy") is None:
        return "ok (?)"
    return "zero-copy" if cell["zero_copy"] else "copy"


#: Every word :func:`cell_text` gives, and what it means (a report's legend).
CELL_LEGEND = {
    "zero-copy": "in place (same pointer)",
    "copy": "a copy, right values",
    "ok (?)": "right values, pointer unreadable",
    "WRONG VALUES": "values differ from the producer's",
    "refused (X)": "from_dlpack raised X",
    "n/a": "a side is missing",
    "n/s": "the producer cannot make the array",
    "CRASH (SIG)": "killed by signal SIG",
    "HANG": "did not end in time",
    "error": "the checker could not run it",
}


def cell_reason(cell: dict) -> str | None:
    """Why a cell is what it is, in a line, for every cell that is not an
    exchange in place or a copy with the right values (None for those)."""
    text = cell_text(cell)
    if text in ("zero-copy", "copy"):
        return None
    failure = failure_of(cell)
    if failure is not None:
        return failure.detail
    if cell.get("not_supported"):
        return cell["not_supported"]
    if not cell.get("works"):
        return f"{cell.get('exc_type')}: {cell.get('exc_message')}" if cell.get("exc_type") else cell.get(
            "exc_message") or "no exchange"
    return cell.get("note") or ("values differ from the producer's" if cell.get("values_ok") is False
                                else "the result's pointer cannot be read")
