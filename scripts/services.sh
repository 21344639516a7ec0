#!/usr/bin/env bash
# Bring up the backing services of delayq on loopback, idempotently:
# ZooKeeper (our own config + data under the state dir), MariaDB, RabbitMQ.
# A service that already answers on its port is left alone.
#
#   scripts/services.sh [--only zookeeper|mysql|rabbitmq]...   bring services up
#   scripts/services.sh stop-zookeeper                         stop the ZooKeeper we started
#   scripts/services.sh --ha [up|stop|status]                  the replicated topology (services-ha.sh)
set -euo pipefail

# The replicated topology runs beside the services below, on ports of its own: another script.
if [ "${1:-}" = "--ha" ]; then shift; exec "$(dirname "${BASH_SOURCE[0]}")/services-ha.sh" "$@"; fi

STATE_DIR="${DELAYQ_STATE_DIR:-/var/tmp/delayq}"
ZK_DIR="$STATE_DIR/zookeeper"
ZK_PORT="${DELAYQ_ZK_PORT:-2181}"
MYSQL_PORT="${DELAYQ_MYSQL_PORT:-3306}"
MYSQL_DB="${DELAYQ_MYSQL_DB:-delayq}"
AMQP_PORT="${DELAYQ_RABBITMQ_PORT:-5672}"
AMQPS_PORT="${DELAYQ_RABBITMQ_TLS_PORT:-5671}"
RABBIT_TLS_DIR="$STATE_DIR/rabbitmq-tls"
WAIT_SECONDS="${DELAYQ_SERVICE_TIMEOUT:-90}"
ALL_SERVICES=(zookeeper mysql rabbitmq)

usage() {
    cat <<EOF
Usage: $0 [--only zookeeper|mysql|rabbitmq]...   bring the services up (default: all)
       $0 stop-zookeeper                         stop the ZooKeeper started by this script
       $0 --ha [up|stop|status]                  ZooKeeper ensemble, RabbitMQ cluster and Galera
                                                 cluster on ports of their own (docs/topology.md)
Env: DELAYQ_STATE_DIR (${STATE_DIR}), DELAYQ_ZK_PORT (${ZK_PORT}),
     DELAYQ_MYSQL_PORT (${MYSQL_PORT}), DELAYQ_MYSQL_DB (${MYSQL_DB}),
     DELAYQ_RABBITMQ_PORT (${AMQP_PORT}), DELAYQ_RABBITMQ_TLS_PORT (${AMQPS_PORT}),
     DELAYQ_SERVICE_TIMEOUT (${WAIT_SECONDS}s)
RabbitMQ also gets a TLS listener (certificates and CA in $RABBIT_TLS_DIR) and a vhost and user
"delayq" allowed only delayq's exchanges and queues (password in $RABBIT_TLS_DIR/delayq.password).
EOF
}

die() { echo "services.sh: $*" >&2; exit 1; }

SUDO=""  # system-level steps (apt, service start, socket login) need root
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

# fail_with_log NAME LOGFILE...: print the tail of the first existing log, then exit 1.
fail_with_log() {
    local name="$1" f; shift
    echo "services.sh: $name did not come up (exited, or no answer within ${WAIT_SECONDS}s)" >&2
    for f in "$@"; do
        if [ -n "$f" ] && $SUDO test -s "$f"; then
            echo "--- tail of $f ---" >&2; $SUDO tail -n 30 "$f" >&2; break
        fi
    done
    exit 1
}

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT (bash /dev/tcp, no nc needed).
port_open() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# wait_until SECONDS CMD...: poll CMD every 0.5 s until it succeeds or the deadline passes.
wait_until() {
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

# shellcheck source=scripts/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_install() { delayq_apt_install "$@" || die "could not install $*"; }

# ---------------------------------------------------------------- ZooKeeper
zk_ruok() {
    local reply
    reply=$(timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT && printf ruok >&3 && cat <&3" 2>/dev/null) || true
    [ "$reply" = "imok" ]
}

zk_pid() {  # pid of the ZooKeeper we started, if it is still alive
    local pid
    pid=$(cat "$ZK_DIR/zookeeper.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q QuorumPeerMain "/proc/$pid/cmdline" 2>/dev/null \
        && echo "$pid"
}

zk_ready_or_dead() {  # stop polling early if the JVM we just launched has exited
    zk_ruok && return 0
    local pid
    pid=$(cat "$ZK_DIR/zookeeper.pid" 2>/dev/null) || return 1  # not written yet: keep polling
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null
}

zookeeper_up() {
    # Our own ZooKeeper started with an older config (e.g. a longer tick): restart it with this one.
    if zk_pid >/dev/null && [ -f "$ZK_DIR/conf/zoo.cfg" ] && ! grep -q '^tickTime=500$' "$ZK_DIR/conf/zoo.cfg"; then
        echo "zookeeper: restarting ours with the current config"
        zookeeper_stop >/dev/null
    fi
    if port_open "$ZK_PORT"; then
        if zk_ruok; then echo "zookeeper: already running on 127.0.0.1:$ZK_PORT"
        else echo "zookeeper: port 127.0.0.1:$ZK_PORT already in use (no answer to ruok; leaving it alone)"; fi
        return 0
    fi
    local how="started"
    if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then
        apt_install zookeeper default-jre-headless
        how="installed+started"
    fi
    [ -f /usr/share/java/zookeeper.jar ] || die "zookeeper: /usr/share/java/zookeeper.jar missing after install"

    mkdir -p "$ZK_DIR/conf" "$ZK_DIR/data"
    cat >"$ZK_DIR/conf/zoo.cfg" <<EOF
# generated by scripts/services.sh
# The server expires sessions in buckets of one tick: a short tick keeps a dead node's session
# from outliving its timeout by more than half a second (failover = session timeout + ~1 s).
tickTime=500
minSessionTimeout=2000
maxSessionTimeout=60000
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
dataDir=$ZK_DIR/data
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
autopurge.purgeInterval=1
EOF
    # zkServer.sh on Debian ignores ZOOCFGDIR/ZOO_LOG_DIR (zkEnv.sh hardcodes /etc, /var/log) and
    # has no slf4j binding on its classpath, so run the JVM directly; slf4j-simple logs to stderr.
    local cp="/usr/share/java/zookeeper.jar:$ZK_DIR/conf"
    [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
    local log="$ZK_DIR/zookeeper.log"
    # A pid file left by a ZooKeeper that died would make the first poll below take the new JVM
    # for one that already exited, before the new pid is written.
    rm -f "$ZK_DIR/zookeeper.pid"
    ( cd "$ZK_DIR" && exec setsid bash -c 'echo $$ >"$0"; exec "$@"' "$ZK_DIR/zookeeper.pid" \
        java -Xmx256m -Dorg.slf4j.simpleLogger.showDateTime=true \
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS" \
        -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_DIR/conf/zoo.cfg" \
        >"$log" 2>&1 </dev/null ) &
    wait_until "$WAIT_SECONDS" zk_ready_or_dead || true
    if ! zk_ruok; then
        zookeeper_stop >/dev/null 2>&1 || true   # do not leave a half-started JVM behind
        fail_with_log zookeeper "$log"
    fi
    echo "zookeeper: $how on 127.0.0.1:$ZK_PORT (pid $(cat "$ZK_DIR/zookeeper.pid"), dir $ZK_DIR)"
}

zookeeper_stop() {
    local pid
    if ! pid=$(zk_pid); then
        rm -f "$ZK_DIR/zookeeper.pid"
        echo "zookeeper: not running (no live pid in $ZK_DIR/zookeeper.pid)"; return 0
    fi
    kill "$pid"
    if ! wait_until 30 bash -c "! kill -0 $pid 2>/dev/null"; then kill -9 "$pid" 2>/dev/null || true; fi
    wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || die "zookeeper: pid $pid would not die"
    rm -f "$ZK_DIR/zookeeper.pid"
    echo "zookeeper: stopped (pid $pid)"
}

# ---------------------------------------------------------------- MariaDB
mysql_cli() { command -v mariadb || command -v mysql; }  # newer MariaDB drops the mysql* names
mysql_ping() { "$(command -v mariadb-admin || command -v mysqladmin)" -h127.0.0.1 -P"$MYSQL_PORT" -uroot --connect-timeout=2 ping >/dev/null 2>&1; }
mysql_tcp() { "$(mysql_cli)" -h127.0.0.1 -P"$MYSQL_PORT" -uroot --connect-timeout=5 -N -e "$1"; }

# The Galera members of `--ha` (their config file is named delayq-ha-*.cnf) are not the system's server.
system_mariadbd() { pgrep -a -x mariadbd 2>/dev/null | grep -qv -- '--defaults-file=[^ ]*delayq-ha-'; }
mysql_gone_or_up() { ! system_mariadbd || port_open "$MYSQL_PORT"; }

mysql_start() {
    # A server still shutting down closes its port before it exits and still holds the data
    # directory: wait for it to go (start-stop-daemon would take it for a running one).
    wait_until 120 mysql_gone_or_up || die "mysql: a mariadbd process neither exits nor answers"
    port_open "$MYSQL_PORT" && return 0
    # The init script's health check logs in with /etc/mysql/debian.cnf; where that file is missing
    # it waits 30 s and reports failure although the server runs, so it is used only with the file.
    if command -v service >/dev/null 2>&1 && [ -x /etc/init.d/mariadb ] && [ -r /etc/mysql/debian.cnf ] \
        && $SUDO service mariadb start >>"$STATE_DIR/mariadb-start.log" 2>&1; then
        return 0
    fi
    # No usable init script: start mariadbd ourselves.
    $SUDO install -d -o mysql -g mysql /run/mysqld
    if [ -z "$($SUDO ls -A /var/lib/mysql 2>/dev/null)" ]; then
        $SUDO "$(command -v mariadb-install-db || command -v mysql_install_db)" --user=mysql --datadir=/var/lib/mysql >>"$STATE_DIR/mariadb-start.log" 2>&1 \
            || die "mysql: mysql_install_db failed (log: $STATE_DIR/mariadb-start.log)"
    fi
    $SUDO start-stop-daemon --start --oknodo --background --output "$STATE_DIR/mariadbd.out" \
        --exec /usr/sbin/mariadbd -- --user=mysql --port="$MYSQL_PORT"
}

mysql_fix_root() {  # let root@localhost log in over TCP with an empty password (Debian: unix_socket only)
    mysql_tcp "SELECT 1" >/dev/null 2>&1 && return 0
    $SUDO "$(mysql_cli)" -uroot --protocol=socket -e "
        ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
        CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY '';
        GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;" \
        || die "mysql: could not enable TCP login for root via the unix socket"
}

mysql_up() {
    mkdir -p "$STATE_DIR"
    local how=""
    if port_open "$MYSQL_PORT"; then
        mysql_cli >/dev/null || apt_install mariadb-client
        mysql_tcp "SELECT 1" >/dev/null 2>&1 \
            || die "mysql: 127.0.0.1:$MYSQL_PORT answers but root cannot log in with an empty password (left alone)"
    else
        how="started"
        if [ ! -x /usr/sbin/mariadbd ] || ! mysql_cli >/dev/null; then
            apt_install mariadb-server mariadb-client
            how="installed+started"
        fi
        # the package's postinst may already have started it
        port_open "$MYSQL_PORT" || mysql_start
        wait_until "$WAIT_SECONDS" mysql_ping \
            || fail_with_log mysql /var/log/mysql/error.log "$STATE_DIR/mariadbd.out" "$STATE_DIR/mariadb-start.log"
        mysql_fix_root
    fi
    mysql_tcp "CREATE DATABASE IF NOT EXISTS \`$MYSQL_DB\` CHARACTER SET utf8mb4" \
        || die "mysql: could not create database $MYSQL_DB"
    if [ -z "$how" ]; then echo "mysql: already running on 127.0.0.1:$MYSQL_PORT (database $MYSQL_DB ok)"
    else echo "mysql: $how on 127.0.0.1:$MYSQL_PORT (database $MYSQL_DB ok)"; fi
}

# ---------------------------------------------------------------- RabbitMQ
rabbitmq_fail() {
    local logs
    logs=$($SUDO sh -c 'ls -t /var/log/rabbitmq/*.log /var/log/rabbitmq/startup_err 2>/dev/null' | head -n 3 || true)
    # shellcheck disable=SC2086  # plain paths, one per line
    fail_with_log rabbitmq $logs
}

rabbitmq_up() {
    if port_open "$AMQP_PORT"; then
        echo "rabbitmq: already running on 127.0.0.1:$AMQP_PORT"
        rabbitmq_secure
        return 0
    fi
    local how="started"
    if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
        apt_install rabbitmq-server
        how="installed+started"
    fi
    if ! port_open "$AMQP_PORT"; then  # the package's postinst may already have started it
        $SUDO env PATH="/usr/sbin:$PATH" rabbitmq-server -detached >/dev/null 2>&1 || true
    fi
    wait_until "$WAIT_SECONDS" port_open "$AMQP_PORT" || rabbitmq_fail
    timeout 60 $SUDO env PATH="/usr/sbin:$PATH" rabbitmqctl -q await_startup --timeout 50 >/dev/null 2>&1 \
        || rabbitmq_fail
    echo "rabbitmq: $how on 127.0.0.1:$AMQP_PORT (guest/guest)"
    rabbitmq_secure
}

rabbitmqctl_() { timeout 60 $SUDO env PATH="/usr/sbin:$PATH" rabbitmqctl -q "$@"; }

# rabbitmq_secure: a TLS listener on $AMQPS_PORT with a certificate for localhost/127.0.0.1 signed
# by a local CA, and the vhost and user "delayq" (configure, write and read only on names that
# start with "delayq", and write on the default exchange). Each step is skipped when already done; RabbitMQ restarts only when the
# listener is first added to its config.
rabbitmq_secure() {
    local conf=/etc/rabbitmq/rabbitmq.conf d="$RABBIT_TLS_DIR"
    if ! $SUDO test -s "$d/server.pem"; then
        command -v openssl >/dev/null 2>&1 || apt_install openssl
        $SUDO mkdir -p "$d"
        $SUDO openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
            -subj "/CN=delayq local RabbitMQ CA" -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
        $SUDO openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
            -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' | $SUDO tee "$d/san.ext" >/dev/null
        $SUDO openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
            -days 825 -extfile "$d/san.ext" -out "$d/server.pem" 2>/dev/null
        if id rabbitmq >/dev/null 2>&1; then $SUDO chown rabbitmq "$d/server.key"; fi
        $SUDO chmod 600 "$d/server.key" "$d/ca.key"
        $SUDO chmod 644 "$d/ca.pem" "$d/server.pem"
    fi
    if ! $SUDO grep -q '^listeners.ssl.default' "$conf" 2>/dev/null; then
        $SUDO tee -a "$conf" >/dev/null <<CONF
# delayq (scripts/services.sh): TLS listener for amqps://
listeners.ssl.default = 127.0.0.1:$AMQPS_PORT
ssl_options.cacertfile = $d/ca.pem
ssl_options.certfile = $d/server.pem
ssl_options.keyfile = $d/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
        echo "rabbitmq: restarting to add the TLS listener on 127.0.0.1:$AMQPS_PORT"
        rabbitmqctl_ stop >/dev/null 2>&1 || true
        wait_until "$WAIT_SECONDS" sh -c "! timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$AMQP_PORT' 2>/dev/null" \
            || die "rabbitmq: did not stop"
        $SUDO env PATH="/usr/sbin:$PATH" rabbitmq-server -detached >/dev/null 2>&1 || true
        wait_until "$WAIT_SECONDS" port_open "$AMQP_PORT" || rabbitmq_fail
        rabbitmqctl_ await_startup --timeout 50 >/dev/null 2>&1 || rabbitmq_fail
    fi
    wait_until "$WAIT_SECONDS" port_open "$AMQPS_PORT" || rabbitmq_fail
    if ! $SUDO test -s "$d/delayq.password"; then
        (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' | $SUDO tee "$d/delayq.password" >/dev/null)
        $SUDO chown "$(id -u)" "$d/delayq.password"      # the user who runs delayq reads it
    fi
    local pw; pw=$($SUDO cat "$d/delayq.password")
    rabbitmqctl_ list_vhosts --no-table-headers name | grep -qx delayq || rabbitmqctl_ add_vhost delayq >/dev/null
    if rabbitmqctl_ list_users --no-table-headers | awk '{print $1}' | grep -qx delayq; then
        rabbitmqctl_ change_password delayq "$pw" >/dev/null
    else
        rabbitmqctl_ add_user delayq "$pw" >/dev/null
    fi
    # configure, write, read; writing to amq.default is how results reach delayq.results.<cluster>.
    rabbitmqctl_ set_permissions -p delayq delayq '^delayq(\..*)?$' '^(delayq(\..*)?|amq\.default)$' \
        '^delayq(\..*)?$' >/dev/null
    echo "rabbitmq: TLS on 127.0.0.1:$AMQPS_PORT (CA $d/ca.pem); vhost and user delayq ($d/delayq.password)"
}

# ---------------------------------------------------------------- main
main() {
    local cmd="up" only=() s
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) usage; exit 0 ;;
            --only) [ $# -ge 2 ] || die "--only needs an argument"; IFS=, read -ra s <<<"$2"; only+=("${s[@]}"); shift ;;
            --only=*) IFS=, read -ra s <<<"${1#--only=}"; only+=("${s[@]}") ;;
            up|stop-zookeeper) cmd="$1" ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
        shift
    done
    if [ "$cmd" = "stop-zookeeper" ]; then zookeeper_stop; return; fi

    [ ${#only[@]} -gt 0 ] || only=("${ALL_SERVICES[@]}")
    local todo=()
    for s in "${only[@]}"; do
        case "$s" in
            zookeeper|zk) todo+=(zookeeper_up) ;;
            mysql|mariadb) todo+=(mysql_up) ;;
            rabbitmq|rabbit) todo+=(rabbitmq_up) ;;
            *) die "unknown service '$s' (expected zookeeper, mysql or rabbitmq)" ;;
        esac
    done
    for s in "${todo[@]}"; do "$s"; done
}

main "$@"
