#!/usr/bin/env bash
# A version lane: the suite on CPython PYTHON_VERSION (GIL build) with
# NumPy NUMPY_VERSION; any further arguments go to pytest (a selection).
# Usage: .ci/lanes/version.sh 3.12 2.2 [-m 'not harness']
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(lane_python "$1")"
lane_install "==$2.*"
run_pytest "Python $1, NumPy $2" "${@:3}"
