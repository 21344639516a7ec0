# shellcheck shell=bash
# Source me: the waits the service scripts share.

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT (bash /dev/tcp, no nc needed).
port_open() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# wait_until SECONDS CMD...: poll CMD every 0.5 s (DELAYQ_POLL_S) until it succeeds or the deadline passes.
wait_until() {
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep "${DELAYQ_POLL_S:-0.5}"
    done
}
