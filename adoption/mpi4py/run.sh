#!/usr/bin/env bash
# adoption/run.sh mpi4py: mpi4py 4.1.2 with its DLPack consumer (asdlpack.pxi)
# replaced by asdlpack.pxi of this folder, built on dlpack-ref's vendored
# header, against the same build as released (adoption/lib.sh's flow).
#
#   - builds mpi4py's pinned sdist twice against the `mpich` wheel, each in a
#     venv of its own: as released, and adopted (asdlpack.pxi replaced, the
#     files of dlpack_ref.get_include() copied into src/, and
#     cythonize-include.patch putting src/ on Cython's include path);
#   - runs mpi4py's own tests on both (single process; the tests that
#     spawn processes aside) with tests-keep-managed-alive.patch applied to
#     both (a bug in mpi4py's test producers, docs/adoption.md), and judges
#     a test whose outcome changes by expected_changes.txt;
#   - runs `python -m dlpack_ref check --library mpi4py` on both;
#   - exits 1 on any regression.
#
# Environment: DLPACK_REF_ADOPTION_WORK (scratch folder, default
# .adoption-work in the checkout), PYTHON (the interpreter of the venvs),
# MPI4PY_TESTS (a regex of test modules, default every one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"

adoption_name=mpi4py
adoption_version=4.1.2
adoption_inputs=("$here/asdlpack.pxi" "$here/cythonize-include.patch")
# the modules whose messages or buffers go through DLPack (MPI4PY_TESTS=. runs every one)
tests=${MPI4PY_TESTS:-"^test_(address|buffer|cco_.*|io|msgspec|p2p_buf.*|pack|rma.*)\.py$"}
# spawn and dynamic-process tests start new MPI processes: not single process
skip_modules=(-e test_spawn -e test_dynproc)

adoption_make_venv() {
    local venv=$2
    adoption_venv "$venv" mpich
    adoption_install_dlpack_ref "$venv"
}

# what an adopter does with the installed dlpack-ref: its replacement file,
# the vendored header and Cython declarations, the include path for them
adoption_adopt() {
    local src=$1 venv=$2 include
    include=$("$venv/bin/python" -c "import dlpack_ref; print(dlpack_ref.get_include())")
    cp "$here/asdlpack.pxi" "$src/src/mpi4py/MPI.src/asdlpack.pxi"
    cp "$include"/{dlpack.h,dlpack_ref.h,dlpack_ref_tables.h,dlpack.pxd,dlpack_ref_api.pxd} "$src/src/"
    patch -s -p1 -d "$src" < "$here/cythonize-include.patch"
}

adoption_install() {
    local src=$1 venv=$2
    MPICC=$venv/bin/mpicc "$venv/bin/python" -m pip install -q --no-cache-dir --force-reinstall --no-deps "$src"
}

# mpi4py's own tests of one build, verbose: the log, and the summary line
adoption_own_tests() {
    local build=$1 venv=$2 src=$3 work=$4
    # once per unpacked source: a second round of tests (lib.sh) finds it applied
    patch -f -s -p1 -R --dry-run -d "$src" < "$here/tests-keep-managed-alive.patch" > /dev/null 2>&1 ||
        patch -f -s -p1 -d "$src" < "$here/tests-keep-managed-alive.patch" || return 1
    (cd "$src/test" && timeout 1800 "$venv/bin/python" main.py -v -i "$tests" "${skip_modules[@]}") \
        > "$work/tests-$build.log" 2>&1 || true
    "$venv/bin/python" "$here/test_outcomes.py" summary "$work/tests-$build.log" "mpi4py $build"
}

adoption_judge() {
    local work=$1 status=0 build
    "$work/venv-adopted/bin/python" "$here/test_outcomes.py" compare "$work/tests-released.log" \
        "$work/tests-adopted.log" "$here/expected_changes.txt" || status=1
    for build in released adopted; do
        echo "checker mpi4py $build: $(cat "$work/check-$build.counts")"
    done
    adoption_check_regressions "$work/check-released.rules" "$work/check-adopted.rules" || status=1
    return $status
}

adoption_main
