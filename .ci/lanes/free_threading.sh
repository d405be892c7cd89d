#!/usr/bin/env bash
# The free-threaded lane: python3.13t (built or reused by
# tools/build_python_ft.sh), NumPy 2.4 (the newest with cp313t wheels: 2.5
# publishes none for 3.13t); the
# import must leave the GIL off without a warning; the suite (any arguments:
# a pytest selection) with the stress test at full length; then the
# thread-sensitive tests again, each test run by 8 threads at once
# (pytest-run-parallel).
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
start=$SECONDS
python_ft=$(tools/build_python_ft.sh)
echo "python3.13t ready in $((SECONDS - start)) s: $python_ft"
lane_venv "$python_ft"
lane_install "==2.4.*"
# cuda-bindings, so that the simulated-driver tests (stream ordering, the
# pending-work records under 8 threads) run here without the GIL too.
pip install --quiet --only-binary=:all: cuda-bindings
env -u PYTHON_GIL python -W error -c \
    'import sys, dlpack_ref; assert not sys._is_gil_enabled(), "import re-enabled the GIL"; print("GIL disabled after import")'
DLPACK_REF_STRESS_ROUNDS=${DLPACK_REF_STRESS_ROUNDS:-400} run_pytest "3.13t, the suite" "$@"
# Exports, imports, capsule consumption, deleters, exchange API,
# indexing/views, stream contexts (test_cuda_logic's fake driver), and the
# CUDA stream model on the simulated driver (test_cuda_sim).
run_pytest "3.13t, 8 threads per test" --parallel-threads=8 \
    tests/test_threads.py tests/test_producer.py tests/test_capsules.py tests/test_exchange_api.py \
    tests/test_array.py tests/test_devices.py tests/test_dtypes.py tests/test_cuda_logic.py \
    tests/test_cuda_sim.py
