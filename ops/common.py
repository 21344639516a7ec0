"""What every `delayq` sub-command shares: settings from --config (a bad one is a usage error), the
client, and one mapping from errors to exit codes: 2 usage or configuration, 3 unreachable.

`run` maps the errors of a command's calls; `Commands`, the `delayq` group, maps a configuration
error or an outage that a command let through, so that none ends as a traceback."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import sys
import tempfile
from typing import Any, Callable, NoReturn, TypeVar

import click
from thrift.Thrift import TException

from delayq import config as config_mod
from delayq.addresses import parse_addresses
from delayq.clock import LATEST_MS
from delayq.client import DelayqClient
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.scheduler import live_endpoints, parse_endpoint
from delayq.client.zkdiscovery import live_members
from delayq.errors import LOGIN_REFUSED, PRIVILEGE_MISSING, ConfigError, StoreUnavailable, Unavailable

EXIT_FAILURE, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
T = TypeVar("T")


def load_settings(config_file: str | None) -> config_mod.Settings:
    try:
        return config_mod.load(file=config_file)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def checked_endpoints(endpoints: tuple[str, ...] | list[str]) -> None:
    """A usage error naming --endpoint unless each is HOST:PORT."""
    for e in endpoints:
        try:
            parse_endpoint(e)
        except ValueError:
            raise click.BadParameter(f"{e!r}: expected HOST:PORT, e.g. 127.0.0.1:9090",
                                     param_hint="'--endpoint'") from None


def node_endpoints(settings: config_mod.Settings, endpoints: tuple[str, ...] | list[str]) -> list[str]:
    """The nodes a command talks to: those --endpoint names; else the live nodes that the seeds of
    DELAYQ_SEEDS name (with the client's own token); else the live nodes ZooKeeper lists (with
    delayq's ZooKeeper identity: an operator's setting, not a business client's)."""
    checked_endpoints(endpoints)
    if endpoints:
        return list(endpoints)
    seeds = [f"{a.host}:{a.port}" for a in parse_addresses(settings.node.seeds, 9090)]
    try:
        found = live_endpoints(seeds) if seeds else live_members(settings.zk, settings.node.cluster)
    except (TException, OSError) as e:
        if isinstance(e, (ttypes.Unauthenticated, ttypes.Forbidden)):
            raise
        where = f"the seed nodes {', '.join(seeds)}" if seeds else f"ZooKeeper {settings.zk.hosts}"
        raise Unavailable(f"{where} named no live node: {getattr(e, 'reason', None) or e}") from None
    if not found:
        raise Unavailable(f"no live node in cluster {settings.node.cluster!r}; give --endpoint or DELAYQ_SEEDS")
    return found


def client(settings: config_mod.Settings, endpoints: tuple[str, ...]) -> DelayqClient:
    """A client over the nodes of node_endpoints."""
    return DelayqClient(node_endpoints(settings, endpoints))


def fail(message: str, code: int, as_json: bool = False) -> NoReturn:
    """End the command: the message on stderr (under --json, {"error": ...} on stdout), the exit code."""
    if as_json:
        click.echo(json.dumps({"error": message}))
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(code)


def run(fn: Callable[[], T], as_json: bool = False) -> T:
    """Run fn; turn delayq's and Thrift's errors into one clear line and the exit code."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - what `said` does not know is raised again
        found = said(e)
        if found is None:
            raise
        fail(*found, as_json)


def said(e: BaseException) -> tuple[str, int] | None:
    """The message and exit code of an error the command knows (None: not one of them)."""
    if isinstance(e, (ttypes.InvalidService, ttypes.InvalidTask, ttypes.InvalidRequest)):
        return f"{e.field}: {e.reason}", EXIT_USAGE
    if isinstance(e, ttypes.UnknownTopic) and e.disabled:
        return (f"topic {e.topic!r}: its service is disabled and takes no new tasks; enable it with "
                f"`delayq services disable {e.topic} --enable`", EXIT_USAGE)
    if isinstance(e, ttypes.UnknownTopic):
        return f"unknown topic {e.topic!r}: register its service first (delayq services add)", EXIT_USAGE
    if isinstance(e, ConfigError):
        return str(e), EXIT_USAGE
    if isinstance(e, ttypes.Conflict):
        return f"task {e.taskId!r}: {e.reason}", EXIT_USAGE
    if isinstance(e, ttypes.QuotaExceeded):
        return (f"tenant {e.tenant!r} is over its {e.quota} quota of {e.limit} (delayq tenants show {e.tenant})",
                EXIT_FAILURE)
    if isinstance(e, ttypes.Unauthenticated):
        return (f"not authenticated: {e.reason} (give the client's token in DELAYQ_TOKEN_FILE or DELAYQ_TOKEN)",
                EXIT_USAGE)
    if isinstance(e, ttypes.Forbidden):
        return f"forbidden: needs {e.permission}" + (f" on topic {e.topic!r}" if e.topic else ""), EXIT_FAILURE
    if isinstance(e, StoreUnavailable) and e.code in LOGIN_REFUSED | PRIVILEGE_MISSING:
        # MySQL answered, and refused the account: a configuration error, not an outage.
        reason = str(e).removeprefix("MySQL unavailable: ")
        if e.code in LOGIN_REFUSED:
            return f"MySQL refused the user or password of DELAYQ_MYSQL_URL: {reason}", EXIT_USAGE
        return (f"the MySQL account of DELAYQ_MYSQL_URL lacks a privilege this command needs: {reason} (`db init`, "
                "`db migrate` and `tenants` need an admin account, not the nodes'; after an upgrade, run "
                "`delayq db init --node-account` again)", EXIT_USAGE)
    if isinstance(e, (Unavailable, ttypes.Unavailable)):
        return getattr(e, "reason", None) or str(e), EXIT_UNAVAILABLE
    if isinstance(e, (TException, OSError)):
        return str(e), EXIT_UNAVAILABLE
    return None


class Commands(click.Group):
    """The `delayq` group. A configuration error (a bad DELAYQ_MYSQL_URL, a ZooKeeper identity
    refused) or an outage that a command did not turn into its own message ends as `run` ends it:
    one line and the exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        as_json = "--json" in ctx.args      # the sub-command's own arguments, before it parses them
        try:
            return super().invoke(ctx)
        except (ConfigError, Unavailable) as e:
            found = said(e)
            assert found is not None
            fail(*found, as_json)


MAX_MS = LATEST_MS      # every time and duration the command takes (delayq.clock)
_DURATION = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def instant(text: str | None) -> int | None:
    """Epoch milliseconds, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    if text.isascii() and text.isdigit():
        ms = int(text)
    else:
        try:
            t = dt.datetime.fromisoformat(text)
        except ValueError:
            raise click.BadParameter(f"{text!r} is neither epoch milliseconds nor an ISO 8601 time") from None
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
        ms = int(t.timestamp() * 1000)
    if ms > MAX_MS:
        raise click.BadParameter(f"{text!r} is after 9999-12-31T23:59:59.999Z (epoch ms {MAX_MS})")
    return ms


def duration_ms(text: str) -> int:
    """30s, 1500ms, 5m, 2h, 1d (or bare milliseconds)."""
    number = text.rstrip("smhd")
    unit = text[len(number):] or "ms"
    if not (number.isascii() and number.isdigit()) or unit not in _DURATION:
        raise click.BadParameter(f"{text!r}: expected a duration such as 30s, 1500ms, 5m, 2h or 1d")
    ms = int(number) * _DURATION[unit]
    if ms > MAX_MS:
        raise click.BadParameter(f"{text!r} is too long: at most {MAX_MS // _DURATION['d']}d ({MAX_MS} ms)")
    return ms


class _Parsed(click.ParamType):
    """An option parsed by one of the functions above: click names the option in its error."""

    def __init__(self, name: str, parse: Callable[[str], int | None]):
        self.name, self._parse = name, parse

    def convert(self, value, param, ctx) -> int | None:
        try:
            return self._parse(value)
        except click.BadParameter as e:
            self.fail(e.message, param, ctx)


DURATION = _Parsed("duration", duration_ms)
INSTANT = _Parsed("time", instant)


class _Seconds(click.FloatRange):
    """A wait in seconds (--timeout): 0 or more, and a number (click's FloatRange lets nan and inf
    through, and a wait until nan never ends)."""

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value, param, ctx) -> float:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


SECONDS = _Seconds()


def utc_time(ms: int | None) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time to the millisecond ("-" for none)."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def shown(text: str | None) -> str:
    """Text a client or an operator gave, as a terminal prints it safely: "-" for none, and each
    character that is not printable (a control character, a line separator) escaped as \\n, \\x1b
    or \\u2028, so that none can move the cursor, retitle the window or break a table's row."""
    if text is None:
        return "-"
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class PrivateFile:
    """A file only its owner may read, for a secret a command makes (a token, a URL with a
    password), readied before the change that makes the secret: a path that cannot be written is
    refused (a usage error naming `option`) while nothing has changed yet. The secret is written
    beside the path, then renamed onto it, so the file holds the old content or the new, whole.

        with PrivateFile(path, "--token-file") as out:   # refuses a bad path here
            secret = change()
            out.write(secret)                              # OSError: the caller must not lose it
    """

    def __init__(self, path: str, option: str):
        self.path, self._option = path, option
        self._temp: str | None = None

    def __enter__(self) -> "PrivateFile":
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            fd, self._temp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(self.path)}.")  # mode 0600
        except OSError as e:
            raise click.BadParameter(f"cannot write {self.path}: {e.strerror or e}",
                                     param_hint=f"'{self._option}'") from None
        os.close(fd)
        return self

    def write(self, text: str) -> None:
        """Write text and a newline to the file, readable by its owner only."""
        assert self._temp is not None, "write inside the with block"
        with open(self._temp, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        os.replace(self._temp, self.path)
        self._temp = None

    def __exit__(self, *exc: object) -> None:
        if self._temp is not None:          # nothing written: leave no trace
            with contextlib.suppress(OSError):
                os.unlink(self._temp)
            self._temp = None


def call_nodes(config_file: str | None, endpoints: tuple[str, ...], fn: Callable[[DelayqClient], T],
               as_json: bool = False) -> T:
    """fn(client) on the given nodes (or the cluster's, found in ZooKeeper), its errors as `run` says them."""
    settings = load_settings(config_file)

    def go() -> T:
        with client(settings, endpoints) as c:
            return fn(c)
    return run(go, as_json)
