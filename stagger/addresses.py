"""Network addresses as they are written on a command line or in an environment variable."""

from __future__ import annotations


def parse_host_port(text: str, *, name: str) -> tuple[str, int]:
    """`HOST:PORT` as (host, port); an IPv6 host is written in brackets (`[::1]:8080`) and returned without.

    Port 0 is allowed (the system picks a free port). `name` (the flag or variable the text came from)
    starts the message of the ValueError raised for anything else.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"{name}: expected HOST:PORT such as 127.0.0.1:8080 (got {text!r})")
    return host.strip("[]"), int(port)
