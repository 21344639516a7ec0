#!/usr/bin/env bash
# Bring up the real stack and run delayq's main job on a fresh Debian/Ubuntu machine:
# services (ZooKeeper, MariaDB, RabbitMQ), delayq in .venv, the schema, a node, then the demo:
# register a topic, submit tasks, print them as they fire from RabbitMQ.
# DELAYQ_KEEP=1 leaves the node running afterwards (logs in var/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
DELAYQ_EXTRAS=test . scripts/venv.sh
mkdir -p var
delayq db init

pids=()
cleanup() {
    if [ "${DELAYQ_KEEP:-0}" != 1 ]; then
        for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
        wait 2>/dev/null || true
    fi
}
trap cleanup EXIT

port=${DELAYQ_PORT:-9090}
if python -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; then
    echo "a node already answers on 127.0.0.1:$port: using it"
else
    DELAYQ_PORT=$port delayq node >"var/node-$port.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do
        python -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
        kill -0 "${pids[-1]}" 2>/dev/null || { tail -20 "var/node-$port.log"; exit 1; }
        sleep 0.2
    done
    echo "node started on 127.0.0.1:$port (log: var/node-$port.log)"
fi
delayq demo --endpoint "127.0.0.1:$port"
