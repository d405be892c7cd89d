# adoption/lib.sh: shell helpers shared by adoption/NAME/run.sh (sourced).
# Each library's script downloads its pinned sdist, builds it as released
# and as adopted, and compares the two builds' own tests and the checker's
# verdicts with these helpers.

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
# the package index (made once; an existing one is kept).
adoption_venv() {
    local dir=$1
    shift
    if [[ ! -x $dir/bin/python ]]; then
        adoption_step "venv $dir: $*"
        "$adoption_python" -m venv "$dir"
        "$dir/bin/python" -m pip install -q --upgrade pip >&2
        [[ $# -eq 0 ]] || "$dir/bin/python" -m pip install -q "$@" >&2
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
        "$venv/bin/python" -m pip wheel -q --no-deps -w "$wheels" "$adoption_repo" >&2
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
