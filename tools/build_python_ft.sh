#!/usr/bin/env bash
# Build, or reuse, a free-threaded CPython 3.13 ("python3.13t") for the CI's
# free-threading lane.
#
# Debian's own source package is the source (PyPI and Debian are the only
# networks CI may reach): a deb-src entry for the trixie suite, then
# `apt-get source --download-only python3.13`, and the upstream tarball it
# carries is configured with --disable-gil.  The install prefix lies outside
# the repository so that a second CI run on the same machine reuses the build;
# a stamp file written after `make install` succeeds marks it complete (an
# interrupted build leaves no stamp and is redone from scratch).
#
# Usage: tools/build_python_ft.sh            prints the interpreter's path
# Environment:
#   DLPACK_REF_FT_PREFIX   install prefix (default /opt/dlpack-ref-ci/python3.13t)
#   DLPACK_REF_FT_JOBS     make -j (default: number of CPUs)
set -euo pipefail

prefix=${DLPACK_REF_FT_PREFIX:-/opt/dlpack-ref-ci/python3.13t}
jobs=${DLPACK_REF_FT_JOBS:-$(nproc)}
configure_flags=(--disable-gil --without-ensurepip --prefix="$prefix")
python_bin="$prefix/bin/python3.13t"
stamp="$prefix/.dlpack-ref-build-stamp"
stamp_text="python3.13 from Debian trixie; configure ${configure_flags[*]}"

# shellcheck source=tools/build_lock.sh
. "$(dirname "${BASH_SOURCE[0]}")/build_lock.sh"

# The free-threaded lane and the build lane (its cp313t wheel) may ask at
# once: the second waits here for the first's build.
wait_for_build "$prefix"

# A stamped build whose interpreter really runs without the GIL is reused.
if [[ -f "$stamp" && "$(cat "$stamp")" == "$stamp_text" && -x "$python_bin" ]] \
   && "$python_bin" -c 'import sys, sysconfig; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))'; then
    log "reusing $python_bin ($stamp)"
    echo "$python_bin"
    exit 0
fi

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# The trixie deb-src entry lives in a private apt configuration (its own
# sources list, package lists and cache in the scratch folder): the machine's
# apt state is neither read nor changed, and no root is needed to download.
work=$(mktemp -d "${TMPDIR:-/tmp}/dlpack-ref-python-ft.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$work/apt/sources.list"
private_apt=(-o "Dir::Etc::sourcelist=$work/apt/sources.list" -o Dir::Etc::sourceparts=-
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
             -o Dir::State::status=/var/lib/dpkg/status -o Debug::NoLocking=1)
log "apt-get update (trixie deb-src only)"
apt-get -q "${private_apt[@]}" update >&2
cd "$work"
log "apt-get source --download-only python3.13 in $work"
apt-get -q "${private_apt[@]}" source --download-only python3.13 >&2
orig=$(ls python3.13_*.orig.tar.* | head -n1)
tar xf "$orig"
srcdir=$(find . -maxdepth 1 -type d -name 'Python-3.13*' | head -n1)
[[ -n "$srcdir" ]] || { log "no Python-3.13 tree in $orig"; exit 1; }
cd "$srcdir"

log "configure ${configure_flags[*]}"
./configure "${configure_flags[@]}" >"$work/configure.log" 2>&1 \
    || { tail -n 40 "$work/configure.log" >&2; exit 1; }
log "make -j$jobs"
make -j"$jobs" >"$work/make.log" 2>&1 || { tail -n 60 "$work/make.log" >&2; exit 1; }
as_root rm -rf "$prefix"
as_root mkdir -p "$prefix"
as_root make install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
"$python_bin" -c 'import sys; assert not sys._is_gil_enabled()'
echo "$stamp_text" | as_root tee "$stamp" >/dev/null
log "built $python_bin"
echo "$python_bin"
