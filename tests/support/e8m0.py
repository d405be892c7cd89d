"""The one place that knows where the float8_e8m0fnu oracles part from the
reference rule (docs/semantics.md, "Conversions").

dlpack-ref rounds to the nearest power of two by value in every binade, as
ml_dtypes 0.7 does. ml_dtypes before 0.7 and PyTorch 2.13 round a float32
subnormal by its top mantissa bit, so they send (2**-127, 1.5 * 2**-127)
to 2**-126 (code 1) where the nearest is 2**-127 (code 0). Tests that
compare against such an oracle correct that band, and only that band."""

from __future__ import annotations

import math

import numpy as np

#: The open band where the older oracles give code 1 and the reference code 0.
BAND = (2.0 ** -127, 1.5 * 2.0 ** -127)


def ml_dtypes_rounds_by_value(ml_dtypes) -> bool:
    """True from ml_dtypes 0.7 on, whose rule is the reference's."""
    major, minor = (int(p) for p in ml_dtypes.__version__.split(".")[:2])
    return (major, minor) >= (0, 7)


def in_band(values) -> np.ndarray:
    """Which values (any real dtype; rounded to float32 first, as the
    conversion does) fall in the band."""
    with np.errstate(all="ignore"):
        v = np.asarray(values).astype(np.float64).astype(np.float32).astype(np.float64)
    return (v > BAND[0]) & (v < BAND[1])


def corrected(values, codes) -> list[int]:
    """The codes an older oracle gave for ``values``, with the band set to
    the reference's code 0."""
    band = in_band(values)
    return [0 if b else int(c) for b, c in zip(band.tolist(), list(codes))]


def is_band_value(value: float) -> bool:
    return math.isfinite(value) and BAND[0] < float(np.float32(value)) < BAND[1]
