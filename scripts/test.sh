#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian/Ubuntu machine: bring up ZooKeeper, MariaDB and
# RabbitMQ (installing what is missing), install delayq into .venv, run pytest.
# Arguments are passed to pytest, e.g. scripts/test.sh -k cancel
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
exec python -m pytest "$@"
