#!/usr/bin/env bash
# Build the dlpack-ref core with AddressSanitizer and UndefinedBehaviorSanitizer
# in a throwaway virtual environment, run the test suite under it, and report
# every sanitizer error whose stack passes through dlpack-ref code.
#
#   tools/sanitize.sh                      # the whole suite
#   tools/sanitize.sh tests/test_fuzz.py   # any pytest arguments
#
# CPython itself is not instrumented: libasan is preloaded, and Python's
# allocator is switched to malloc (PYTHONMALLOC=malloc) so that ASan sees every
# object allocation and catches use-after-free and double free of Python
# objects too. Leak checking is off by default (CPython does not free
# everything at exit, which LeakSanitizer would report); the soak in
# tools/soak_leaks.py measures leaks instead. DLREF_ASAN_LEAKS=1 turns it on.
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
"$PY" -m venv --system-site-packages "$WORK/venv"
FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -g -O1"
"$WORK/venv/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps \
    -C build-dir="$WORK/build" \
    -C "cmake.define.CMAKE_C_FLAGS=$FLAGS" \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined" \
    "$ROOT"

SO="$(ls "$WORK"/venv/lib/python*/site-packages/dlpack_ref/_dlpack_ref*.so)"
if ! grep -q __asan_report "$SO"; then
    echo "sanitize.sh: $SO is not instrumented (no __asan_report references)" >&2
    exit 2
fi

if [ "$#" -eq 0 ]; then
    set -- "$ROOT/tests"
fi

echo "== running pytest $* under ASan/UBSan (logs in $WORK/logs)"
set +e
(
    cd "$WORK"  # import the instrumented install, not the source tree
    LD_PRELOAD="$PRELOAD" \
    PYTHONMALLOC=malloc \
    DLREF_SANITIZER=1 \
    ASAN_OPTIONS="detect_leaks=${DLREF_ASAN_LEAKS:-0}:halt_on_error=0:log_path=$WORK/logs/asan:allocator_may_return_null=1:detect_stack_use_after_return=0" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=0:log_path=$WORK/logs/ubsan" \
    "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
)
status=$?
set -e

echo "== sanitizer reports"
"$PY" - "$WORK/logs" <<'EOF'
import pathlib, re, sys

logs = sorted(pathlib.Path(sys.argv[1]).glob("*"))
ours, others = [], 0
for log in logs:
    text = log.read_text(errors="replace")
    # One report per "ERROR:"/"runtime error" block; ASan separates them with ===== lines.
    for report in re.split(r"\n(?==+\n==\d+==ERROR|\S+:\d+:\d+: runtime error)", text):
        if not report.strip():
            continue
        if "_dlpack_ref" in report or "dlpack_ref/" in report or "dlref_" in report:
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
