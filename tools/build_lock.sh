# Helpers of the tools/build_*.sh scripts, each of which builds one thing
# that several CI lanes reuse (sourced by them, not run): their log line and
# the lock under which a second lane waits for the first one's build.

# log MESSAGE...: one line on stderr, named by the script that sourced this.
log() { echo "[$(basename "$0" .sh)] $*" >&2; }

# wait_for_build PATH: hold PATH.lock (file descriptor 9) for the rest of the
# script; a lane that asks while another builds PATH waits here.
wait_for_build() {
    mkdir -p "$(dirname "$1")"
    exec 9>"$1.lock"
    flock 9
}
