"""ClientSecurity: how a client reaches secured nodes: TLS verified against a CA, optionally a
client certificate, and a token. DelayqClient, the consumer helper and the `delayq` command
read the same settings from the environment:

    DELAYQ_TLS_CA_FILE            the CA that signs the nodes' certificates
    DELAYQ_TLS_CLIENT_CERT_FILE   this client's certificate (mTLS; its common name is the client)
    DELAYQ_TLS_CLIENT_KEY_FILE    its key
    DELAYQ_TOKEN, DELAYQ_TOKEN_FILE   the client's token (`delayq clients add` prints it once)
    DELAYQ_INSECURE=true          plaintext, no identity: for nodes run the same way, in development

Needs only the standard library.
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Mapping


# The settings a client reads (beside the node's own DELAYQ_TLS_CA_FILE and DELAYQ_INSECURE).
CLIENT_SETTINGS = ("DELAYQ_TLS_CLIENT_CERT_FILE", "DELAYQ_TLS_CLIENT_KEY_FILE", "DELAYQ_TOKEN", "DELAYQ_TOKEN_FILE")


@dataclass(frozen=True)
class ClientSecurity:
    insecure: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    token: str = field(default="", repr=False)      # never printed

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ClientSecurity":
        env = os.environ if environ is None else environ
        token = env.get("DELAYQ_TOKEN", "")
        if not token and env.get("DELAYQ_TOKEN_FILE"):
            try:
                with open(env["DELAYQ_TOKEN_FILE"], encoding="utf-8") as fh:
                    token = fh.read().strip()
            except (OSError, UnicodeDecodeError) as e:
                raise ValueError(f"DELAYQ_TOKEN_FILE: cannot read {env['DELAYQ_TOKEN_FILE']}: "
                                 f"{getattr(e, 'strerror', None) or 'not UTF-8 text'}") from None
        return cls(insecure=env.get("DELAYQ_INSECURE", "").strip().lower() in ("1", "true", "yes", "on"),
                   ca_file=env.get("DELAYQ_TLS_CA_FILE", ""), cert_file=env.get("DELAYQ_TLS_CLIENT_CERT_FILE", ""),
                   key_file=env.get("DELAYQ_TLS_CLIENT_KEY_FILE", ""), token=token)

    def context(self) -> ssl.SSLContext | None:
        """The TLS context for a node's port (None: plaintext, insecure mode). The node's
        certificate is verified against ca_file (the system's CAs when none is given), host name
        included."""
        if self.insecure:
            return None
        ctx = ssl.create_default_context(cafile=self.ca_file or None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None, password=lambda: b"")
        return ctx
