# shellcheck shell=bash
# Source me: delayq_apt_install PACKAGE...  installs Debian packages as root or via sudo.
# Another apt or dpkg run holding the lock (unattended upgrades on a fresh machine) is waited
# for up to DELAYQ_APT_LOCK_TIMEOUT seconds (default 300) instead of failing at once.
# Output goes to ${DELAYQ_STATE_DIR:-/var/tmp/delayq}/apt.log; its tail is printed on failure.

delayq_apt_install() {
    local sudo="" log lock_wait="${DELAYQ_APT_LOCK_TIMEOUT:-300}"
    command -v apt-get >/dev/null 2>&1 || { echo "apt.sh: no apt-get here; install $* by hand" >&2; return 1; }
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "apt.sh: need root or sudo to install $*" >&2; return 1; }
        sudo="sudo"
    fi
    mkdir -p "${DELAYQ_STATE_DIR:-/var/tmp/delayq}"
    log="${DELAYQ_STATE_DIR:-/var/tmp/delayq}/apt.log"
    echo "apt.sh: installing $* (waiting up to ${lock_wait}s for another apt run to finish)" >&2
    local apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -q -o "DPkg::Lock::Timeout=$lock_wait")
    if [ -z "${_DELAYQ_APT_UPDATED:-}" ]; then
        "${apt[@]}" update >>"$log" 2>&1 || {
            tail -n 20 "$log" >&2; echo "apt.sh: apt-get update failed (log: $log)" >&2; return 1; }
        _DELAYQ_APT_UPDATED=1
    fi
    "${apt[@]}" install -y --no-install-recommends "$@" >>"$log" 2>&1 || {
        tail -n 20 "$log" >&2; echo "apt.sh: apt-get install $* failed (log: $log)" >&2; return 1; }
}
