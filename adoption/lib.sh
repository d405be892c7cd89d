# adoption/lib.sh: the one flow of every adoption/NAME/run.sh (sourced).
# adoption_main downloads NAME's pinned sdist, builds it as released and as
# adopted (NAME's files replacing its own DLPack code) in a venv each, runs
# its own tests and `dlpack-ref check --library NAME` on both, lets NAME's
# judge compare the two builds, and prints the verdict. The library's
# script supplies only what is its own (see adoption_main).

adoption_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
adoption_python=${PYTHON:-python3}
adoption_t0=$SECONDS

# adoption_step MESSAGE: a progress line on stderr, with the seconds so far.
adoption_step() {
    echo "[adoption +$((SECONDS - adoption_t0))s] $*" >&2
}

# adoption_workdir NAME: the scratch folder of NAME (made if missing):
# $DLPACK_REF_ADOPTION_WORK/NAME, by default .adoption-work/NAME in the
# checkout (ignored by git). Downloads, venvs and builds stay there between
# runs, so that a second run rebuilds only what changed.
adoption_workdir() {
    local dir=${DLPACK_REF_ADOPTION_WORK:-$adoption_repo/.adoption-work}/$1
    mkdir -p "$dir"
    (cd "$dir" && pwd)
}

# adoption_sdist DIR NAME VERSION: the path of NAME==VERSION's sdist,
# downloaded into DIR/sdist from the package index once.
adoption_sdist() {
    local dir=$1/sdist name=$2 version=$3 found
    mkdir -p "$dir"
    found=$(ls "$dir"/"$name"-"$version".tar.gz 2>/dev/null || true)
    if [[ -z $found ]]; then
        adoption_step "downloading the $name $version sdist"
        "$adoption_python" -m pip download -q --no-binary :all: --no-deps -d "$dir" "$name==$version" >&2
        found=$(ls "$dir"/"$name"-"$version".tar.gz)
    fi
    echo "$found"
}

# adoption_venv DIR PACKAGES...: a venv at DIR with PACKAGES installed from
# the package index, made once (again when PACKAGES change, or when making
# it did not finish).
adoption_venv() {
    local dir=$1
    shift
    if [[ $(cat "$dir/.adoption-venv" 2>/dev/null) != "$*" ]]; then
        adoption_step "venv $dir: $*"
        rm -rf "$dir"
        "$adoption_python" -m venv "$dir"
        "$dir/bin/python" -m pip install -q --upgrade pip >&2
        [[ $# -eq 0 ]] || "$dir/bin/python" -m pip install -q "$@" >&2
        echo "$*" > "$dir/.adoption-venv"
    fi
}

# adoption_source_key: a hash of this checkout's package sources (committed
# and not), which names the dlpack-ref wheel built from them.
adoption_source_key() {
    (cd "$adoption_repo" && {
        git ls-files -s -- include src python pyproject.toml CMakeLists.txt cmake 2>/dev/null
        git diff HEAD -- include src python pyproject.toml CMakeLists.txt cmake 2>/dev/null
    } | sha256sum | cut -c1-16)
}

# adoption_install_dlpack_ref VENV: this checkout's dlpack-ref installed
# into VENV, from a wheel built once per source state (DIR/wheels).
adoption_install_dlpack_ref() {
    local venv=$1 wheels key
    wheels=${DLPACK_REF_ADOPTION_WORK:-$adoption_repo/.adoption-work}/wheels/$(adoption_source_key)
    if ! ls "$wheels"/dlpack_ref-*.whl >/dev/null 2>&1; then
        adoption_step "building dlpack-ref's wheel from $adoption_repo"
        mkdir -p "$wheels"
        # a build folder of its own: the tree's build/TAG may be another build's at this moment
        "$venv/bin/python" -m pip wheel -q --no-deps -C build-dir="$wheels/build" -w "$wheels" "$adoption_repo" >&2
    fi
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheels"/dlpack_ref-*.whl >&2
    "$venv/bin/python" -m pip install -q numpy >&2
}

# adoption_check VENV LIBRARY OUT: `python -m dlpack_ref check --library
# LIBRARY --format json` in VENV (no exchange matrix), the report kept in
# OUT.json and one `rule status` line a rule in OUT.rules; prints the counts.
adoption_check() {
    local venv=$1 library=$2 out=$3
    "$venv/bin/python" -m dlpack_ref check --library "$library" --format json --no-matrix > "$out.json" 2> "$out.log" || true
    "$venv/bin/python" - "$out.json" "$library" > "$out.rules" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
for lib in report["libraries"]:
    if lib["name"] == sys.argv[2]:
        for r in lib["results"]:
            print(r["check"], r["status"].replace(" ", "_"))
EOF
    awk '{n[$2]++} END {printf "%d pass, %d fail, %d not supported, %d error\n", n["pass"], n["fail"], n["not_supported"], n["error"]}' "$out.rules"
}

# adoption_check_regressions RELEASED.rules ADOPTED.rules: the rules that
# pass as released and not as adopted, and the rules that fail as released
# and neither pass nor are "not supported" as adopted; prints them and
# returns 1 when there is one.
adoption_check_regressions() {
    awk 'NR == FNR {before[$1] = $2; next}
         {after = $2; was = before[$1]
          if (was == "pass" && after != "pass") {print "  checker: " $1 " passed as released, " after " as adopted"; bad = 1}
          if (was == "fail" && after != "pass" && after != "not_supported") {print "  checker: " $1 " still " after; bad = 1}}
         END {exit bad}' "$1" "$2"
}

# adoption_venv_on_deps VENV DEPS: a venv with no packages of its own (not
# even pip) that sees the packages of the venv DEPS through a .pth file:
# two builds that share large test dependencies install them once.
adoption_venv_on_deps() {
    local venv=$1 deps=$2 site
    if [[ ! -x $venv/bin/python ]]; then
        "$adoption_python" -m venv --without-pip "$venv"
    fi
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/adoption-deps.pth"
}

# adoption_build_key SDIST BUILD FILES...: what a build is made of, as a
# key: the sdist, and for the adopted build FILES (the library's
# replacement) and dlpack-ref's sources. A build with an unchanged key is
# kept between runs.
adoption_build_key() {
    local sdist=$1 build=$2
    shift 2
    {
        sha256sum "$sdist" | cut -c1-64
        if [[ $build == adopted ]]; then
            cat "$@"
            adoption_source_key
        fi
    } | sha256sum | cut -c1-16
}

# adoption_unpack SDIST DIR: the sdist unpacked afresh into DIR (its top
# folder stripped); prints DIR.
adoption_unpack() {
    local sdist=$1 dir=$2
    rm -rf "$dir"
    mkdir -p "$dir"
    tar xzf "$sdist" -C "$dir" --strip-components=1
    echo "$dir"
}

# adoption_build WORK SDIST BUILD: WORK/venv-BUILD made (adoption_make_venv)
# and, unless its stamp says it was built from the same key, the sources
# in WORK/BUILD/src adopted (adopted build: adoption_adopt) and built into
# it (adoption_install, its log in WORK/build-BUILD.log). The sources are
# unpacked afresh every run, so that the tests run on the sdist's own.
adoption_build() {
    local work=$1 sdist=$2 build=$3 venv=$1/venv-$3 src key
    adoption_make_venv "$build" "$venv"
    key=$(adoption_build_key "$sdist" "$build" "${adoption_inputs[@]}")
    src=$(adoption_unpack "$sdist" "$work/$build/src")
    if [[ $(cat "$venv/.adoption-build" 2>/dev/null) != "$key" ]]; then
        if [[ $build == adopted ]]; then
            adoption_step "adopted: $adoption_name's DLPack code replaced"
            adoption_adopt "$src" "$venv"
        fi
        adoption_step "building $adoption_name $adoption_version ($build)"
        local t0=$SECONDS
        adoption_install "$src" "$venv" > "$work/build-$build.log" 2>&1 || {
            tail -40 "$work/build-$build.log" >&2
            echo "$adoption_name $build: the build failed (log: $work/build-$build.log)"
            return 1
        }
        adoption_step "$adoption_name ($build) built in $((SECONDS - t0)) s"
        echo "$key" > "$venv/.adoption-build"
    fi
}

# adoption_main: the flow of adoption/NAME/run.sh. The script sets
#   adoption_name, adoption_version   the library and its pinned sdist;
#   adoption_inputs                   (array) its files the adopted build is
#                                     made of, beside dlpack-ref's sources;
# and defines
#   adoption_make_venv BUILD VENV     the build's venv with what building
#                                     and testing need and this checkout's
#                                     dlpack-ref (adoption_venv and
#                                     adoption_install_dlpack_ref, or
#                                     adoption_venv_on_deps);
#   adoption_adopt SRC VENV           its replacement applied to the sources;
#   adoption_install SRC VENV         the sources built into the venv;
#   adoption_own_tests BUILD VENV SRC WORK
#                                     its own tests of one build, their log
#                                     and results in WORK (the line "NAME
#                                     BUILD: N passed, N failed, N skipped"
#                                     printed here or by the judge);
#                                     non-zero when the run did not finish;
#   adoption_judge WORK               the two builds compared: their tests'
#                                     outcomes and the checker's verdicts
#                                     (WORK/check-BUILD.rules, .json and
#                                     .counts of adoption_check); prints what
#                                     changed and every regression; non-zero
#                                     when there is one.
# Prints "venv: PATH" of the adopted build and "NAME adoption: no
# regression" or "NAME adoption: REGRESSION (logs in WORK)"; returns 1 on a
# regression; a failed build stops the script (set -e) with status 1.
# adoption_tests_judged WORK: both builds' own tests, then the judge; 1 on a
# run that did not finish or a regression.
adoption_tests_judged() {
    local work=$1 build rc=0
    for build in released adopted; do
        adoption_step "$adoption_name's own tests ($build)"
        adoption_own_tests "$build" "$work/venv-$build" "$work/$build/src" "$work" || rc=1
    done
    adoption_judge "$work" || rc=1
    return $rc
}

adoption_main() {
    local work sdist build status=0
    work=$(adoption_workdir "$adoption_name")
    sdist=$(adoption_sdist "$work" "$adoption_name" "$adoption_version")
    for build in released adopted; do
        adoption_build "$work" "$sdist" "$build"
    done
    for build in released adopted; do
        adoption_step "dlpack-ref check --library $adoption_name ($build)"
        adoption_check "$work/venv-$build" "$adoption_name" "$work/check-$build" > "$work/check-$build.counts"
    done
    # A difference seen once is run again on both builds before it is judged:
    # on a loaded machine a test can fail once in either build. What the
    # first attempt saw stays in the output, marked, so a flaky test is seen.
    if ! adoption_tests_judged "$work" > "$work/first-attempt.txt"; then
        sed 's/^/  first attempt: /' "$work/first-attempt.txt"
        adoption_step "the builds differed once: both builds' tests again"
        adoption_tests_judged "$work" || status=1
    else
        cat "$work/first-attempt.txt"
    fi
    echo "venv: $work/venv-adopted"
    if [[ $status -ne 0 ]]; then
        echo "$adoption_name adoption: REGRESSION (logs in $work)"
    else
        echo "$adoption_name adoption: no regression"
    fi
    return $status
}
