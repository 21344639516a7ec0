# shellcheck shell=bash
# Source me:  . scripts/venv.sh
# Ensures a Python >= 3.11, creates <repo>/.venv if missing, activates it, and runs
# `pip install -e ".[${DELAYQ_EXTRAS:-test}]"` in setuptools' strict editable mode only when
# setup.cfg, the extras or the set of package files changed since the last install (stamp:
# .venv/.delayq-installed).
# Strict mode installs a tree of links, build/__editable__.*/delayq/, laid out as the package is
# named (shared/ as delayq/, nodes/ as delayq/nodes/, ...), and puts that folder on sys.path: a
# type checker or an editor resolves `delayq.*` through it, which it cannot through the default
# mode's import hook. Edits to a file show at once; a file added or removed needs a new link tree,
# hence the package files' names in the stamp.
# Does not change the caller's shell options; returns non-zero on failure.
# Env: DELAYQ_PYTHON (interpreter to use), DELAYQ_EXTRAS (default: test).

_delayq_py_ok() {  # _delayq_py_ok PYTHON: runs and is >= 3.11
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

# shellcheck source=scripts/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
_delayq_apt() { delayq_apt_install "$@"; }

_delayq_find_python() {  # prints the first usable interpreter
    local c
    for c in ${DELAYQ_PYTHON:-} python3 python3.13 python3.12 python3.11; do
        if command -v "$c" >/dev/null 2>&1 && _delayq_py_ok "$c"; then command -v "$c"; return 0; fi
    done
    return 1
}

_delayq_venv() {
    local root py ver stamp files state extras="${DELAYQ_EXTRAS:-test}" f need=""
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1

    if ! py="$(_delayq_find_python)"; then
        _delayq_apt python3 python3-venv python3-pip || return 1
        # e.g. Ubuntu 22.04: python3 is 3.10, but python3.11 is packaged
        _delayq_find_python >/dev/null || _delayq_apt python3.11 python3.11-venv || true
        py="$(_delayq_find_python)" || {
            echo "venv.sh: need Python >= 3.11, found $(python3 --version 2>&1 || echo 'no usable python3')" >&2; return 1; }
    fi

    # (Re)create the venv if missing, broken, or too old.
    if ! _delayq_py_ok "$root/.venv/bin/python"; then
        if ! "$py" -m venv --clear "$root/.venv" >/dev/null 2>&1; then
            # Debian/Ubuntu ship ensurepip separately (python3-venv / python3.X-venv).
            ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
            _delayq_apt python3-venv "python${ver}-venv" || _delayq_apt python3-venv || return 1
            "$py" -m venv --clear "$root/.venv" || { echo "venv.sh: python -m venv failed" >&2; return 1; }
        fi
        echo "venv.sh: created $root/.venv ($("$root/.venv/bin/python" --version 2>&1))" >&2
    fi

    # shellcheck disable=SC1091
    . "$root/.venv/bin/activate" || return 1

    stamp="$root/.venv/.delayq-installed"
    files="$(cd "$root" && find shared nodes master ops sql -name __pycache__ -prune -o -type f -print |
        LC_ALL=C sort | cksum)"
    state="$extras strict $files"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$state" ]; then need=1; fi
    for f in setup.cfg setup.py pyproject.toml; do
        if [ -f "$root/$f" ] && [ "$root/$f" -nt "$stamp" ]; then need=1; fi
    done
    # The link tree lives in build/, which a clean of the work tree removes.
    [ -n "$need" ] || (cd / && python -c 'import delayq') 2>/dev/null || need=1
    if [ -n "$need" ]; then
        echo "venv.sh: pip install -e .[$extras] (strict editable mode)" >&2
        (cd "$root" && python -m pip install -q -e ".[$extras]" --config-settings editable_mode=strict) || {
            echo "venv.sh: pip install failed" >&2; return 1; }
        printf '%s\n' "$state" >"$stamp"
    fi
}

_delayq_venv
_delayq_venv_rc=$?
unset -f _delayq_venv _delayq_find_python _delayq_apt _delayq_py_ok
if [ "$_delayq_venv_rc" -ne 0 ]; then
    unset _delayq_venv_rc
    return 1 2>/dev/null || exit 1
fi
unset _delayq_venv_rc
