#!/usr/bin/env bash
# adoption/numkong/run.sh: numkong's DLPack producer (its __dlpack__ and
# __dlpack_device__ in python/dlpack_interop.c) moved onto dlpack-ref's
# vendored header, proven three ways against numkong as released:
#   - numkong's own tests pass on both builds, but for the changes of outcome
#     that docs/adoption.md lists (section "numkong"), each with its rule;
#   - `python -m dlpack_ref check --library numkong`: no rule that passes on
#     the released build fails on the adopted one, and every rule that fails
#     there passes here or is not supported with a reason;
#   - (the cost is a benchmark: benchmarks/adoption_producer.py).
# The sdist is downloaded at run time; its source is never committed. The
# adoption is producer.patch (3 files of numkong's) plus the three vendored
# headers copied beside numkong's own (dlpack.h, dlpack_ref.h,
# dlpack_ref_tables.h, from dlpack_ref.get_include() of this checkout).
# Everything is built under $DLPACK_REF_ADOPTION_WORK/numkong (default .adoption-work/
# at the repository root, gitignored); a second run reuses the downloads.
# Exits non-zero on any regression.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=7.8.6
work=${DLPACK_REF_ADOPTION_WORK:-$repo/.adoption-work}/numkong
python=${PYTHON:-python3}
mkdir -p "$work"
cd "$work"
started=$SECONDS

step() { printf '[numkong %4ds] %s\n' $((SECONDS - started)) "$*"; }

# The sdist; and once, in the venv deps/ that both builds see through a .pth
# file: dlpack-ref built from this checkout, and what numkong's tests use
# (its test group: pytest, pytest-repeat, tabulate; NumPy and ml_dtypes; the
# DLPack partners its tests exchange with that install here: PyTorch, JAX,
# PyArrow). TEST_EXTRAS replaces the partners (empty: none).
extras=${TEST_EXTRAS-torch==2.13.0 jax pyarrow}
if [[ ! -f numkong-$version.tar.gz ]]; then
    step "download numkong==$version (sdist)"
    "$python" -m pip download -q --no-binary :all: --no-deps "numkong==$version" -d .
fi
if [[ ! -f deps/ready ]]; then
    step "deps: dlpack-ref from $repo, numkong's test requirements ($extras)"
    rm -rf deps wheels
    "$python" -m pip wheel -q --no-deps "$repo" -w wheels
    "$python" -m venv deps
    # shellcheck disable=SC2086
    deps/bin/python -m pip install -q setuptools wheel numpy ml_dtypes pytest pytest-repeat tabulate $extras \
        wheels/dlpack_ref-*.whl
    touch deps/ready
fi
deps_site=$(deps/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

build() {   # build NAME: a venv with numkong NAME (released, adopted) installed
    local name=$1 venv=$work/$1 src=$work/src-$1
    rm -rf "$venv" "$src"
    # No pip or setuptools of its own: deps' (newer) ones, through the .pth file.
    "$python" -m venv --without-pip "$venv"
    echo "$deps_site" > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/deps.pth"
    mkdir -p "$src"
    tar xzf "numkong-$version.tar.gz" -C "$src" --strip-components=1
    if [[ $name == adopted ]]; then
        step "adopted: vendor dlpack-ref's headers, apply producer.patch"
        include=$("$venv/bin/python" -c 'import dlpack_ref; print(dlpack_ref.get_include())')
        cp "$include/dlpack.h" "$include/dlpack_ref.h" "$include/dlpack_ref_tables.h" "$src/python/"
        patch -s -p1 -d "$src" < "$here/producer.patch"
    fi
    step "$name: build numkong (minutes: its SIMD kernels)"
    local t0=$SECONDS
    "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation "$src" > "$work/$name-build.log" 2>&1 \
        || { tail -40 "$work/$name-build.log"; exit 1; }
    step "$name: built in $((SECONDS - t0)) s"
}

run_tests() {   # run_tests NAME: numkong's own tests and the checker on build NAME
    local name=$1 venv=$work/$1
    step "$name: numkong's own tests (test/test_dlpack.py, test/test_tensor.py)"
    # The sdist's pyproject turns every warning into an error and randomizes
    # nothing here (pytest-randomly is not installed); run from the source
    # tree's test folder against the installed module.
    (cd "$work/src-$name" && "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        --junitxml="$work/$name-tests.xml" test/test_dlpack.py test/test_tensor.py > "$work/$name-tests.log" 2>&1) || true
    tail -3 "$work/$name-tests.log"
    step "$name: dlpack-ref check --library numkong"
    "$venv/bin/python" -m dlpack_ref check --library numkong --format json > "$work/$name-check.json" \
        2> "$work/$name-check.log" || true
}

for name in released adopted; do
    build "$name"
    run_tests "$name"
done

step "compare"
status=0
"$python" "$here/compare.py" --work "$work" --docs "$repo/docs/adoption.md" || status=$?
echo "venv: $work/adopted"
step "done in $((SECONDS - started)) s"
exit $status
