#!/usr/bin/env bash
# Type-check delayq's installed package with mypy (settings in setup.cfg, [mypy]); exits non-zero
# on a type error. scripts/test.sh runs it before the tests.
# mypy reads the package through the editable install's link tree (see scripts/venv.sh), so it
# names files by their links, build/__editable__.*/delayq/nodes/x.py; each error is shown at the
# file it links to, nodes/x.py, which is the one to edit.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
set +e
python -m mypy --config-file setup.cfg "$@" 2>&1 | python -c '
import os, re, sys
for line in sys.stdin:
    m = re.match(r"([^:\s]*__editable__[^:\s]*\.py)(:.*)", line, re.S)
    if m and os.path.exists(m.group(1)):
        line = os.path.relpath(os.path.realpath(m.group(1))) + m.group(2)
    sys.stdout.write(line)
'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    echo "typecheck.sh: mypy found type errors (above); fix them before running the tests" >&2
fi
exit "$rc"
