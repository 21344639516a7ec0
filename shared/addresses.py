"""host:port lists of a replicated service's members (DELAYQ_MYSQL_HOSTS, DELAYQ_AMQP_HOSTS), parsed
once. No dependency: the settings' loader checks them, and the client package imports the loader."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_addresses(text: str, default_port: int) -> tuple[Address, ...]:
    """'host:port, host, ...' (commas or spaces) as Addresses; ValueError names a bad one."""
    out = []
    for item in text.replace(",", " ").split():
        host, colon, port = item.rpartition(":")
        if not colon:
            host, port = item, str(default_port)
        if not host or "/" in host or "@" in host:
            raise ValueError(f"not host:port: {item!r}")
        try:
            number = int(port)
        except ValueError:
            raise ValueError(f"not host:port: {item!r}") from None
        if not 0 < number < 65536:
            raise ValueError(f"port out of range: {item!r}")
        out.append(Address(host, number))
    return tuple(out)
