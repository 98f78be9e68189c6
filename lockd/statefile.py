"""Standalone `--state-file`: the held slots, written atomically on every change and read back at start.

In a cluster lockd rebuilds its slots from the pods (`granted-at`); standalone there is nothing to rebuild
from, so without this file a restart forgets every slot and lets a new herd in on top of the one starting.
Times are stored as wall-clock epochs (a monotonic clock does not survive a restart); release tokens only
as their hashes.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, TypedDict

from lockd import ledger

logger = logging.getLogger(__name__)

VERSION = 1


class SavedSlot(TypedDict):
    namespace: str
    name: str
    uid: str
    grantedAt: float  # epoch seconds
    expiresAt: float  # epoch seconds
    anonymous: bool
    tokenHash: str


class StateFileError(ValueError):
    """The state file cannot be read back; the message names it and says why."""


def save(path: Path, slots: list[ledger.Slot], *, now: float, wall: float) -> None:
    """Write the granted slots (not reservations) to `path` atomically: a reader sees the old file or the
    new one, never half of one."""
    saved: list[SavedSlot] = [
        {
            "namespace": slot.namespace,
            "name": slot.name,
            "uid": slot.uid,
            "grantedAt": slot.granted_wall,
            "expiresAt": wall + (slot.expires_at - now),
            "anonymous": slot.anonymous,
            "tokenHash": slot.token_hash,
        }
        for slot in slots
        if not slot.pending
    ]
    text = json.dumps({"version": VERSION, "slots": saved}, indent=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _slot(item: Any, *, now: float, wall: float) -> ledger.Slot:
    granted_wall, expires_wall = float(item["grantedAt"]), float(item["expiresAt"])
    return ledger.Slot(
        namespace=str(item["namespace"]),
        name=str(item["name"]),
        uid=str(item["uid"]),
        granted_at=now - max(0.0, wall - granted_wall),
        granted_wall=granted_wall,
        expires_at=now + (expires_wall - wall),
        anonymous=bool(item["anonymous"]),
        token_hash=str(item["tokenHash"]),
    )


def load(path: Path, *, now: float, wall: float) -> list[ledger.Slot]:
    """The slots saved in `path` that have not expired; [] when there is no file yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as err:
        raise StateFileError(f"{path}: cannot read the state file: {err}") from err
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"expected version {VERSION}")
        slots = [_slot(item, now=now, wall=wall) for item in data["slots"]]
    except (ValueError, KeyError, TypeError) as err:
        raise StateFileError(f"{path}: not a lockd state file: {err}") from err
    kept = [slot for slot in slots if slot.expires_at > now]
    if len(kept) < len(slots):
        logger.info("state file %s: %d slots expired while lockd was down", path, len(slots) - len(kept))
    return kept
