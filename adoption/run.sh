#!/usr/bin/env bash
# adoption/run.sh NAME: a real library moved onto dlpack-ref's vendored header.
# Downloads NAME's pinned sdist, builds it as released and as adopted (the
# files in adoption/NAME/ replacing its own DLPack code), runs its own tests
# and `dlpack-ref check --library NAME` on both, prints the counts per build,
# and exits non-zero on any regression. Each library's steps are in
# adoption/NAME/run.sh; its source is downloaded at run time, never committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 1 || ! -f "$here/${1:-}/run.sh" ]]; then
    echo "usage: adoption/run.sh NAME   (NAME: $(cd "$here" && ls -d */ | tr -d / | tr '\n' ' '))" >&2
    exit 2
fi
name=$1
shift
exec bash "$here/$name/run.sh" "$@"
