#!/usr/bin/env bash
# adoption/run.sh numkong: numkong's DLPack producer (its __dlpack__ and
# __dlpack_device__ in python/dlpack_interop.c) moved onto dlpack-ref's
# vendored header, proven three ways against numkong as released
# (adoption/lib.sh's flow):
#   - numkong's own tests pass on both builds, but for the changes of outcome
#     that docs/adoption.md lists (section "numkong"), each with its rule;
#   - `python -m dlpack_ref check --library numkong`: no rule that passes on
#     the released build fails on the adopted one, and every rule that fails
#     there passes here or is not supported with a reason (compare.py);
#   - (the cost is a benchmark: benchmarks/adoption_producer.py).
# The adoption is producer.patch (3 files of numkong's) plus the three
# vendored headers copied beside numkong's own (dlpack.h, dlpack_ref.h,
# dlpack_ref_tables.h, from dlpack_ref.get_include() of this checkout).
#
# Environment: DLPACK_REF_ADOPTION_WORK (scratch folder, default
# .adoption-work in the checkout), PYTHON (the interpreter of the venvs),
# TEST_EXTRAS (the DLPack partners numkong's tests exchange with; empty:
# none).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"

adoption_name=numkong
adoption_version=7.8.6
adoption_inputs=("$here/producer.patch")
extras=${TEST_EXTRAS-torch==2.13.0 jax pyarrow}

# Both builds see one venv, deps, through a .pth file: numkong's test group
# (pytest, pytest-repeat, tabulate; NumPy and ml_dtypes), the partners, a
# newer pip and setuptools than a venv's own (which has no bdist_wheel),
# and this checkout's dlpack-ref.
adoption_make_venv() {
    local venv=$2 deps
    deps=$(adoption_workdir numkong)/deps
    # shellcheck disable=SC2086
    adoption_venv "$deps" setuptools wheel numpy ml_dtypes pytest pytest-repeat tabulate $extras
    adoption_install_dlpack_ref "$deps"
    adoption_venv_on_deps "$venv" "$deps"
}

adoption_adopt() {
    local src=$1 venv=$2 include
    include=$("$venv/bin/python" -c 'import dlpack_ref; print(dlpack_ref.get_include())')
    cp "$include/dlpack.h" "$include/dlpack_ref.h" "$include/dlpack_ref_tables.h" "$src/python/"
    patch -s -p1 -d "$src" < "$here/producer.patch"
}

# its SIMD kernels take minutes
adoption_install() {
    local src=$1 venv=$2
    "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$src"
}

# numkong's own DLPack and Tensor tests, from the source tree's test folder
# against the installed module. The sdist's pyproject turns every warning
# into an error; pytest-randomly is not installed, so the order is fixed.
adoption_own_tests() {
    local build=$1 venv=$2 src=$3 work=$4
    (cd "$src" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$work/tests-$build.xml" \
        test/test_dlpack.py test/test_tensor.py > "$work/tests-$build.log" 2>&1) || true
    tail -3 "$work/tests-$build.log" >&2
}

adoption_judge() {
    "$adoption_python" "$here/compare.py" --work "$1" --docs "$adoption_repo/docs/adoption.md"
}

adoption_main
