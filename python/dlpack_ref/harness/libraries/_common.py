"""What the library files share: how a file says which library it is
(:class:`Known`), the values every array holds (0, 1, 2, ... as the dtype
allows), nested by shape, and NumPy arrays of them (the source of the
libraries whose arrays are made from NumPy's)."""

from __future__ import annotations

import dataclasses
import math

from ..subject import NotSupported

@dataclasses.dataclass(frozen=True)
class Known:
    """Which library a file of :mod:`dlpack_ref.harness.libraries` adapts:
    its ``name`` on the command line and in reports, the ``module`` an
    import finds (looked up without importing it), the ``distribution``
    whose version reports give, its ``order`` in reports, and where CI
    installs it: the ``lane`` (``"main"``, the main lane's environment from the
    package's extras; ``"ecosystem"``, the ecosystem lane's, a second
    environment; None, no CI lane: it needs a CUDA device) and, for the
    ecosystem lane, the pip ``requirements`` that install it there (default:
    its distribution). The lane scripts, ``benchmarks/run_all.sh``, the docs'
    generated lists and the tests read these (``python -m
    dlpack_ref.harness.registry``), so a library's name is written here only."""

    name: str
    module: str
    distribution: str
    order: int
    lane: str | None = "main"
    requirements: tuple[str, ...] = ()

    def __post_init__(self):
        if self.lane not in ("main", "ecosystem", None):
            raise ValueError(f"{self.name}: lane {self.lane!r} is not 'main', 'ecosystem' or None")
        if not self.requirements:
            object.__setattr__(self, "requirements", (self.distribution,))


#: dtype names NumPy has without ml_dtypes.
NUMPY_DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                          "float16", "float32", "float64", "complex64", "complex128"])


def arange_values(n: int, dtype: str) -> list:
    """``n`` values every dtype named ``dtype`` holds exactly."""
    if dtype == "bool":
        return [bool(i % 2) for i in range(n)]
    if dtype.startswith(("float4_", "float6_")):  # not float64
        return [float(i % 4) / 2 for i in range(n)]
    if dtype.startswith("float8_e8m0"):
        return [float(2 ** (i % 4)) for i in range(n)]
    if dtype.startswith("complex"):
        return [complex(i, -i) for i in range(n)]
    return list(range(n))


def nested(flat: list, shape: tuple):
    """``flat`` as nested lists of ``shape`` (the one value for ``()``)."""
    if not shape:
        return flat[0]
    step = len(flat) // shape[0] if shape[0] else 0
    return [nested(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def own_values(x):
    """The library's own reading, for libraries whose arrays have ``tolist``."""
    return x.tolist()


def numpy_dtype(dtype: str):
    """NumPy's dtype of a dtype name (ml_dtypes' for the narrow floats)."""
    import numpy as np
    if dtype in NUMPY_DTYPES:
        return np.dtype(dtype)
    import ml_dtypes
    if not hasattr(ml_dtypes, dtype):
        raise NotSupported(f"neither NumPy nor ml_dtypes has {dtype}")
    return np.dtype(getattr(ml_dtypes, dtype))


def numpy_array(dtype: str, shape: tuple, readonly: bool = False):
    """A NumPy array of ``dtype`` and ``shape`` holding ``arange_values``."""
    import numpy as np
    a = np.array(arange_values(math.prod(shape), dtype)).astype(numpy_dtype(dtype)).reshape(shape)
    if readonly:
        a.flags.writeable = False
    return a


def made_from_numpy(wrap, library: str, dtypes=None):
    """The factory of a library whose arrays are made from NumPy's by
    ``wrap`` (a function of a NumPy array): none read-only, and only of
    ``dtypes`` when given."""
    def make(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported(f"{library} has no read-only arrays")
        if dtypes is not None and dtype not in dtypes:
            raise NotSupported(f"{library} makes no {dtype} arrays from NumPy arrays")
        return wrap(numpy_array(dtype, shape))
    return make
