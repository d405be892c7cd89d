#!/usr/bin/env bash
# adoption/run.sh mpi4py: mpi4py 4.1.2 with its DLPack consumer (asdlpack.pxi)
# replaced by asdlpack.pxi of this folder, built on dlpack-ref's vendored
# header, against the same build as released.
#
#   - downloads mpi4py's pinned sdist, and builds it twice against the
#     `mpich` wheel, each in a venv of its own: as released, and adopted
#     (asdlpack.pxi replaced, the files of dlpack_ref.get_include() copied
#     into src/, and cythonize-include.patch putting src/ on Cython's
#     include path);
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

version=4.1.2
work=$(adoption_workdir mpi4py)
sdist=$(adoption_sdist "$work" mpi4py "$version")
# the modules whose messages or buffers go through DLPack (MPI4PY_TESTS=. runs every one)
tests=${MPI4PY_TESTS:-"^test_(address|buffer|cco_.*|io|msgspec|p2p_buf.*|pack|rma.*)\.py$"}
# spawn and dynamic-process tests start new MPI processes: not single process
skip_modules=(-e test_spawn -e test_dynproc)

# the folder of the build's sources, unpacked afresh from the sdist
unpack() {
    local build=$1
    rm -rf "$work/$build/mpi4py-$version"
    mkdir -p "$work/$build"
    tar xzf "$sdist" -C "$work/$build"
    echo "$work/$build/mpi4py-$version"
}

# what an adopter does with the installed dlpack-ref: its replacement file,
# the vendored header and Cython declarations, the include path for them
adopt() {
    local src=$1 venv=$2 include
    include=$("$venv/bin/python" -c "import dlpack_ref; print(dlpack_ref.get_include())")
    cp "$here/asdlpack.pxi" "$src/src/mpi4py/MPI.src/asdlpack.pxi"
    cp "$include"/{dlpack.h,dlpack_ref.h,dlpack_ref_tables.h,dlpack.pxd,dlpack_ref_api.pxd} "$src/src/"
    patch -s -p1 -d "$src" < "$here/cythonize-include.patch"
}

# the key of a build: what it was built from (a build with the same key is
# kept between runs)
build_key() {
    local build=$1
    {
        sha256sum "$sdist" | cut -c1-64
        if [[ $build == adopted ]]; then
            cat "$here/asdlpack.pxi" "$here/cythonize-include.patch"
            adoption_source_key
        fi
    } | sha256sum | cut -c1-16
}

build() {
    local build=$1 venv=$work/venv-$1 src key
    adoption_venv "$venv" mpich
    adoption_install_dlpack_ref "$venv"
    key=$(build_key "$build")
    src=$(unpack "$build")
    if [[ $(cat "$venv/.mpi4py-build" 2>/dev/null) != "$key" ]]; then
        [[ $build == adopted ]] && adopt "$src" "$venv"
        adoption_step "building mpi4py $version ($build) against the mpich wheel"
        MPICC=$venv/bin/mpicc "$venv/bin/python" -m pip install -q --no-cache-dir --force-reinstall --no-deps \
            "$src" > "$work/build-$build.log" 2>&1 || { tail -40 "$work/build-$build.log" >&2; return 1; }
        echo "$key" > "$venv/.mpi4py-build"
    fi
    patch -s -p1 -d "$src" < "$here/tests-keep-managed-alive.patch"
}

# mpi4py's own tests of one build, verbose: the log, and the summary line
run_tests() {
    local build=$1 venv=$work/venv-$1
    adoption_step "mpi4py's tests ($build)"
    (cd "$work/$build/mpi4py-$version/test" &&
        timeout 1800 "$venv/bin/python" main.py -v -i "$tests" "${skip_modules[@]}") > "$work/tests-$build.log" 2>&1 || true
    "$venv/bin/python" "$here/test_outcomes.py" summary "$work/tests-$build.log" "mpi4py $build"
}

# both builds' tests, then their comparison; 1 on a run that did not finish
# or a regression
run_and_compare() {
    local rc=0 b
    for b in released adopted; do run_tests "$b" || rc=1; done
    "$work/venv-adopted/bin/python" "$here/test_outcomes.py" compare "$work/tests-released.log" \
        "$work/tests-adopted.log" "$here/expected_changes.txt" || rc=1
    return $rc
}

status=0
for b in released adopted; do build "$b"; done
# A difference seen once is run again on both builds before it is judged: on
# a loaded machine a test can fail once in either build. What the first
# attempt saw stays in the output, marked, so that a flaky test is seen.
if ! run_and_compare > "$work/tests-first-attempt.txt"; then
    sed 's/^/  first attempt: /' "$work/tests-first-attempt.txt"
    adoption_step "the builds differed once: both test runs again"
    for b in released adopted; do cp "$work/tests-$b.log" "$work/tests-$b.first-attempt.log"; done
    run_and_compare || status=1
else
    cat "$work/tests-first-attempt.txt"
fi

for b in released adopted; do
    adoption_step "dlpack-ref check --library mpi4py ($b)"
    echo "checker mpi4py $b: $(adoption_check "$work/venv-$b" mpi4py "$work/check-$b")"
done
adoption_check_regressions "$work/check-released.rules" "$work/check-adopted.rules" || status=1

echo "venv: $work/venv-adopted"
if [[ $status -ne 0 ]]; then
    echo "mpi4py adoption: REGRESSION (logs in $work)"
else
    echo "mpi4py adoption: no regression"
fi
exit $status
