#!/usr/bin/env bash
# The PyPy lane, in the Debian sid root (tools/build_sid_root.sh, built or
# reused), which ships PyPy (pypy3, Python 3.11): dlpack-ref built on PyPy's
# C API emulation, and the vendored header's adopter exchanging with it.
# NumPy has no wheel for this PyPy (its ABI tag is pp80, NumPy's pp73) and
# builds from source for longer than the lane may take, so the lane runs
# what needs no NumPy: tests/test_limited_api.py. The rest of the suite is
# not run here: dlpack_ref.testing reaches the C API through
# ctypes.pythonapi, which PyPy does not have.
# Usage: .ci/lanes/pypy.sh [pytest arguments]
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
start=$SECONDS
root=$(tools/build_sid_root.sh)
echo "sid root ready in $((SECONDS - start)) s: $root"
# Not in the root's own package list, so that adding this lane does not
# rebuild a root other lanes reuse; apt inside the root adds it once.
if ! chroot "$root" pypy3 --version >/dev/null 2>&1; then
    chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q update
    chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends \
        pypy3 pypy3-dev pypy3-venv
fi
repo=$(sid_enter "$root")
sid_exec "$root" "$repo" bash -c '
    set -euo pipefail
    . .ci/lane_lib.sh
    lane_venv pypy3
    # LANE_TEST_DEPS less those that need NumPy (ml_dtypes, array-api-strict).
    deps=()
    for dep in "${LANE_TEST_DEPS[@]}"; do
        [[ $dep == ml_dtypes || $dep == array-api-strict ]] || deps+=("$dep")
    done
    pip install --quiet --only-binary=:all: "${deps[@]}"
    pip install --quiet --no-build-isolation --no-deps .
    python -c "import sys, dlpack_ref; print(\"lane:\", sys.version.replace(chr(10), \" \"))"
    run_pytest PyPy "$@"' pypy-lane "$@"
