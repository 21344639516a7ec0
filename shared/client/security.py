"""ClientSecurity: how a client reaches secured nodes: TLS verified against a CA, optionally a
client certificate, and a token. DelayqClient, the consumer helper and the `delayq` command
read the same settings from the environment:

    DELAYQ_TLS_CA_FILE            the CA that signs the nodes' certificates
    DELAYQ_TLS_CLIENT_CERT_FILE   this client's certificate (mTLS; its common name is the client)
    DELAYQ_TLS_CLIENT_KEY_FILE    its key
    DELAYQ_TOKEN, DELAYQ_TOKEN_FILE   the client's token (`delayq clients add` prints it once)
    DELAYQ_ZK_AUTH, DELAYQ_ZK_AUTH_FILE   the nodes' ZooKeeper identity: only for the deprecated
                                  DelayqClient.from_zookeeper and operators' commands
    DELAYQ_INSECURE=true          plaintext, no identity: for nodes run the same way, in development

Needs only the standard library.
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Mapping

from delayq.config import read_secret
from delayq.errors import ConfigError


# The settings a client reads (beside the node's own DELAYQ_TLS_CA_FILE and DELAYQ_INSECURE).
CLIENT_SETTINGS = ("DELAYQ_TLS_CLIENT_CERT_FILE", "DELAYQ_TLS_CLIENT_KEY_FILE", "DELAYQ_TOKEN", "DELAYQ_TOKEN_FILE")


@dataclass(frozen=True)
class ClientSecurity:
    insecure: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    token: str = field(default="", repr=False)      # never printed
    zk_auth: str = field(default="", repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ClientSecurity":
        env = os.environ if environ is None else environ
        return cls(insecure=env.get("DELAYQ_INSECURE", "").strip().lower() in ("1", "true", "yes", "on"),
                   ca_file=env.get("DELAYQ_TLS_CA_FILE", ""), cert_file=env.get("DELAYQ_TLS_CLIENT_CERT_FILE", ""),
                   key_file=env.get("DELAYQ_TLS_CLIENT_KEY_FILE", ""), token=env_secret(env, "DELAYQ_TOKEN"),
                   zk_auth=env_secret(env, "DELAYQ_ZK_AUTH"))

    def context(self) -> ssl.SSLContext | None:
        """The TLS context for a node's port (None: plaintext, insecure mode). The node's
        certificate is verified against ca_file (the system's CAs when none is given), host name
        included. A file that cannot be read or used is a ConfigError naming its setting."""
        if self.insecure:
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file or None)
        except (OSError, ValueError) as e:      # ssl.SSLError is an OSError
            raise ConfigError(f"DELAYQ_TLS_CA_FILE {self.ca_file}: {_why(e)}") from None
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file:
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file or None, password=lambda: b"")
            except (OSError, ValueError) as e:
                raise ConfigError(f"DELAYQ_TLS_CLIENT_CERT_FILE {self.cert_file} or DELAYQ_TLS_CLIENT_KEY_FILE "
                                  f"{self.key_file or '(none)'}: {_why(e)}") from None
        return ctx


def _why(e: Exception) -> str:
    """An ssl or file error's reason, without the errno prefix."""
    return getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e) or type(e).__name__


def env_secret(env: Mapping[str, str], name: str) -> str:
    """env[name], else the content of the file env[name + "_FILE"] names, else ""."""
    if env.get(name):
        return env[name]
    path = env.get(f"{name}_FILE")
    return read_secret(f"{name}_FILE", path).strip() if path else ""
