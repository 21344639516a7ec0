"""ConsumerSettings: where the consumer helper connects, read from the environment variables the
nodes read for the same things (docs/consumers.md, "Connecting"):

    DELAYQ_AMQP_URL, DELAYQ_AMQP_URL_FILE   RabbitMQ's URL (amqps:// for TLS, with user and vhost);
                                            the _FILE form names a file holding it (it has a password)
    DELAYQ_AMQP_CA_FILE                     the CA of RabbitMQ's certificate, for amqps://
    DELAYQ_CLUSTER                          the cluster's name: its results queue is
                                            delayq.results.<cluster> (unset: asked of a node, which
                                            takes the `admin` grant)

An argument given to TaskConsumer wins over its variable. With neither, the URL is the nodes' own
default (guest on 127.0.0.1:5672, vhost /). Needs only the standard library.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from delayq.client.security import env_secret
from delayq.options import SETTINGS

DEFAULT_AMQP_URL: str = next(s.default for s in SETTINGS if s.env == "DELAYQ_AMQP_URL")


@dataclass(frozen=True)
class ConsumerSettings:
    amqp_url: str = field(default=DEFAULT_AMQP_URL, repr=False)     # holds a password: never printed
    amqp_ca_file: str = ""
    cluster: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ConsumerSettings":
        """ConfigError (naming the variable and the file) when DELAYQ_AMQP_URL_FILE cannot be read."""
        env = os.environ if environ is None else environ
        return cls(amqp_url=env_secret(env, "DELAYQ_AMQP_URL") or DEFAULT_AMQP_URL,
                   amqp_ca_file=env.get("DELAYQ_AMQP_CA_FILE", "").strip(),
                   cluster=env.get("DELAYQ_CLUSTER", "").strip() or None)

    def given(self, amqp_url: str | None, amqp_ca_file: str | None, cluster: str | None) -> "ConsumerSettings":
        """These settings with what was passed in explicitly (None: not given) put over them."""
        return ConsumerSettings(amqp_url=self.amqp_url if amqp_url is None else amqp_url,
                                amqp_ca_file=self.amqp_ca_file if amqp_ca_file is None else amqp_ca_file,
                                cluster=self.cluster if cluster is None else cluster)
