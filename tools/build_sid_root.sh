#!/usr/bin/env bash
# Build, or reuse, the Debian sid root that holds CPython 3.14, 3.15 and the
# debug build python3.14-dbg, with GCC 16, for CI's newest-Python lanes.
#
# Debian's source packages for 3.14 and 3.15 cannot be downloaded here, but
# sid's binary packages can: debootstrap makes a minimal sid root, then apt
# inside it adds the interpreters and the compilers.  The host's resolver, CA
# bundle and pip configuration are copied in, so pip inside reaches PyPI as it
# does outside.  The root lives outside the repository so that a later CI run
# on the same machine reuses it; a stamp written after the last step marks it
# complete (an interrupted build leaves no stamp and is redone from scratch).
#
# Usage: tools/build_sid_root.sh          prints the root's path (/proc mounted)
# Environment:
#   DLPACK_REF_SID_ROOT   the root (default /opt/dlpack-ref-ci/sid)
set -euo pipefail

root=${DLPACK_REF_SID_ROOT:-/opt/dlpack-ref-ci/sid}
packages=(python3.14 python3.14-dev python3.14-venv python3.14-dbg
          python3.15 python3.15-dev python3.15-venv gcc g++ make ca-certificates)
stamp="$root/.dlpack-ref-sid-stamp"
stamp_text="debian sid minbase; ${packages[*]}"

# shellcheck source=tools/build_lock.sh
. "$(dirname "${BASH_SOURCE[0]}")/build_lock.sh"

# CI runs two lanes at once: the second waits here for the first's build.
wait_for_build "$root"

# The lanes' child processes and multiprocessing need /proc inside the root.
mount_proc() {
    mkdir -p "$root/proc"
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
}

# Commands run inside the root see the host's network set-up as it is now
# (the resolver and the CA bundle can change between machines).
refresh_host_files() {
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    mkdir -p "$root/etc/ssl/certs"
    cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    if [[ -d /etc/xdg/pip ]]; then
        mkdir -p "$root/etc/xdg"
        rm -rf "$root/etc/xdg/pip" && cp -rL /etc/xdg/pip "$root/etc/xdg/pip"
    fi
    [[ -f /etc/pip.conf ]] && cp -L /etc/pip.conf "$root/etc/pip.conf"
    return 0
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$stamp_text" ]] \
   && chroot "$root" python3.14 -c 'import sys; assert sys.version_info[:2] == (3, 14)' 2>/dev/null \
   && chroot "$root" python3.15 -c 'import sys; assert sys.version_info[:2] == (3, 15)' 2>/dev/null; then
    refresh_host_files
    mount_proc
    log "reusing $root ($stamp)"
    echo "$root"
    exit 0
fi

command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    apt-get -q update >&2 && apt-get -q install -y debootstrap >&2
}
log "debootstrap sid into $root"
# A lane leaves /proc mounted inside the root; never delete through it.
if mountpoint -q "$root/proc" 2>/dev/null; then umount "$root/proc"; fi
rm -rf "$root"
mkdir -p "$root"
debootstrap --variant=minbase sid "$root" http://deb.debian.org/debian >&2
refresh_host_files
# The archive this machine reaches serves sid as of a fixed day, so its
# Release file can be past its Valid-Until date; the signature is still checked.
echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99dlpack-ref-no-valid-until"
log "apt-get install ${packages[*]}"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q update >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "${packages[@]}" >&2
chroot "$root" apt-get clean
# Debian's ca-certificates has just written its own bundle over the host's.
refresh_host_files
mount_proc
echo "$stamp_text" >"$stamp"
log "ready: $(chroot "$root" python3.14 -VV | head -n1); $(chroot "$root" python3.15 -VV | head -n1); $(chroot "$root" gcc --version | head -n1)"
echo "$root"
