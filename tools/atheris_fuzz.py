"""Coverage-guided fuzzing of the consumer with atheris (libFuzzer).

    pip install atheris
    python tools/atheris_fuzz.py -atheris_runs=200000          # a fixed count
    python tools/atheris_fuzz.py -max_total_time=600 corpus/   # a time budget

Each input is decoded into the fields of a hand-built capsule (the same
fields as tests/test_fuzz.py draws) and checked with the same properties:
no crash, the deleter exactly once, only BufferError for a bad capsule, and
an accepted capsule described exactly. A failed property raises, which
atheris reports with the input that caused it. Coverage guidance sees the
Python layers; the Cython core is a compiled extension without libFuzzer
instrumentation, so inside it the search is blind (random, not guided).
"""

from __future__ import annotations

import pathlib
import sys

import atheris

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fuzz_long import load_fuzz_module  # noqa: E402

with atheris.instrument_imports(include=["dlpack_ref"]):
    import dlpack_ref  # noqa: F401
fuzz = load_fuzz_module()
# The oracle and the checks branch on what the consumer did: coverage there
# guides the search towards new kinds of capsules and outcomes.
for _name in ("expected_array", "check_capsule", "_describe", "_check_reexport"):
    setattr(fuzz, _name, atheris.instrument_func(getattr(fuzz, _name)))

VALID_DTYPES = sorted(fuzz.VALID_DTYPES)
NAMES = [None, None, None, None, b"used_dltensor_versioned", b"used_dltensor", b"", b"DLTENSOR", "null"]


def decode(data: bytes):
    """CapsuleFactory.make keywords and a capsule name from fuzzer bytes.
    The first choice of each field picks a valid value or a raw one, so that
    valid capsules and capsules with a few bad fields are both common."""
    fdp = atheris.FuzzedDataProvider(data)

    def bad():
        return fdp.ConsumeIntInRange(0, 7) == 0

    ndim = fdp.ConsumeIntInRange(0, 5)
    shape = tuple(fdp.ConsumeIntInRange(0, 4) if not bad() else fdp.ConsumeInt(8) for _ in range(ndim))
    kw = {
        "shape": shape,
        "dtype": (VALID_DTYPES[fdp.ConsumeIntInRange(0, len(VALID_DTYPES) - 1)] if not bad()
                  else (fdp.ConsumeIntInRange(0, 255), fdp.ConsumeIntInRange(0, 255), fdp.ConsumeIntInRange(0, 65535))),
        "versioned": not bad(),
        "device": ((fdp.PickValueInList([1, 1, 2, 3, 13]), fdp.ConsumeIntInRange(0, 1)) if not bad()
                   else (fdp.ConsumeInt(4), fdp.ConsumeInt(4))),
        "byte_offset": fdp.PickValueInList([0, 8, 256]) if not bad() else fdp.ConsumeIntInRange(0, 2**64 - 1),
    }
    kw["version"] = (1, fdp.ConsumeIntInRange(0, 5)) if not bad() else (fdp.ConsumeIntInRange(0, 2**32 - 1),
                                                                        fdp.ConsumeIntInRange(0, 2**32 - 1))
    kw["flags"] = fdp.ConsumeIntInRange(0, 7) if not bad() else fdp.ConsumeIntInRange(0, 2**64 - 1)
    if not kw["versioned"]:
        kw["version"], kw["flags"] = (1, 3), 0
    strides = fdp.ConsumeIntInRange(0, 3)
    if strides == 1:
        kw["strides"] = "null"
    elif strides == 2:
        kw["strides"] = tuple(fdp.ConsumeIntInRange(-6, 6) if not bad() else fdp.ConsumeInt(8) for _ in range(ndim))
    if bad() and bad():
        kw["shape_null"] = True
    if bad() and bad():
        kw["ndim"] = fdp.ConsumeInt(4)
    if bad():
        kw["data"] = fdp.PickValueInList([None, 0x1001])
    if bad() and bad():
        kw["deleter"] = False
    name = fdp.PickValueInList(NAMES)
    return kw, name


def test_one_input(data: bytes) -> None:
    kw, name = decode(data)
    fuzz.check_capsule(kw, name)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
