#!/usr/bin/env bash
# A "second site" for disaster-recovery drills: two MariaDB servers of their own on this machine,
# a primary (127.0.0.1:3321) and an asynchronous replica of it (127.0.0.1:3322, GTID replication),
# with their data under var/dr/ (git-ignored). The machine's own MariaDB (3306) is never touched.
#
#   scripts/dr.sh up             start both (made on first use), the replica following the primary
#   scripts/dr.sh status         each server's state and the replica's lag
#   scripts/dr.sh kill-primary   SIGKILL the primary: the disaster
#   scripts/dr.sh promote        the replica applies what it received, stops replicating, takes writes
#   scripts/dr.sh down           stop both
#   scripts/dr.sh reset          stop both and delete their data (the next `up` starts afresh)
#   scripts/dr.sh drill [ARGS]   the drill (python -m bench.dr ARGS): reset, up, kill, promote, repoint, down
#
# Env: DELAYQ_DR_DIR (var/dr), DELAYQ_DR_PRIMARY_PORT (3321), DELAYQ_DR_REPLICA_PORT (3322),
#      DELAYQ_DR_SEMI_SYNC=1 (semi-synchronous replication: a commit waits for the replica's receipt).
# The servers run a copy of mariadbd named mariadbd-dr, so that scripts/services.sh, which looks
# for the machine's server by its name and executable, never takes one of them for it. They run as
# root with an empty root password on loopback: a drill on a test machine, not a deployment.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${DELAYQ_DR_DIR:-$PWD/var/dr}"
PRIMARY_PORT="${DELAYQ_DR_PRIMARY_PORT:-3321}"
REPLICA_PORT="${DELAYQ_DR_REPLICA_PORT:-3322}"
SEMI_SYNC="${DELAYQ_DR_SEMI_SYNC:-0}"
BIN="$DIR/bin/mariadbd-dr"
REPL_PASSWORD="dr-repl-local"       # the replication account answers on loopback only
# The local CA and server certificate scripts/services.sh makes (for 127.0.0.1): with them, both
# servers take TLS, the replica replicates over it and the drill's nodes connect with it.
TLS_DIR="${DELAYQ_STATE_DIR:-/var/tmp/delayq}/rabbitmq-tls"

die() { echo "dr.sh: $*" >&2; exit 1; }
cli() { mariadb --no-defaults -uroot --socket="$DIR/$1/mysqld.sock" --connect-timeout=2 -N -e "$2"; }
answers() { cli "$1" "SELECT 1" >/dev/null 2>&1; }
pid_of() { cat "$DIR/$1/mysqld.pid" 2>/dev/null || true; }
DELAYQ_POLL_S=0.2      # a promotion is timed: poll the replica often
# shellcheck source=scripts/wait.sh
. "$PWD/scripts/wait.sh"

config() {  # name port server-id
    local d="$DIR/$1"
    mkdir -p "$d/data"
    cat >"$d/my.cnf" <<EOF
[mariadbd]
user = root
datadir = $d/data
socket = $d/mysqld.sock
pid-file = $d/mysqld.pid
log-error = $d/error.log
port = $2
bind-address = 127.0.0.1
server-id = $3
# Both write a binary log, so that the replica, once promoted, can be replicated in turn.
log-bin = $d/data/binlog
log-slave-updates = ON
binlog-format = ROW
sync-binlog = 1
innodb-flush-log-at-trx-commit = 1
innodb-buffer-pool-size = 64M
innodb-log-file-size = 48M
performance-schema = OFF
max-connections = 300
skip-slave-start = OFF
EOF
    if [ -s "$TLS_DIR/server.pem" ]; then
        printf 'ssl-ca = %s\nssl-cert = %s\nssl-key = %s\n' "$TLS_DIR/ca.pem" "$TLS_DIR/server.pem" \
            "$TLS_DIR/server.key" >>"$d/my.cnf"
    fi
    if [ "$SEMI_SYNC" = 1 ]; then
        printf 'rpl-semi-sync-master-enabled = ON\nrpl-semi-sync-slave-enabled = ON\nrpl-semi-sync-master-wait-point = AFTER_SYNC\nrpl-semi-sync-master-timeout = 10000\n' >>"$d/my.cnf"
    fi
}

start() {  # name port server-id
    local d="$DIR/$1"
    answers "$1" && return 0
    config "$@"
    if [ ! -d "$d/data/mysql" ]; then
        mariadb-install-db --defaults-file="$d/my.cnf" --auth-root-authentication-method=normal --skip-test-db \
            >"$d/install.log" 2>&1 || die "$1: mariadb-install-db failed (log: $d/install.log)"
    fi
    setsid "$BIN" --defaults-file="$d/my.cnf" >>"$d/error.log" 2>&1 </dev/null &
    wait_until 60 answers "$1" || die "$1: no answer on port $2 within 60 s (log: $d/error.log)"
    cli "$1" "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
              CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED BY '$REPL_PASSWORD';
              GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
}

follow() {  # the replica follows the primary from the start of its GTID history (both are new)
    local running
    running=$(cli replica "SHOW SLAVE STATUS" | wc -l)
    if [ "$running" = 0 ]; then
        cli replica "SET GLOBAL read_only = ON;
                     CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$PRIMARY_PORT, MASTER_USER='repl',
                       MASTER_PASSWORD='$REPL_PASSWORD', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1$(
                       [ -s "$TLS_DIR/server.pem" ] && echo ", MASTER_SSL=1, MASTER_SSL_CA='$TLS_DIR/ca.pem'");
                     START SLAVE;"
    fi
}

up() {
    command -v mariadb-install-db >/dev/null || die "MariaDB is not installed (scripts/services.sh installs it)"
    mkdir -p "$DIR/bin"
    cmp -s /usr/sbin/mariadbd "$BIN" || cp /usr/sbin/mariadbd "$BIN"      # again after an upgrade of MariaDB
    start primary "$PRIMARY_PORT" 1
    start replica "$REPLICA_PORT" 2
    follow
    echo "primary 127.0.0.1:$PRIMARY_PORT, replica 127.0.0.1:$REPLICA_PORT (data in $DIR)"
}

stop_one() {
    local pid; pid=$(pid_of "$1")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid"
    wait_until 30 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null || true
}

status() {
    for name in primary replica; do
        if answers "$name"; then
            echo "$name: up, read_only=$(cli "$name" "SELECT @@read_only"), gtid=$(cli "$name" "SELECT @@gtid_current_pos")"
        else
            echo "$name: down"
        fi
    done
    if answers replica; then
        mariadb --no-defaults -uroot --socket="$DIR/replica/mysqld.sock" -e "SHOW SLAVE STATUS\G" 2>/dev/null | grep -E "Slave_(IO|SQL)_Running:|Seconds_Behind_Master|Gtid_IO_Pos|Last_IO_Error" \
            | sed 's/^ */  /' || true
    fi
}

promote() {
    answers replica || die "the replica does not answer"
    # What it received is applied first: the relay log holds transactions the primary committed.
    wait_until 60 bash -c "[ \"\$(mariadb --no-defaults -uroot --socket='$DIR/replica/mysqld.sock' -N -e \
        \"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Slave has read all relay log%'\")\" != 0 ] \
        || [ \"\$(mariadb --no-defaults -uroot --socket='$DIR/replica/mysqld.sock' -N -e 'SHOW SLAVE STATUS' | wc -l)\" = 0 ]" \
        || echo "dr.sh: the replica's relay log was not applied within 60 s; promoting anyway" >&2
    cli replica "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF;"
    echo "replica promoted: 127.0.0.1:$REPLICA_PORT takes writes (gtid $(cli replica "SELECT @@gtid_current_pos"))"
}

case "${1:-}" in
    up) up ;;
    status) status ;;
    kill-primary) pid=$(pid_of primary); [ -n "$pid" ] || die "no primary running"; kill -KILL "$pid"; echo "primary killed (pid $pid)" ;;
    promote) promote ;;
    down) stop_one primary; stop_one replica ;;
    reset) stop_one primary; stop_one replica; rm -rf "$DIR/primary" "$DIR/replica" ;;
    drill) shift; "${PYTHON:-python}" -m bench.dr "$@" ;;   # it resets, brings up and stops the servers itself
    *) sed -n '2,17p' "$0"; exit 2 ;;
esac
