#!/usr/bin/env bash
# The sanitizer lane: tools/sanitize.sh (the core built with ASan and UBSan,
# UBSan fatal, every report read) over the suite (any arguments: a pytest
# selection), on the machine's
# python3 with torch, so that the exchange-API paths run instrumented too,
# and with NumPy 2.1, the oldest NumPy dlpack-ref supports (the one lane
# that keeps it: every other lane has a newer one). jax is left out: its import under ASan is slow and its
# tests exercise no C path of dlpack-ref that numpy and torch do not.
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(command -v python3)"
pip install --quiet torch==2.13.0
lane_install "==2.1.*"
PYTHON=python DLREF_ASAN_DIR="$CI_LANE_DIR/asan" bash tools/sanitize.sh "$@"
