#!/usr/bin/env bash
# Build the core and the header-only Cython API with the errors GCC 14 (and
# clang 16) turn on by default, with GCC and with clang, so that a distribution
# with a newer compiler than ours can still `pip install` dlpack-ref.
#
#   tools/strict_build.sh              # gcc and clang
#   DLREF_STRICT_COMPILERS=gcc tools/strict_build.sh
#
# Each compiler builds (1) the wheel through scikit-build-core and CMake, the
# path `pip install .` takes, and (2) tests/cython_api_ext/api_demo.pyx, the
# way another extension compiles dlpack_ref_api.pxd into itself. The flags are
# added to the project's own, so they are the ones a user's compiler would
# add by default. clang is installed with apt-get when it is missing and this
# runs as root (CI); without it the run fails rather than skip the lane.
# Every "error:" line is printed with file and line; exit status 0 only when
# every build succeeded.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
COMPILERS="${DLREF_STRICT_COMPILERS:-gcc clang}"
STRICT_FLAGS="-Werror=incompatible-pointer-types -Werror=implicit-function-declaration -Werror=int-conversion -Werror=implicit-int"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dlpack-ref-strict.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS

# The build requirements, from pyproject.toml (the build runs without isolation).
"$PY" "$ROOT/tools/pyproject_requires.py" build > "$WORK/requires.txt"
"$PY" -m pip install -q -r "$WORK/requires.txt" cmake ninja

if [[ " $COMPILERS " == *" clang "* ]] && ! command -v clang >/dev/null && [ "$(id -u)" = 0 ] \
        && command -v apt-get >/dev/null; then
    echo "== installing clang (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
fi

PYINC="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
"$PY" -m cython -3 -I "$ROOT/src" "$ROOT/tests/cython_api_ext/api_demo.pyx" -o "$WORK/api_demo.c"
# The API's C tables header, generated as the CMake build does.
"$PY" "$ROOT/tools/gen_tables.py" "$WORK/generated/dlpack_ref_tables.h"

# Print each diagnostic of a build log with the Cython line that generated the
# C line it names (Cython writes /* "file.pyx":N before the C of each line).
cython_source_of() {
    "$PY" - "$1" "$2" <<'EOF'
import re, sys
log, c_path = sys.argv[1], sys.argv[2]
try:
    c_lines = open(c_path, errors="replace").read().splitlines()
except OSError:
    c_lines = []
marker = re.compile(r'/\* "([^"]+)":(\d+)')
for line in open(log, errors="replace"):
    if not re.search(r":\d+:\d+: (fatal )?(error|warning):", line):
        continue
    where = ""
    m = re.search(r"\.c:(\d+):", line)
    if m and c_lines:
        for i in range(min(int(m.group(1)), len(c_lines)) - 1, -1, -1):
            src = marker.search(c_lines[i])
            if src:
                path = re.sub(r"^.*?/(?=(src|tests|python)/)", "", src.group(1))
                where = f"  [from {path}:{src.group(2)}]"
                break
    print("   " + line.strip().rsplit("/", 1)[-1] + where)
EOF
}

failed=()
for cc in $COMPILERS; do
    if ! command -v "$cc" >/dev/null; then
        echo "== $cc: not installed" >&2
        failed+=("$cc (not installed)")
        continue
    fi
    echo "== $cc ($("$cc" --version | head -1)): wheel"
    t0=$SECONDS
    if "$PY" -m pip wheel -v --no-build-isolation --no-deps -w "$WORK/wheel-$cc" \
            -C build-dir="$WORK/build-$cc" \
            -C cmake.define.CMAKE_C_COMPILER="$cc" \
            -C "cmake.define.CMAKE_C_FLAGS=$STRICT_FLAGS" \
            "$ROOT" > "$WORK/wheel-$cc.log" 2>&1; then
        echo "   built in $((SECONDS - t0)) s"
    else
        failed+=("$cc wheel")
        echo "   FAILED after $((SECONDS - t0)) s:"
    fi
    cython_source_of "$WORK/wheel-$cc.log" "$WORK/build-$cc/_dlpack_ref.c"

    echo "== $cc: Cython API (api_demo.pyx)"
    if "$cc" $STRICT_FLAGS -fsyntax-only -I "$PYINC" -I "$ROOT/include" -I "$WORK/generated" "$WORK/api_demo.c" \
            > "$WORK/api-$cc.log" 2>&1; then
        echo "   compiles"
    else
        failed+=("$cc api_demo")
        echo "   FAILED:"
    fi
    cython_source_of "$WORK/api-$cc.log" "$WORK/api_demo.c"
done

echo "== strict builds took $((SECONDS - START)) s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "all strict builds passed: $COMPILERS"
