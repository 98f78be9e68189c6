"""The bearer token lockd sends to the controller's group grant API, read from a file (a mounted Secret)
and re-read when the file changes; a file that turns unreadable or empty keeps the last good token.

Read now so that a missing or empty file is a start-up error; the grant API checks requests against it
with `accepts` (a constant-time comparison)."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from pathlib import Path

from webhook import filestamp

__all__ = ["TokenError", "TokenFile"]

logger = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 64 * 1024


class TokenError(ValueError):
    """The token file cannot be used; the message names it and says why."""


def _read(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as err:
        raise TokenError(f"token file {path}: cannot read it: {err.strerror or err}") from err
    if len(data) > MAX_TOKEN_BYTES:
        raise TokenError(f"token file {path}: larger than {MAX_TOKEN_BYTES // 1024} KiB")
    token = data.strip()
    if not token:
        raise TokenError(f"token file {path}: empty")
    return token


@dataclass
class TokenFile:
    path: Path
    token: bytes
    last_error: str = ""
    stamp: filestamp.FileStamp = None  # of the file when last read

    @classmethod
    def load(cls, path: Path) -> TokenFile:
        """Raises TokenError."""
        stamp = filestamp.stamp(path)
        return cls(path=path, token=_read(path), stamp=stamp)

    def reload_if_changed(self) -> bool:
        stamp = filestamp.stamp(self.path)
        if stamp == self.stamp:
            return False
        self.stamp = stamp
        try:
            token = _read(self.path)
        except TokenError as err:
            if str(err) != self.last_error:
                logger.error("%s; keeping the last good token", err)
            self.last_error = str(err)
            return False
        changed, self.token, self.last_error = token != self.token, token, ""
        if changed:
            logger.info("token file %s reloaded", self.path)
        return changed

    def accepts(self, authorization: str | None) -> bool:
        """Whether an Authorization header carries the token (`Bearer <token>`), in constant time."""
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            # aiohttp decodes header bytes that are not UTF-8 as surrogate escapes, which a plain encode()
            # refuses, and an exception here would be a 500 (tests/fuzz/test_webhook_grants.py). Back to the
            # bytes sent; anything else that cannot be encoded is not the token either.
            sent = given.strip().encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(sent, self.token)
