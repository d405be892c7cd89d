"""What a library did, in words and values: an exception's name, a short
message, values read the way the array API allows, values compared NaN-aware.
Pure Python (the reproductions carry these definitions as they are)."""

from __future__ import annotations

__all__ = ["exc_name", "short", "same_values", "elementwise_values"]


def exc_name(exc: BaseException) -> str:
    """An exception's type as a reader looks it up: ``BufferError``,
    ``torch.AcceleratorError``."""
    t = type(exc)
    return t.__name__ if t.__module__ in ("builtins", None) else f"{t.__module__}.{t.__qualname__}"


def short(message: object, limit: int = 300) -> str:
    """``message`` on one line, cut to ``limit`` characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def same_values(a, b) -> bool:
    """Nested values equal, NaN equal to NaN."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return False
    try:
        return a == b or (a != a and b != b)
    except Exception:
        return False


def _python_scalar(x):
    """A 0-d array as a Python scalar, by the conversion its dtype calls for."""
    kind = str(getattr(x, "dtype", ""))
    if "bool" in kind:
        return bool(x)
    if "complex" in kind:
        return complex(x)
    if "int" in kind:
        return int(x)
    return float(x)


def elementwise_values(x):
    """Nested lists of an array's values read by indexing, as the array API
    allows (``x.shape``, ``x[i, j]`` and ``bool``/``int``/``float``/``complex``
    of a 0-d array); no ``tolist`` needed."""
    shape = tuple(x.shape)

    def at(prefix):
        if len(prefix) == len(shape):
            return _python_scalar(x[prefix])
        return [at(prefix + (i,)) for i in range(shape[len(prefix)])]
    return at(())
