"""What every `delayq` sub-command shares: settings from --config (a bad one is a usage error), the
client, and one mapping from errors to exit codes: 2 usage or configuration, 3 unreachable."""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import sys
from typing import Callable, NoReturn, TypeVar

import click
from thrift.Thrift import TException

from delayq import config as config_mod
from delayq.client import DelayqClient, discover
from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import ConfigError, Unavailable

EXIT_FAILURE, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
T = TypeVar("T")


def load_settings(config_file: str | None) -> config_mod.Settings:
    try:
        return config_mod.load(file=config_file)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def client(settings: config_mod.Settings, endpoints: tuple[str, ...]) -> DelayqClient:
    """A client over the given endpoints, or the cluster's live nodes found in ZooKeeper."""
    found = list(endpoints) or discover(settings.zk.hosts, settings.node.cluster, zk_auth=settings.zk.auth)
    if not found:
        raise Unavailable(f"no live node in cluster {settings.node.cluster!r}; give --endpoint")
    return DelayqClient(found)


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
    except (ConfigError, ttypes.InvalidService, ttypes.InvalidTask, ttypes.InvalidRequest, ttypes.UnknownTopic) as e:
        if isinstance(e, (ttypes.InvalidService, ttypes.InvalidTask, ttypes.InvalidRequest)):
            message = f"{e.field}: {e.reason}"
        elif isinstance(e, ttypes.UnknownTopic) and e.disabled:
            message = (f"topic {e.topic!r}: its service is disabled and takes no new tasks; enable it with "
                       f"`delayq services disable {e.topic} --enable`")
        elif isinstance(e, ttypes.UnknownTopic):
            message = f"unknown topic {e.topic!r}: register its service first (delayq services add)"
        else:
            message = str(e)
        fail(message, EXIT_USAGE, as_json)
    except ttypes.Conflict as e:
        fail(f"task {e.taskId!r}: {e.reason}", EXIT_USAGE, as_json)
    except ttypes.QuotaExceeded as e:
        fail(f"tenant {e.tenant!r} is over its {e.quota} quota of {e.limit} (delayq tenants show {e.tenant})",
             EXIT_FAILURE, as_json)
    except ttypes.Unauthenticated as e:
        fail(f"not authenticated: {e.reason} (give the client's token in DELAYQ_TOKEN_FILE or DELAYQ_TOKEN)",
             EXIT_USAGE, as_json)
    except ttypes.Forbidden as e:
        fail(f"forbidden: needs {e.permission}" + (f" on topic {e.topic!r}" if e.topic else ""), EXIT_FAILURE,
             as_json)
    except (Unavailable, ttypes.Unavailable) as e:
        fail(getattr(e, "reason", None) or str(e), EXIT_UNAVAILABLE, as_json)
    except (TException, OSError) as e:
        fail(str(e), EXIT_UNAVAILABLE, as_json)


# The latest instant the ISO form can say (9999-12-31T23:59:59.999Z), and the bound of every time
# and duration the command takes: past it, a value would not fit a Thrift i64 (or a due time added
# to it would not), and the call would fail in the client's encoder rather than on the command line.
MAX_MS = 253_402_300_799_999
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


def write_private(path: str, text: str) -> None:
    """Write text and a newline to path, readable by its owner only (tokens, URLs with passwords)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")


def call_nodes(config_file: str | None, endpoints: tuple[str, ...], fn: Callable[[DelayqClient], T],
               as_json: bool = False) -> T:
    """fn(client) on the given nodes (or the cluster's, found in ZooKeeper), its errors as `run` says them."""
    settings = load_settings(config_file)

    def go() -> T:
        with client(settings, endpoints) as c:
            return fn(c)
    return run(go, as_json)
