#!/usr/bin/env bash
# A version lane: the whole suite on CPython PYTHON_VERSION (GIL build) with
# NumPy NUMPY_VERSION.  Usage: .ci/lanes/version.sh 3.12 2.2
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(lane_python "$1")"
lane_install "==$2.*"
run_pytest "Python $1, NumPy $2"
