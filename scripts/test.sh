#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian/Ubuntu machine: bring up ZooKeeper, MariaDB and
# RabbitMQ (installing what is missing), install the tools some tests drive (libfaketime for
# a node with a wrong clock, the Thrift compiler and Node.js for the client in another
# language, Chromium for the console's browser tests), install delayq into .venv, type-check it with mypy, run pytest.
# Arguments are passed to pytest, e.g. scripts/test.sh -k cancel
# The fast tier, scripts/test.sh tests/unit (or files under it): the unit tests touch none of the
# services nor those tools, so they are neither brought up nor installed for it.
set -euo pipefail
cd "$(dirname "$0")/.."

unit_only=0
for arg in "$@"; do
    case "$arg" in
        -*) ;;                                      # an option
        tests/unit | tests/unit/* | ./tests/unit | ./tests/unit/*) unit_only=1 ;;
        *) unit_only=0; break ;;                    # anything else may need the services
    esac
done

if [ "$unit_only" = 0 ]; then
    scripts/services.sh
    # shellcheck source=scripts/apt.sh
    . scripts/apt.sh
    missing=()
    command -v faketime >/dev/null 2>&1 || missing+=(faketime)
    command -v thrift >/dev/null 2>&1 || missing+=(thrift-compiler)
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)     # the console's browser tests
    command -v socat >/dev/null 2>&1 || missing+=(socat)           # delayq.testing.relay: a MySQL outage for some nodes only
    if [ ${#missing[@]} -gt 0 ]; then delayq_apt_install "${missing[@]}"; fi
fi
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
# A type error fails the run before any test does: it is cheaper to read than the test it breaks.
if ! scripts/typecheck.sh; then
    echo "test.sh: the type check failed (errors above); no tests were run" >&2
    exit 1
fi
exec python -m pytest "$@"
