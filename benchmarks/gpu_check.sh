#!/usr/bin/env bash
# The GPU check, end to end, on a single-GPU machine with CuPy, PyTorch, JAX,
# Cython, CMake and ninja preinstalled and no network: build dlpack-ref with
# what is present (no build isolation, nothing downloaded), run the tests
# marked `cuda`, then the GPU benchmarks. Prints everything; when $OUT is
# set, writes pytest's JUnit XML, the benchmark JSON and a summary there.
# Budget: under 5 minutes (the build ~1 min, tests ~1 min, benchmarks ~1 min).
#
#   bash benchmarks/gpu_check.sh            # from the repository root
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
OUT_DIR=${OUT:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0

step() { printf '\n=== %s ===\n' "$*"; }

step "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi not found"
$PY - <<'PY'
import importlib
for m in ("cuda.bindings", "cupy", "torch", "jax", "Cython", "numpy"):
    try:
        mod = importlib.import_module(m)
        print(f"{m:14} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"{m:14} missing ({type(e).__name__})")
PY

step "build (pip install --no-build-isolation --no-deps .)"
# A private virtual environment that sees the preinstalled packages, so the
# system site-packages are left as they are.
$PY -m venv --system-site-packages "$WORK/venv" || exit 1
VPY="$WORK/venv/bin/python"
if "$VPY" -c "import scikit_build_core" 2>/dev/null; then
    timeout 240 "$VPY" -m pip install --no-build-isolation --no-deps --no-index -q \
        -C build-dir="$WORK/build" "$ROOT" || { echo "BUILD FAILED"; exit 1; }
else
    # No scikit-build-core here: the same CMake project, driven directly,
    # installed into the venv's site-packages next to the Python sources.
    echo "scikit-build-core not present: building with cmake + ninja directly"
    SITE=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    cp -r "$ROOT/python/dlpack_ref" "$SITE/" || exit 1
    timeout 240 cmake -S "$ROOT" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DSKBUILD_PROJECT_NAME=dlpack_ref -DPython_EXECUTABLE="$VPY" >/dev/null \
        && timeout 240 cmake --build "$WORK/build" \
        && cmake --install "$WORK/build" --prefix "$SITE" >/dev/null \
        || { echo "BUILD FAILED"; exit 1; }
fi

step "pytest -m cuda"
JUNIT=()
[ -n "$OUT_DIR" ] && JUNIT=(--junitxml "$OUT_DIR/pytest_cuda.xml")
(cd "$WORK" && timeout 150 "$VPY" -m pytest -p no:cacheprovider -m cuda -q -rs "${JUNIT[@]}" \
    "$ROOT/tests") || status=1

step "GPU benchmarks"
BENCH_JSON=()
[ -n "$OUT_DIR" ] && BENCH_JSON=(--json "$OUT_DIR/bench_gpu.json")
(cd "$WORK" && timeout 120 "$VPY" "$ROOT/benchmarks/bench_gpu.py" --quick "${BENCH_JSON[@]}") || status=1

if [ -n "$OUT_DIR" ]; then
    printf '{"status": %d}\n' "$status" > "$OUT_DIR/gpu_check.json"
fi
step "done (status $status)"
exit $status
