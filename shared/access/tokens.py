"""Client tokens: `<client>.<secret>`, the secret 32 random bytes (base64url). Only the SHA-256 of
the secret is stored: a token has the entropy of a key, so a slow password hash would add
nothing but CPU on every authenticate, and the database never holds anything that could be
replayed.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

CLIENT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def check_name(name: object) -> str:
    if not isinstance(name, str) or not CLIENT_NAME.fullmatch(name):
        raise ValueError(f"client name must be 1-64 of a-z, 0-9, '_' or '-', starting with a letter or digit: "
                         f"{name!r}")
    return name


def new_token(name: str) -> tuple[str, str]:
    """A fresh token for client `name`: (the token, to hand to the client once; its digest, to store)."""
    secret = secrets.token_urlsafe(32)
    return f"{check_name(name)}.{secret}", digest(secret)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse(token: str) -> tuple[str, str] | None:
    """(client name, digest of the secret), or None when the text is not a token."""
    if not isinstance(token, str) or len(token) > 200:
        return None
    name, dot, secret = token.partition(".")
    if not dot or not secret or not CLIENT_NAME.fullmatch(name):
        return None
    return name, digest(secret)


def same(a: str | None, b: str | None) -> bool:
    """Constant-time comparison of two digests (None matches nothing)."""
    return a is not None and b is not None and hmac.compare_digest(a, b)
