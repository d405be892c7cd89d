#!/usr/bin/env bash
# The ecosystem lane: the known libraries the main lane does not install (those
# whose file in python/dlpack_ref/harness/libraries/ says lane="ecosystem"), as
# CPU wheels with NumPy 2.4 on Python 3.11: the checker on each of them
# (the report in the log; the gate on dlpack-ref only, since every one of them
# fails rules today), then the ecosystem tests, which run each library's
# rules, assert that none answers "error", and run every failure's
# reproduction in a fresh interpreter.
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(lane_python 3.11)"
lane_install "==2.4.*"
# The lane's libraries and their pip requirements, from their files (the
# registry reads them without importing any library)
names=$(python -m dlpack_ref.harness.registry --lane ecosystem --names)
requirements=$(python -m dlpack_ref.harness.registry --lane ecosystem --requirements)
mapfile -t ECOSYSTEM <<< "$names"
mapfile -t REQUIREMENTS <<< "$requirements"
# open3d's wheel links libusb-1.0, which Debian packages and a bare machine lacks
if ! ldconfig -p | grep -q "libusb-1.0.so.0"; then
    apt-get install -y -qq libusb-1.0-0 >/dev/null
fi
pip install --quiet --only-binary=:all: "numpy==2.4.*" "${REQUIREMENTS[@]}"
pip check
# the installed version of each requirement's distribution (its name without extras)
python -c 'import importlib.metadata as m, sys; print("lane:", *(f"{d} {m.version(d)}" for d in sys.argv[1:]))' \
    "${REQUIREMENTS[@]%%\[*}"

echo "== the checker on ${ECOSYSTEM[*]} =="
libraries=()
for lib in dlpack_ref "${ECOSYSTEM[@]}"; do libraries+=(--library "$lib"); done
python -m dlpack_ref check "${libraries[@]}" --fail-on dlpack_ref --format json > "$CI_LANE_DIR/ecosystem.json"
python -m dlpack_ref.conformance.ecosystem "$CI_LANE_DIR/ecosystem.json"

# The ecosystem tests only: the checker's other tests need none of these
# libraries and run in the main lane.
run_pytest "the ecosystem tests with ${ECOSYSTEM[*]}" tests/test_conformance_ecosystem.py
