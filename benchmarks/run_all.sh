#!/usr/bin/env bash
# Remake every committed result file of benchmarks/results/ (and the charts),
# then the figures of the documentation pages from them
# (tools/docs_figures.py). Run it on a quiet machine: the timings of a loaded
# one mean little, and each file records the load average of its run.
#
#   bash benchmarks/run_all.sh                      # every step, in this order
#   bash benchmarks/run_all.sh pool copies docs     # some steps
#
# Steps, in this order (durations on the 2-core machine, from its quick runs
# scaled to the full settings; about 25 minutes in all):
#   exchange   dlpack-ref bench --instructions: exchange.json, exchange.png
#              (pre-flight, latency and copies about 2 min; then the callgrind
#              counts of every latency call in one child interpreter, about 5 min)
#   copies     benchmarks/bench_copies.py: copies.json, copies.png (about 5 min)
#   pool       benchmarks/pool_threshold.py: pool_threshold.json (about 2 min)
#   adopter    benchmarks/callgrind_adopter.py: callgrind_adopter.json (builds
#              the five example adopters, then callgrind: about 3 min)
#   ecosystem  dlpack-ref check in each environment: ecosystem_1.json (about
#              2 min), ecosystem_2.json with ECO_PYTHON (about 5 min); each
#              report is committed without its reproductions (--slim)
#   docs       python tools/docs_figures.py, then --status (seconds)
#
# PYTHON (default python3): environment 1, with dlpack-ref installed (not
# editable), the main lane's known libraries (`python -m
# dlpack_ref.harness.registry --lane main --names`), ml_dtypes, matplotlib,
# Cython, pybind11, nanobind, CMake; valgrind on the machine, and an
# interpreter whose symbols callgrind finds (pyenv's).
# ECO_PYTHON: environment 2, the ecosystem lane's (dlpack-ref, NumPy and
# `pip install $(python -m dlpack_ref.harness.registry --lane ecosystem
# --requirements)`); without it ecosystem_2.json is left as it is.
# The timed steps (exchange, copies, pool) first wait, up to 5 minutes, for the
# 1-minute load average to fall under half the cores; RUN_ALL_FORCE=1 does not wait.
# RUN_ALL_QUICK=1: the scripts' quick modes (a smoke test of this script; the
# files it makes are marked quick, and the pages say so).
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=benchmarks/results
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(exchange copies pool adopter ecosystem docs)
failed=()
QUICK=()
LOOPS=()
if [ "${RUN_ALL_QUICK:-}" = 1 ]; then
    QUICK=(--quick)
    LOOPS=(--loops 50)
fi

quiet() {
    # Wait (up to 5 minutes) for the 1-minute load average to fall under half
    # the cores: the previous step's own load decays within a minute or two;
    # other work does not. RUN_ALL_FORCE=1 does not wait.
    "$PY" - <<'PY'
import os, sys, time
cores = os.cpu_count() or 1
for _ in range(21):
    load = os.getloadavg()[0]
    if load < cores / 2 or os.environ.get("RUN_ALL_FORCE") == "1":
        print(f"load average {load:.2f} on {cores} cores")
        sys.exit(0)
    print(f"load average {load:.2f} on {cores} cores: waiting for a quiet machine", flush=True)
    time.sleep(15)
sys.exit(1)
PY
}

step() {
    # step NAME TIMED(yes|no) COMMAND...: a timed step waits for a quiet machine
    local name=$1 timed=$2
    shift 2
    printf '\n=== %s: %s ===\n' "$name" "$*"
    if [ "$timed" = yes ] && ! quiet; then
        echo "the machine is busy: $name not run (RUN_ALL_FORCE=1 runs it anyway)"
        failed+=("$name (busy)")
        return
    fi
    local began=$SECONDS
    "$@"
    local status=$?
    echo "$name: exit status $status, $((SECONDS - began)) s"
    # dlpack-ref check exits 1 when a library fails a rule: its report is made all the same
    if [ "$status" -ne 0 ] && ! { [ "$name" = ecosystem_1 ] || [ "$name" = ecosystem_2 ]; } || [ "$status" -gt 1 ]; then
        failed+=("$name")
    fi
}

check_into() {
    # check_into FILE PYTHON ARGS...: a report written to FILE only when the run made one
    local file=$1 py=$2
    shift 2
    "$py" -m dlpack_ref check "$@" --format json > "$file.tmp"
    local status=$?
    if [ "$status" -le 1 ] && [ -s "$file.tmp" ]; then
        # committed without the reproductions (most of its size; --explain prints any of them)
        "$PY" tools/docs_figures.py --slim "$file.tmp" && mv "$file.tmp" "$file"
    else
        rm -f "$file.tmp"
    fi
    return "$status"
}

for s in "${STEPS[@]}"; do
    case $s in
    exchange)
        step exchange yes "$PY" -m dlpack_ref bench "${QUICK[@]}" --instructions --format markdown \
            --json "$RESULTS/exchange.json" --plot "$RESULTS/exchange.png" ;;
    copies)
        step copies yes "$PY" benchmarks/bench_copies.py "${QUICK[@]}" ;;
    pool)
        step pool yes "$PY" benchmarks/pool_threshold.py "${QUICK[@]}" ;;
    adopter)
        step adopter no "$PY" benchmarks/callgrind_adopter.py "${LOOPS[@]}" ;;
    ecosystem)
        step ecosystem_1 no check_into "$RESULTS/ecosystem_1.json" "$PY"
        if [ -n "${ECO_PYTHON:-}" ]; then
            # dlpack-ref, NumPy and the ecosystem lane's libraries, from their files
            if names=$("$ECO_PYTHON" -m dlpack_ref.harness.registry --lane ecosystem --names); then
                libraries=()
                for lib in dlpack_ref numpy $names; do libraries+=(--library "$lib"); done
                step ecosystem_2 no check_into "$RESULTS/ecosystem_2.json" "$ECO_PYTHON" "${libraries[@]}"
            else
                failed+=("ecosystem_2 (ECO_PYTHON has no dlpack-ref)")
            fi
        else
            echo "ECO_PYTHON is not set: $RESULTS/ecosystem_2.json left as it is"
        fi ;;
    docs)
        printf '\n=== docs: python tools/docs_figures.py ===\n'
        "$PY" tools/docs_figures.py || failed+=(docs)
        "$PY" tools/docs_figures.py --status ;;
    *)
        echo "unknown step: $s (steps: exchange copies pool adopter ecosystem docs)"
        exit 2 ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "not done: ${failed[*]}"
    exit 1
fi
echo "done: ${STEPS[*]}"
