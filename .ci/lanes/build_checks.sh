#!/usr/bin/env bash
# The build lane: the core under GCC 14's (and clang's) error flags, a
# manylinux wheel installed into a fresh venv, and the documentation site
# built with warnings as errors. Each tool script states what it checks.
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(lane_python 3.11)"
pip install --quiet .
echo "== strict compiler flags (gcc, clang) =="
bash tools/strict_build.sh
echo "== manylinux wheel in a fresh venv =="
bash tools/manylinux_wheel.sh "$CI_LANE_DIR/wheelhouse"
echo "== documentation site =="
bash tools/build_docs.sh "$CI_LANE_DIR/docs"
echo "build checks ok: strict flags, wheel, docs"
