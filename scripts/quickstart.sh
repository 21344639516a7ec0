#!/usr/bin/env bash
# Bring up the real stack and run delayq's main job on a fresh Debian/Ubuntu machine:
# services (ZooKeeper, MariaDB, RabbitMQ), delayq in .venv, the schema, a 3-node cluster on
# 127.0.0.1:9090-9092, then the demo: register a topic, submit tasks, print them as they fire.
# Secured as in production: a development CA and node certificate (var/tls/), TLS on every node's
# Thrift port, a client `demo` whose token (var/demo.token) the demo calls with, and delayq's own
# ZooKeeper identity (var/zk.auth, a copy of the machine's), the only one that can read or change
# its znodes, and RabbitMQ over TLS as delayq's own user in its own vhost (set up by services.sh).
# DELAYQ_KEEP=1 leaves the nodes running afterwards (logs in var/).
set -euo pipefail
# A step that fails stops the Quickstart; say which, beside the message the command printed.
trap 'echo "quickstart.sh: \`$BASH_COMMAND\` failed (exit $?)" >&2' ERR
cd "$(dirname "$0")/.."
scripts/services.sh
. scripts/venv.sh
mkdir -p var
# The schema, and the nodes' own MySQL account (delayq's tables only): its URL in var/mysql-node.url.
delayq db init --node-account delayq_node --node-url-file var/mysql-node.url
delayq certs dev --dir var/tls >/dev/null
export DELAYQ_TLS_CERT_FILE=var/tls/node.pem DELAYQ_TLS_KEY_FILE=var/tls/node.key DELAYQ_TLS_CA_FILE=var/tls/ca.pem
# The demo's client: admin (it registers its topic and reads the cluster) and its own topic; its
# token in var/demo.token: a new one if that file is gone, or if its token is no longer valid
# (another checkout sharing the database ran its Quickstart and rotated it).
delayq clients add demo --grant 'admin:*' --grant submit:demo --grant cancel:demo --grant read:demo \
    --grant report:demo --token-file var/demo.token --exist-ok
export DELAYQ_TOKEN_FILE=var/demo.token
# delayq's ZooKeeper identity: one for the machine, kept beside the local ZooKeeper's data, since
# the cluster's znodes refuse every identity but the one that made them (a second checkout, or this
# one cloned again, would otherwise make a new one and be locked out). var/zk.auth is its copy.
zk_auth="${DELAYQ_STATE_DIR:-/var/tmp/delayq}/zookeeper/delayq.auth"
if [ ! -s "$zk_auth" ]; then
    if [ -s var/zk.auth ]; then     # made here by an earlier Quickstart: its znodes know it
        (umask 077 && cp var/zk.auth "$zk_auth")
    else
        (umask 077 && python -c "import secrets; print('delayq:' + secrets.token_urlsafe(24))" >"$zk_auth")
    fi
fi
(umask 077 && cp "$zk_auth" var/zk.auth)
export DELAYQ_ZK_AUTH_FILE=var/zk.auth
rabbit_tls="${DELAYQ_STATE_DIR:-/var/tmp/delayq}/rabbitmq-tls"
(umask 077 && echo "amqps://delayq:$(cat "$rabbit_tls/delayq.password")@127.0.0.1:${DELAYQ_RABBITMQ_TLS_PORT:-5671}/delayq" \
    >var/amqp.url)
export DELAYQ_AMQP_URL_FILE=var/amqp.url DELAYQ_AMQP_CA_FILE="$rabbit_tls/ca.pem"

pids=()
cleanup() {
    if [ "${DELAYQ_KEEP:-0}" != 1 ]; then
        for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
        wait 2>/dev/null || true
    fi
}
trap cleanup EXIT

answers() { python -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null; }

endpoints=()
for i in 1 2 3; do
    port=$((9089 + i))
    endpoints+=(--endpoint "127.0.0.1:$port")
    if answers "$port"; then
        echo "a node already answers on 127.0.0.1:$port: using it"
        continue
    fi
    DELAYQ_PORT=$port DELAYQ_NODE_ID="node$i" DELAYQ_MYSQL_URL_FILE=var/mysql-node.url \
        delayq node >"var/node$i.log" 2>&1 &
    pids+=($!)
done
# Wait until every node is a member and the master has assigned every shard. `delayq status`
# failing is expected while the nodes start (exit 3: none answers yet), and is reported as it is
# when it persists; any other failure will not pass by waiting (exit 2: a usage or configuration
# error, a token the nodes refuse included) and stops the Quickstart at once, with its message.
formed() { python -c "import json,sys; r=json.load(sys.stdin); sys.exit(not (len(r['nodes']) >= 3 and len(r['assignment']) == r['shards']))"; }
deadline=$((SECONDS + 60))
last=""
while :; do
    rc=0
    out="$(delayq status "${endpoints[@]}" --json 2>&1)" || rc=$?
    if [ "$rc" = 0 ]; then
        if formed <<<"$out" 2>/dev/null; then break; fi
        last="the nodes answer, but not all 3 have joined or not every shard is assigned yet"
    elif [ "$rc" = 3 ]; then
        last="\`delayq status\` failed (exit 3): $out"
    else
        echo "quickstart.sh: \`delayq status ${endpoints[*]} --json\` failed (exit $rc): $out" >&2
        exit 1
    fi
    for i in "${!pids[@]}"; do
        kill -0 "${pids[$i]}" 2>/dev/null || {
            echo "quickstart.sh: a node exited (pid ${pids[$i]}); the nodes' logs:" >&2; tail -n 20 var/node*.log; exit 1; }
    done
    if [ $SECONDS -ge $deadline ]; then
        echo "quickstart.sh: the cluster did not form within 60 s; the last check: $last" >&2
        tail -n 20 var/node*.log
        exit 1
    fi
    sleep 0.5
done
delayq status "${endpoints[@]}"
echo
echo "The web console: https://127.0.0.1:10090/ui/ (any node: HTTP port = Thrift port + 1000; the CA is"
echo "var/tls/ca.pem). Log in with the demo client's token, in var/demo.token; DELAYQ_KEEP=1 keeps it running."
echo
delayq demo "${endpoints[@]}"
