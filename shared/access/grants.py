"""Permissions and the clients that hold them.

A grant is a permission on a topic pattern: `submit`, `cancel` (also reschedule), `read` (get,
listServices), `report` (reportResult) on topics matching the pattern (`*` matches any run of
characters: `orders.*`, `*`), or `admin` (registerService, cluster; its pattern is always `*`).
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from delayq.access.tokens import check_name

PATTERN = re.compile(r"[A-Za-z0-9*][A-Za-z0-9._*-]{0,127}")


class Permission(str, enum.Enum):
    SUBMIT = "submit"
    CANCEL = "cancel"
    READ = "read"
    REPORT = "report"
    ADMIN = "admin"


def check_grant(permission: str, pattern: str) -> tuple[Permission, str]:
    """A grant as given by an operator, checked: ValueError names what is wrong."""
    try:
        perm = Permission(permission)
    except ValueError:
        raise ValueError(f"unknown permission {permission!r}: one of "
                         f"{', '.join(p.value for p in Permission)}") from None
    if perm is Permission.ADMIN and pattern != "*":
        raise ValueError("admin is cluster-wide: its pattern must be '*'")
    if not isinstance(pattern, str) or not PATTERN.fullmatch(pattern):
        raise ValueError(f"topic pattern must be letters, digits, '.', '_', '-' and '*': {pattern!r}")
    return perm, pattern


def _regex(pattern: str) -> str:
    return ".*".join(re.escape(part) for part in pattern.split("*"))


@dataclass(frozen=True)
class Client:
    """A client as the nodes know it. `token` is the digest of its current token's secret (None:
    certificate only); `retired` the digests of its last tokens that no longer work, each with why
    (`revoked`, `rotated`), so that a refusal can say which."""
    name: str
    token: str | None
    revoked: bool = False
    grants: frozenset[tuple[Permission, str]] = frozenset()
    retired: tuple[tuple[str, str], ...] = ()
    _matchers: dict = field(default_factory=dict, compare=False, repr=False)
    _seen: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        by_perm: dict[Permission, list[str]] = {}
        for perm, pattern in self.grants:
            by_perm.setdefault(perm, []).append(pattern)
        for perm, patterns in by_perm.items():
            self._matchers[perm] = re.compile("|".join(f"(?:{_regex(p)})" for p in sorted(patterns)))

    def holds(self, permission: Permission) -> bool:
        """It has this permission on some topic."""
        return permission in self._matchers

    def everywhere(self, permission: Permission) -> bool:
        """It has this permission on every topic (no topic lookup needed)."""
        return (permission, "*") in self.grants

    def allows(self, permission: Permission, topic: str) -> bool:
        key = (permission, topic)
        known = self._seen.get(key)
        if known is None:
            matcher = self._matchers.get(permission)
            known = matcher is not None and matcher.fullmatch(topic) is not None
            if len(self._seen) < 10_000:        # topics are bounded by the services; ids of junk are not
                self._seen[key] = known
        return known
