#!/usr/bin/env bash
# The GPU check, end to end, for a machine with a GPU and no network whose
# `python3` already holds cuda-bindings, Cython, scikit-build-core, CMake,
# ninja, pytest, hypothesis (and CuPy, PyTorch, JAX for interop):
#
#   1. build dlpack-ref with that python3 as it is: pip install
#      --no-build-isolation --no-deps --no-index --target DIR (nothing is
#      downloaded, nothing is installed into python3's environment), DIR
#      put first on PYTHONPATH;
#   2. fail unless dlpack_ref.cuda finds the driver and a device;
#   3. run the tests marked `cuda` (CuPy / PyTorch / JAX interop included);
#      fail when they fail, and when every one of them skipped;
#   4. run the conformance checker's CUDA rules (`dlpack-ref check --rules
#      'cuda.*'`) against dlpack-ref and every one of CuPy, PyTorch and JAX
#      that is installed; fail unless dlpack-ref passes every one (the other
#      libraries' failures are findings, reported, not a failed step);
#   5. run the GPU benchmarks (bandwidth, synchronized exchange).
#
# Writes gpu_check.log, pytest_cuda.xml, pytest_cuda.log, conformance_cuda.json,
# bench_gpu.json and gpu_check.json (the summary) into $OUT when it is set,
# else results/.
# Budget: under 5 minutes. Exit status 0 only when every step passed.
#
#   bash benchmarks/gpu_check.sh               # on the GPU machine
#   bash benchmarks/gpu_check.sh --simulator   # anywhere: on the simulated driver
#   PYTHON=/path/to/python bash benchmarks/gpu_check.sh   # another interpreter
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
SIM=0
[ "${1:-}" = "--simulator" ] && SIM=1
[ "${DLPACK_REF_CUDA_SIM:-}" = "1" ] && SIM=1
RESULTS=${OUT:-$ROOT/results}
mkdir -p "$RESULTS" || exit 1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG="$RESULTS/gpu_check.log"
: > "$LOG"
failed=()

step() { printf '\n=== %s ===\n' "$*" | tee -a "$LOG"; }
fail() { echo "FAILED: $*" | tee -a "$LOG"; failed+=("$1"); }
summary() {
    local status=$1
    "$PY" - "$RESULTS" "$status" "$SIM" "${failed[@]}" <<'PY'
import json, os, sys
results, status, sim, failed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
counts = {}
xml = os.path.join(results, "pytest_cuda.xml")
if os.path.exists(xml):
    import xml.etree.ElementTree as ET
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
conformance = {}
report = os.path.join(results, "conformance_cuda.json")
if os.path.exists(report):
    try:
        with open(report) as f:
            conformance = {lib["name"]: lib["summary"] for lib in json.load(f)["libraries"]}
    except (ValueError, KeyError):
        conformance = {"unreadable": True}
with open(os.path.join(results, "gpu_check.json"), "w") as f:
    json.dump({"status": status, "driver": "simulator" if sim else "real", "failed_steps": failed,
               "cuda_tests": counts, "conformance_cuda": conformance}, f, indent=2)
PY
    step "done: status $status${failed:+ (failed: ${failed[*]})}"
    exit "$status"
}

if [ "$SIM" = 1 ]; then
    export DLPACK_REF_CUDA_SIM=1          # tests/conftest.py loads the simulator
    RUN=("$PY" "$ROOT/tests/support/cudasim.py" --)
else
    export DLPACK_REF_CUDA_SIM=0          # never the simulator on the GPU machine
    RUN=("$PY")
fi

step "environment"
{
    echo "python: $(command -v "$PY") ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
    [ "$SIM" = 1 ] && echo "driver: the simulator of tests/support (DLPACK_REF_CUDA_SIM=1)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi: not found"
    "$PY" - <<'PY'
import importlib
for m in ("cuda.bindings", "cupy", "torch", "jax", "Cython", "scikit_build_core", "numpy", "pytest"):
    try:
        mod = importlib.import_module(m)
        print(f"{m:18} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"{m:18} missing ({type(e).__name__})")
PY
} 2>&1 | tee -a "$LOG"

step "build: pip install --no-build-isolation --no-deps --no-index --target"
SITE="$WORK/site"
if ! timeout 200 "$PY" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir -q \
        --target "$SITE" -C build-dir="$WORK/build" "$ROOT" >>"$LOG" 2>&1; then
    tail -30 "$LOG"
    fail build
    summary 1
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
echo "built into $SITE" | tee -a "$LOG"

step "CUDA driver and device"
cat > "$WORK/check_driver.py" <<'PY'
import dlpack_ref, dlpack_ref.cuda as cuda
from dlpack_ref._cuda_driver import runtime
print("dlpack_ref from", dlpack_ref.__file__)
try:
    cuda.require()
except cuda.CUDAUnavailableError as exc:
    raise SystemExit(f"dlpack_ref.cuda cannot use CUDA here: {exc}")
rt = runtime()
print(f"driver loaded, {rt.device_count} device(s)")
import numpy as np
a = dlpack_ref.asarray(np.arange(4.0), device="cuda:0")
assert np.from_dlpack(a.to_device("cpu")).tolist() == [0.0, 1.0, 2.0, 3.0]
print("round trip through cuda:0: ok")
PY
if ! (cd "$WORK" && timeout 60 "${RUN[@]}" "$WORK/check_driver.py") 2>&1 | tee -a "$LOG"; then
    fail driver
    summary 1
fi

step "pytest -m cuda"
(cd "$WORK" && timeout 150 "$PY" -m pytest -p no:cacheprovider -m cuda -q -rs \
    --junitxml "$RESULTS/pytest_cuda.xml" "$ROOT/tests") 2>&1 | tee "$RESULTS/pytest_cuda.log" | tee -a "$LOG" | tail -40
[ "${PIPESTATUS[0]}" = 0 ] || fail tests
if ! "$PY" - "$RESULTS/pytest_cuda.xml" <<'PY' 2>&1 | tee -a "$LOG"; then
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root if root.tag == "testsuite" else root.find("testsuite")
tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
print(f"cuda tests: {tests}, skipped: {skipped}")
if tests == 0 or skipped == tests:
    raise SystemExit("every cuda test was skipped: nothing ran on CUDA")
PY
    fail all-skipped
fi

step "conformance checker: CUDA rules"
CHECK_ENV=()
if [ "$SIM" = 1 ]; then
    # the checker's workers are fresh interpreters: preload the simulator into
    # them (its SONAME answers their dlopen of libcuda.so.1)
    SIMLIB=$(cd "$ROOT/tests/support" && "$PY" -c 'import cudasim; print(cudasim.build())') || fail conformance
    CHECK_ENV=(env "LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD }$SIMLIB")
fi
LIBS=(--library dlpack_ref)
for lib in $("$PY" -c 'import importlib.util as u
print(" ".join(m for m in ("cupy", "torch", "jax") if u.find_spec(m)))'); do
    LIBS+=(--library "$lib")
done
echo "checking: ${LIBS[*]}" | tee -a "$LOG"
(cd "$WORK" && timeout 120 "${CHECK_ENV[@]}" "$PY" -m dlpack_ref check "${LIBS[@]}" --rules 'cuda.*' --no-matrix \
    --fail-on dlpack_ref --format json > "$RESULTS/conformance_cuda.json") 2>>"$LOG"
check_status=$?
if ! "$PY" - "$RESULTS/conformance_cuda.json" "$check_status" <<'PY' 2>&1 | tee -a "$LOG"; then
import json, sys
path, status = sys.argv[1], int(sys.argv[2])
try:
    with open(path) as f:
        report = json.load(f)
except ValueError as e:
    raise SystemExit(f"no conformance report (dlpack-ref check exited {status}): {e}")
bad = []
for lib in report["libraries"]:
    if not lib["checked"]:
        print(f"{lib['name']}: not checked ({lib['note']})")
        bad += ["dlpack_ref not checked"] if lib["name"] == "dlpack_ref" else []
        continue
    s = lib["summary"]
    print(f"{lib['name']} {lib['version']}: {s['pass']} pass, {s['fail']} fail, {s['error']} error, "
          f"{s['not supported']} not supported")
    for r in lib["results"]:
        if r["status"] != "pass":
            print(f"  [{r['status']}] {r['check']}: {r['detail'][:160]}"
                  + (f" ({r['exception_type']}: {(r['exception_message'] or '')[:120]})" if r["exception_type"] else ""))
            if lib["name"] == "dlpack_ref":
                bad.append(r["check"])
if bad or status not in (0, 1) or not report["libraries"]:
    raise SystemExit(f"dlpack-ref must pass every CUDA rule here; not passed: {bad} (check exited {status})")
PY
    fail conformance
fi

step "GPU benchmarks"
BENCH=(--quick --json "$RESULTS/bench_gpu.json")
[ "$SIM" = 1 ] && BENCH+=(--simulator)
(cd "$WORK" && timeout 90 "$PY" "$ROOT/benchmarks/bench_gpu.py" "${BENCH[@]}") 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || fail benchmarks

[ ${#failed[@]} -eq 0 ] && summary 0
summary 1
