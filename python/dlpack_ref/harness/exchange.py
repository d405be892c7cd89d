"""One exchange: a producer's array handed to a consumer's ``from_dlpack``,
judged as both commands judge it (``check``'s exchange matrix, ``bench``'s
pre-flight): does it work, is the result the producer's memory (by
pointer), are the values right."""

from __future__ import annotations

from .observe import exc_name, same_values, short
from .subject import NotSupported, data_pointer

__all__ = ["exchange", "exchange_task", "cell_text"]


def exchange(p, c, shape: tuple = (2, 3), dtype: str = "float32") -> dict:
    """One cell: ``{"works", "zero_copy", "values_ok"}`` (None where the
    result cannot be read), or ``{"works": False, "exc_type",
    "exc_message"}`` for a refusal."""
    if p is None or c is None:
        return {"works": False, "exc_type": None, "exc_message": "not a producer" if p is None else "no from_dlpack"}
    try:
        x = p.make(dtype, shape)
    except NotSupported:
        shape = (shape[0] * shape[1],) if len(shape) == 2 else shape
        x = p.make(dtype, shape)  # a 1-D-only library (pyarrow)
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
    want_ptr = data_pointer(x)
    cell = {"works": True}
    try:
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
    if "crashed" in cell and cell["crashed"].startswith("hung"):
        return "HANG"
    if "crashed" in cell:
        signal = cell["crashed"].rpartition("killed by ")[2] if "killed by" in cell["crashed"] else ""
        return f"CRASH ({signal})" if signal else "CRASH"
    if "worker_error" in cell:
        return "error"
    if not cell.get("works"):
        return f"refused ({cell.get('exc_type')})" if cell.get("exc_type") else "n/a"
    if cell.get("values_ok") is False:
        return "WRONG VALUES"
    if cell.get("zero_copy") is None:
        return "ok (?)"
    return "zero-copy" if cell["zero_copy"] else "copy"
