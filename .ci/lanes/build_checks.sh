#!/usr/bin/env bash
# The build lane: the core under GCC 14's (and clang's) error flags, and
# under GCC 16 from the Debian sid root; a manylinux wheel for every CPython
# dlpack-ref supports (cp311 to cp315 and cp313t), each installed into a
# fresh venv and round-tripped; the documentation site built with warnings
# as errors. Each tool script states what it checks.
set -euo pipefail
# shellcheck source=../lane_lib.sh
. .ci/lane_lib.sh
lane_venv "$(lane_python 3.11)"
pip install --quiet -C build-dir="$CI_LANE_DIR/build" .
echo "== strict compiler flags (gcc, clang) =="
bash tools/strict_build.sh

sid=$(tools/build_sid_root.sh)
repo=$(sid_enter "$sid")
# Debian's interpreters refuse pip outside a venv (PEP 668): each step
# inside the root makes its own.
in_sid_venv() {
    local python=$1
    shift
    sid_exec "$sid" "$repo" bash -c '"$0" -m venv --clear "$CI_LANE_DIR/venv-$0" &&
        PYTHON="$CI_LANE_DIR/venv-$0/bin/python" "$@"' "$python" "$@"
}
echo "== strict compiler flags (GCC 16, Debian sid, Python 3.14) =="
in_sid_venv python3.14 env DLREF_STRICT_COMPILERS=gcc bash tools/strict_build.sh

wheels="$CI_LANE_DIR/wheelhouse"
rm -rf "$wheels" && mkdir -p "$wheels"
# host_wheel PYTHON: a venv of PYTHON builds, repairs and round-trips one wheel.
host_wheel() {
    local venv
    venv="$CI_LANE_DIR/wheel-venv-$(basename "$1")"
    "$1" -m venv --clear "$venv"
    PYTHON="$venv/bin/python" bash tools/manylinux_wheel.sh "$wheels"
}
for version in 3.11 3.12 3.13; do
    echo "== manylinux wheel, CPython $version =="
    host_wheel "$(lane_python "$version")"
done
echo "== manylinux wheel, CPython 3.13t =="
host_wheel "$(tools/build_python_ft.sh)"
for python in python3.14 python3.15; do
    echo "== manylinux wheel, CPython ${python#python} (Debian sid) =="
    in_sid_venv "$python" bash tools/manylinux_wheel.sh "$(dirname "$repo")/wheelhouse"
done
cp "$sid$(dirname "$repo")"/wheelhouse/*.whl "$wheels/"
echo "== wheels =="
ls "$wheels"
for tag in cp311-cp311 cp312-cp312 cp313-cp313 cp313-cp313t cp314-cp314 cp315-cp315; do
    ls "$wheels"/dlpack_ref-*-"$tag"-*manylinux*.whl >/dev/null 2>&1 || { echo "no $tag wheel" >&2; exit 1; }
done

echo "== documentation site =="
bash tools/build_docs.sh "$CI_LANE_DIR/docs"
# Every page rendered at 1280 px in headless Chromium, in DejaVu fonts
# (Debian's packages; the check drives the browser over the DevTools pipe
# with the standard library alone): fails on a table or code block that
# spills out or scrolls sideways, and on a chart that did not load or is
# shrunk illegible. Then the check's own tests.
# (Another lane may hold dpkg's lock for a while: wait for it.)
if ! dpkg -s chromium-headless-shell fonts-dejavu-core >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
        chromium-headless-shell fonts-dejavu-core >/dev/null
fi
python tools/check_docs_render.py --site "$CI_LANE_DIR/docs" --all
pip install --quiet pytest
run_pytest "the render check" tests/test_docs_render.py
echo "build checks ok: strict flags (gcc, clang, GCC 16), wheels cp311-cp315 + cp313t, docs (rendered at 1280 px)"
