#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian/Ubuntu machine: bring up ZooKeeper, MariaDB and
# RabbitMQ (installing what is missing), install the tools some tests drive (libfaketime for
# a node with a wrong clock, the Thrift compiler and Node.js for the client in another
# language), install delayq into .venv, run pytest.
# Arguments are passed to pytest, e.g. scripts/test.sh -k cancel
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
# shellcheck source=scripts/apt.sh
. scripts/apt.sh
missing=()
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v thrift >/dev/null 2>&1 || missing+=(thrift-compiler)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then delayq_apt_install "${missing[@]}"; fi
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
exec python -m pytest "$@"
