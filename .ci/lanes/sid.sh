#!/usr/bin/env bash
# A lane in the Debian sid root (tools/build_sid_root.sh, built or reused):
# the suite on an interpreter Debian sid ships (python3.14, python3.15,
# python3.14-dbg) with NumPy NUMPY_VERSION, run by .ci/lanes/version.sh
# inside the root on a copy of this tree; further arguments go to pytest.
# Usage: .ci/lanes/sid.sh 3.14 2.5   |   .ci/lanes/sid.sh 3.14-dbg 2.5 [pytest arguments]
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
start=$SECONDS
root=$(tools/build_sid_root.sh)
echo "sid root ready in $((SECONDS - start)) s: $root"
repo=$(sid_enter "$root")
sid_exec "$root" "$repo" bash .ci/lanes/version.sh "$@"
