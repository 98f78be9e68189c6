"""Kubernetes object names, defined once for every part (apimachinery's IsDNS1123Label and
IsDNS1123Subdomain, and a uid as the API server makes them): a namespace is a DNS-1123 label (at most 63
characters), a pod, Lease or policy name a DNS-1123 subdomain (at most 253), a label key's prefix too.
Always matched whole: `re.match` with `$` would accept a trailing newline."""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "PodKey",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_uid",
]

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253

PodKey = tuple[str, str]
"""A pod by (namespace, name), as lockd's ledger, the group book and the group API's bodies key it."""

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def is_dns1123_label(text: str) -> bool:
    """Lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63."""
    return len(text) <= DNS1123_LABEL_MAX and _DNS1123_LABEL.fullmatch(text) is not None


def is_dns1123_subdomain(text: str) -> bool:
    """DNS-1123 labels joined by '.', at most 253 in all."""
    return len(text) <= DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(text) is not None


def is_uid(text: str) -> bool:
    """A uid as the API server writes them (a UUID), or as a test or the emulator may: letters, digits
    and '-', at most 128."""
    return _UID.fullmatch(text) is not None
