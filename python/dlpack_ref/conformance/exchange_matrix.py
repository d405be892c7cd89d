"""The pairwise exchange matrix: each installed producer handed to each
installed consumer's ``from_dlpack``."""

from __future__ import annotations

from .model import Consumer, NotSupported, Producer, data_pointer, exc_name, same_values, short


def exchange_pair(p: Producer | None, c: Consumer | None) -> dict:
    """One cell: does the exchange work, in place, with the right values?
    Runs in a worker (an exchange may crash)."""
    if p is None or c is None:
        return {"works": False, "exc_type": None, "exc_message": "not a producer" if p is None else "no from_dlpack"}
    try:
        x = p.make("float32", (2, 3))
    except NotSupported:
        x = p.make("float32", (6,))  # a 1-D-only library (pyarrow)
    want_values = c.expected(p.values(x), "float32")
    want_ptr = data_pointer(x)
    try:
        y = c.take(x)
    except Exception as e:
        return {"works": False, "exc_type": exc_name(e), "exc_message": short(e)}
    cell = {"works": True}
    try:
        cell["zero_copy"] = c.pointer(y) == want_ptr
    except Exception as e:
        cell["zero_copy"] = None
        cell["note"] = f"pointer unreadable: {exc_name(e)}"
    try:
        cell["values_ok"] = same_values(c.values(y), want_values)
    except Exception as e:
        cell["values_ok"] = None
        cell["note"] = f"values unreadable: {exc_name(e)}: {short(e, 100)}"
    return cell


def cell_text(cell: dict) -> str:
    """The word a report shows for a cell."""
    if "crashed" in cell:
        return "CRASH"
    if "worker_error" in cell:
        return "error"
    if not cell.get("works"):
        return f"refused ({cell.get('exc_type')})" if cell.get("exc_type") else "n/a"
    if cell.get("values_ok") is False:
        return "WRONG VALUES"
    if cell.get("zero_copy") is None:
        return "ok (?)"
    return "zero-copy" if cell["zero_copy"] else "copy"
