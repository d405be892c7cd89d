#!/usr/bin/env bash
# The ecosystem lane: the libraries the main lane does not install, as CPU
# wheels (mlx[cpu], paddlepaddle, tensorflow-cpu, onnxruntime, mpi4py with
# MPICH's wheel, numkong, mlc-python, open3d), with NumPy 2.4 on Python 3.11:
# the checker on each of them
# (the report in the log; the gate on dlpack-ref only, since every one of them
# fails rules today), then the ecosystem tests, which run each library's
# rules, assert that none answers "error", and run every failure's
# reproduction in a fresh interpreter.
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(lane_python 3.11)"
lane_install "==2.4.*"
ECOSYSTEM=(mlx paddle tensorflow onnxruntime mpi4py numkong mlc open3d)
# open3d's wheel links libusb-1.0, which Debian packages and a bare machine lacks
if ! ldconfig -p | grep -q "libusb-1.0.so.0"; then
    apt-get install -y -qq libusb-1.0-0 >/dev/null
fi
pip install --quiet --only-binary=:all: "numpy==2.4.*" "mlx[cpu]" paddlepaddle tensorflow-cpu onnxruntime mpich mpi4py \
    numkong mlc-python open3d
pip check
python -c 'import importlib.metadata as m; print("lane:", *(f"{d} {m.version(d)}" for d in ("mlx", "paddlepaddle", "tensorflow-cpu", "onnxruntime", "mpi4py", "mpich", "numkong", "mlc-python", "open3d")))'

echo "== the checker on ${ECOSYSTEM[*]} =="
libraries=()
for lib in dlpack_ref "${ECOSYSTEM[@]}"; do libraries+=(--library "$lib"); done
python -m dlpack_ref check "${libraries[@]}" --fail-on dlpack_ref --format json > "$CI_LANE_DIR/ecosystem.json"
python -m dlpack_ref.conformance.ecosystem "$CI_LANE_DIR/ecosystem.json"

# The ecosystem tests only: the checker's other tests need none of these
# libraries and run in the main lane.
run_pytest "the ecosystem tests with ${ECOSYSTEM[*]}" tests/test_conformance_ecosystem.py
