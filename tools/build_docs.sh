#!/usr/bin/env bash
# Build the documentation site (Sphinx + MyST on pydata-sphinx-theme,
# docs/conf.py, docs/_static/) with every warning an error.
#
#   tools/build_docs.sh [OUTDIR]      # default: build/docs/html
#
# Then `python tools/check_docs_render.py --site OUTDIR` checks that every
# page fits a 1280 px window in headless Chromium (CI runs both:
# .ci/lanes/build_checks.sh).
#
# Installs the `docs` extra's requirements (pyproject.toml) into the current
# environment from PyPI. The API reference is autodoc of the installed
# dlpack-ref, so install the package first (`pip install .`); the build runs
# from outside the source tree so that the installed copy is the one read.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${1:-$ROOT/build/docs/html}"
START=$SECONDS

REQS="$(mktemp)"
trap 'rm -f "$REQS"' EXIT
"$PY" "$ROOT/tools/pyproject_requires.py" docs > "$REQS"
"$PY" -m pip install -q -r "$REQS"

cd "${TMPDIR:-/tmp}"
"$PY" -c "import dlpack_ref._dlpack_ref" || {
    echo "build_docs.sh: install dlpack-ref first (pip install .): the API reference reads the installed package" >&2
    exit 2
}
"$PY" -m sphinx -E -W --keep-going -q -b html -d "$OUT/../doctrees" "$ROOT/docs" "$OUT"
echo "== docs built in $((SECONDS - START)) s: $OUT/index.html"
