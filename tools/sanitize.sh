#!/usr/bin/env bash
# Build the dlpack-ref core with AddressSanitizer and UndefinedBehaviorSanitizer
# in a throwaway virtual environment, run the test suite under it, and report
# every sanitizer error whose stack passes through dlpack-ref code.
#
#   tools/sanitize.sh                      # the whole suite
#   tools/sanitize.sh tests/test_fuzz.py   # any pytest arguments
#   tools/sanitize.sh -m 'not harness'     # options alone: over the whole tests/
#
# CPython itself is not instrumented: libasan is preloaded, and Python's
# allocator is switched to malloc (PYTHONMALLOC=malloc) so that ASan sees every
# object allocation and catches use-after-free and double free of Python
# objects too. Leak checking is off by default (CPython does not free
# everything at exit, which LeakSanitizer would report); the soak in
# tools/soak_leaks.py measures leaks instead. DLREF_ASAN_LEAKS=1 turns it on.
#
# UBSan reports are made fatal (-fno-sanitize-recover=undefined): GCC's UBSan
# runtime writes to stderr whatever log_path says, and pytest and the
# hostile/fuzz tests' child processes capture stderr, so a report that only
# printed would go unseen. Only dlpack-ref's own module is built with UBSan,
# so every report is from its code: the process that hits one aborts (a
# child's abort fails its test; pytest's own abort ends the run), and the
# whole pytest output is kept in $WORK/logs/pytest.out, which is scanned
# for "runtime error:" as well. Before the suite, a self-test builds a small
# program with the same flags and checks that this script sees its report.
# DLREF_UBSAN_RECOVER=1 keeps going after a report instead (then the
# pytest.out scan is the only place reports from capturing children can be
# missed, so do not rely on it for a clean bill).
# ASan leaves SIGSEGV alone (handle_segv=0): the checker's tests crash child
# processes on purpose and expect them killed by the signal, not ASan's exit
# 1; a bad access in dlpack-ref code is reported by the instrumentation
# before it could fault, and a fault still fails its test.
# The extensions the tests compile themselves (tests/support/build_ext.py and
# adopter_recipe.py: the example adopters of tests/test_adopters.py, the
# Cython API demo) are built with the same flags, passed as
# DLREF_SANITIZER_FLAGS; only dlpack-ref's code and theirs has UBSan (theirs
# includes the pybind11 headers and nanobind library built into two of the
# adopters).
# Exit status: 0 when no report involves dlpack-ref code and pytest passed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
CC="${CC:-cc}"
WORK="${DLREF_ASAN_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/dlpack-ref-asan.XXXXXX")}"
mkdir -p "$WORK/logs"
rm -f "$WORK"/logs/*

LIBASAN="$("$CC" -print-file-name=libasan.so)"
if [ ! -e "$LIBASAN" ]; then
    echo "sanitize.sh: $CC has no libasan.so (install the compiler's ASan runtime)" >&2
    exit 2
fi
# Preloaded ahead of any C++ extension (jaxlib, torch) so that ASan's
# __cxa_throw interceptor finds the real one.
LIBSTDCXX="$("$CC" -print-file-name=libstdc++.so.6)"
PRELOAD="$LIBASAN"
if [ -e "$LIBSTDCXX" ]; then
    PRELOAD="$LIBASAN:$LIBSTDCXX"
fi

echo "== building the core with -fsanitize=address,undefined in $WORK"
# A reused DLREF_ASAN_DIR starts clean: CMake's cached configure of an
# earlier run fails under the sanitizer flags.
rm -rf "$WORK/build"
"$PY" -m venv --clear --system-site-packages "$WORK/venv"
RECOVER="-fno-sanitize-recover=undefined"
if [ "${DLREF_UBSAN_RECOVER:-0}" = 1 ]; then
    RECOVER=""
fi
FLAGS="-fsanitize=address,undefined $RECOVER -fno-omit-frame-pointer -g -O1"
UBSAN_OPTIONS_RUN="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$WORK/logs/ubsan"

echo "== UBSan self-test: a signed overflow built with the same flags must be seen"
printf '#include <stdint.h>\nint main(int c, char** v) { int64_t x = INT64_MAX; x += c; return (int)(x & 1); }\n' \
    > "$WORK/ubsan_selftest.c"
"$CC" $FLAGS "$WORK/ubsan_selftest.c" -o "$WORK/ubsan_selftest"
set +e
UBSAN_OPTIONS="$UBSAN_OPTIONS_RUN" "$WORK/ubsan_selftest" > "$WORK/ubsan_selftest.out" 2>&1
selftest_status=$?
set -e
if { [ -n "$RECOVER" ] && [ "$selftest_status" -eq 0 ]; } || ! grep -q "runtime error:" "$WORK/ubsan_selftest.out" "$WORK"/logs/ubsan* 2>/dev/null; then
    echo "sanitize.sh: the UBSan self-test's report was not seen (status $selftest_status)" >&2
    exit 2
fi
rm -f "$WORK"/logs/ubsan*
echo "   seen (status $selftest_status): $(grep -h -m1 "runtime error:" "$WORK/ubsan_selftest.out")"
"$WORK/venv/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps \
    -C build-dir="$WORK/build" \
    -C "cmake.define.CMAKE_C_FLAGS=$FLAGS" \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined" \
    "$ROOT"

# The test dependencies of the interpreter that runs this script (a virtual
# environment's too, which --system-site-packages does not reach), after the
# venv's own site-packages, where the instrumented dlpack-ref is; written
# after the install, so that pip never sees (or uninstalls) another copy.
"$PY" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
    > "$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/dlref_test_deps.pth"

SO="$(ls "$WORK"/venv/lib/python*/site-packages/dlpack_ref/_dlpack_ref*.so)"
if ! grep -q __asan_report "$SO" || [ "$(cd "$WORK" && LD_PRELOAD="$PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$WORK/venv/bin/python" -c 'import dlpack_ref._dlpack_ref as m; print(m.__file__)')" != "$SO" ]; then
    echo "sanitize.sh: $SO is not instrumented (no __asan_report references), or not the dlpack_ref the tests import" >&2
    exit 2
fi

# pytest runs in $WORK: paths given relative to here are made absolute, and
# with none given (options only, such as -m 'not harness') the whole tests/.
args=()
has_path=0
for arg in "$@"; do
    path=${arg%%::*}
    if [[ "$arg" != -* && -e "$path" ]]; then
        args+=("$(realpath "$path")${arg#"$path"}")
        has_path=1
    else
        args+=("$arg")
    fi
done
[ "$has_path" = 1 ] || args+=("$ROOT/tests")
set -- "${args[@]}"

echo "== running pytest $* under ASan/UBSan (logs in $WORK/logs)"
set +e
(
    cd "$WORK"  # import the instrumented install, not the source tree
    LD_PRELOAD="$PRELOAD" \
    PYTHONMALLOC=malloc \
    DLREF_SANITIZER=1 \
    DLREF_SANITIZER_FLAGS="$FLAGS" \
    ASAN_OPTIONS="detect_leaks=${DLREF_ASAN_LEAKS:-0}:halt_on_error=0:log_path=$WORK/logs/asan:allocator_may_return_null=1:detect_stack_use_after_return=0:handle_segv=0" \
    UBSAN_OPTIONS="$UBSAN_OPTIONS_RUN" \
    "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider -s "$@"
) > >(tee "$WORK/logs/pytest.out") 2>&1
status=$?
sleep 1  # let tee finish writing
set -e

echo "== sanitizer reports"
"$PY" - "$WORK/logs" <<'EOF'
import pathlib, re, sys

logs = sorted(pathlib.Path(sys.argv[1]).glob("*"))
ours, others = [], 0
for log in logs:
    text = log.read_text(errors="replace")
    if log.name == "pytest.out":
        # Only dlpack-ref's module and the tests' extensions have UBSan: every "runtime error:" is ours,
        # whether pytest itself or a child whose output a test printed hit it.
        for line in text.splitlines():
            if "runtime error:" in line:
                ours.append((log.name, line.strip()))
        continue
    # One report per "ERROR:"/"runtime error" block; ASan separates them with ===== lines.
    for report in re.split(r"\n(?==+\n==\d+==ERROR|\S+:\d+:\d+: runtime error)", text):
        if not report.strip():
            continue
        # dlpack_ref.h: the vendored header inlined into an extension the tests
        # build (the example adopters, api_demo); _adopter: their own code.
        if any(mark in report for mark in ("_dlpack_ref", "dlpack_ref/", "dlref_", "dlpack_ref.h", "_adopter")):
            ours.append((log.name, report))
        else:
            others += 1
for name, report in ours:
    print(f"--- {name}\n{report.strip()}\n")
print(f"{len(ours)} report(s) from dlpack-ref code, {others} from elsewhere (CPython, other libraries), "
      f"in {len(logs)} log file(s)")
sys.exit(1 if ours else 0)
EOF
reports=$?
echo "pytest exit status: $status"
[ "$status" -eq 0 ] && [ "$reports" -eq 0 ]
