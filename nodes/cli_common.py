"""What every `delayq` sub-command shares: settings from --config (a bad one is a usage error)."""
from __future__ import annotations

import click

from shared import config as config_mod
from shared.errors import ConfigError


def load_settings(config_file: str | None) -> config_mod.Settings:
    try:
        return config_mod.load(file=config_file)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
