"""What every `delayq` sub-command shares: settings from --config (a bad one is a usage error), the
client, and one mapping from errors to exit codes: 2 usage or configuration, 3 unreachable."""
from __future__ import annotations

import sys
from typing import Callable, TypeVar

import click
from thrift.Thrift import TException

from shared import config as config_mod
from shared.client import DelayqClient, discover
from shared.errors import ConfigError, Unavailable
from shared.gen.delayq_thrift import ttypes

EXIT_FAILURE, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
T = TypeVar("T")


def load_settings(config_file: str | None) -> config_mod.Settings:
    try:
        return config_mod.load(file=config_file)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def client(settings: config_mod.Settings, endpoints: tuple[str, ...]) -> DelayqClient:
    """A client over the given endpoints, or the cluster's live nodes found in ZooKeeper."""
    found = list(endpoints) or discover(settings.zk.hosts, settings.node.cluster)
    if not found:
        raise Unavailable(f"no live node in cluster {settings.node.cluster!r}; give --endpoint")
    return DelayqClient(found)


def run(fn: Callable[[], T]) -> T:
    """Run fn; turn delayq's and Thrift's errors into one clear line and the exit code."""
    try:
        return fn()
    except (ConfigError, ttypes.InvalidService) as e:
        message, code = (f"{e.field}: {e.reason}" if isinstance(e, ttypes.InvalidService) else str(e)), EXIT_USAGE
    except (Unavailable, ttypes.Unavailable) as e:
        message, code = getattr(e, "reason", None) or str(e), EXIT_UNAVAILABLE
    except (TException, OSError) as e:
        message, code = str(e), EXIT_UNAVAILABLE
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
