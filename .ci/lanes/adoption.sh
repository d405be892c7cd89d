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
# The package index's "Location ... is ignored" warnings (the machine's pip
# configuration) are dropped; each library's verdict lines are repeated at
# the end, where the tail of the log shows them.
rc=0
verdicts=$CI_LANE_DIR/verdicts.txt
: > "$verdicts"
for name in mpi4py numkong; do
    start=$SECONDS
    echo "== adoption/run.sh $name =="
    set +e
    bash adoption/run.sh "$name" 2>&1 | grep --line-buffered -Ev "^WARNING: Location '.*' is ignored" | tee "$verdicts.$name"
    lib_rc=${PIPESTATUS[0]}
    set -e
    [[ $lib_rc -eq 0 ]] || rc=1
    echo "-- adoption of $name: $((SECONDS - start)) s, exit $lib_rc"
    grep -E "^$name (released|adopted)|^checker $name|REGRESSION|^  checker:|adoption: " "$verdicts.$name" \
        >> "$verdicts" || true
    echo "$name: exit $lib_rc in $((SECONDS - start)) s" >> "$verdicts"
done
echo "== adoption verdicts =="
cat "$verdicts"
exit "$rc"
