#!/usr/bin/env bash
# The adoption lane: real libraries moved onto dlpack-ref's vendored header,
# from scratch. For each, adoption/run.sh downloads its pinned sdist, builds
# it as released and as adopted (against this checkout's dlpack-ref), runs
# its own tests and the checker on both, and fails on any regression: a test
# or a rule that the released build passes and the adopted one does not, or
# a test whose outcome changed without being listed in docs/adoption.md.
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
PYTHON=$(lane_python 3.11)
DLPACK_REF_ADOPTION_WORK="$CI_LANE_DIR/work"
export PYTHON DLPACK_REF_ADOPTION_WORK
rc=0
for name in mpi4py numkong; do
    start=$SECONDS
    echo "== adoption/run.sh $name =="
    bash adoption/run.sh "$name" || rc=1
    echo "-- adoption of $name: $((SECONDS - start)) s"
done
exit "$rc"
