# Helpers for the lane scripts of .ci/run (sourced by them, not run).
# A lane script runs in the repository root with CI_LANE_DIR set to its own
# scratch folder; it exits non-zero when the lane fails.

# Test dependencies every extra lane installs besides its NumPy (wheels only:
# a missing wheel must fail the lane, not start a source build). The main
# lane's known libraries (`python -m dlpack_ref.harness.registry --lane main
# --names`) are the main lane's only: their tests skip here.
# ml_dtypes is whatever the lane's Python gets (0.5.4 on 3.13t, which has
# no 0.7 wheel; tests/support/e8m0.py knows where the versions differ).
LANE_TEST_DEPS=(pytest hypothesis ml_dtypes array-api-strict pytest-run-parallel
                jsonschema cython scikit-build-core cmake ninja)

# lane_venv PYTHON: create and activate a fresh virtual environment of PYTHON.
lane_venv() {
    "$1" -m venv --clear "$CI_LANE_DIR/venv"
    # shellcheck disable=SC1091
    . "$CI_LANE_DIR/venv/bin/activate"
    python -m pip install --quiet --upgrade pip
}

# lane_python VERSION: the full path of a pyenv-installed CPython VERSION
# (e.g. 3.12), else of pythonVERSION on PATH (python3.14-dbg for 3.14-dbg).
lane_python() {
    local root=${PYENV_ROOT:-$HOME/.pyenv} found
    found=$(ls -d "$root"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n "$found" ]] || found=$(command -v "python$1" || true)
    [[ -n "$found" ]] || { echo "no Python $1 (pyenv versions / PATH)" >&2; return 1; }
    echo "$found"
}

# lane_install NUMPY_SPEC: the test dependencies with that NumPy, then
# dlpack-ref itself, built against them in the lane's own build folder:
# lanes of one wheel tag (cp311: main, ecosystem, sanitizer, adoption) run
# at once, and two builds in the tree's build/TAG break each other.
lane_install() {
    pip install --quiet --only-binary=:all: "numpy$1" "${LANE_TEST_DEPS[@]}"
    pip install --quiet --no-build-isolation --no-deps -C build-dir="$CI_LANE_DIR/build" .
    python -c 'import sys, numpy, dlpack_ref; print("lane:", sys.version.split()[0], "(debug build)" * hasattr(sys, "gettotalrefcount"), "numpy", numpy.__version__)'
}

# run_pytest LABEL ARGS...: pytest ARGS; exit 5 (nothing collected) is a
# failure too: a lane that tests nothing must not pass.
run_pytest() {
    local label=$1 rc=0
    shift
    echo "== pytest ($label): $* =="
    python -m pytest -ra -p no:cacheprovider "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "pytest ($label) collected no tests (exit 5): the lane tested nothing"
        return 1
    fi
    return "$rc"
}

# sid_enter ROOT: copy this tree (tracked and untracked, not ignored files)
# into ROOT/ci/LANE/repo, a fresh copy per lane, and print that path as
# seen from inside the root. The lanes never share a build folder.
sid_enter() {
    local root=$1 inside
    inside=/ci/$(basename "$CI_LANE_DIR")
    rm -rf "${root:?}$inside" && mkdir -p "$root$inside/repo"
    git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$root$inside/repo"
    echo "$inside/repo"
}

# sid_exec ROOT DIR COMMAND...: COMMAND in DIR inside the root, with the
# host's environment (pip's and the CA settings) but the root's PATH, and
# CI_LANE_DIR inside the root; the host's pip find-links folder is not there.
sid_exec() {
    local root=$1 dir=$2
    shift 2
    chroot "$root" env -u PIP_FIND_LINKS -u TMPDIR HOME=/root \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        CI_LANE_DIR="$(dirname "$dir")" bash -c 'cd "$0" && exec "$@"' "$dir" "$@"
}
