"""The policy file in force and its hot reload, one for lockd and the controller: the file is read again
when it changes, a new good text replaces the policy and every subscriber hears of it at once; a bad,
emptied, oversized or unreadable file is reported (logged once per distinct problem, `last_error` for
`/status`, the `failed` result for a metric) and the last good policy stays. The report clears as soon as
the file reads well again. An unchanged file (by digest) is neither parsed nor logged again, and a bad
text is not parsed again until it changes. The notes of a file that loads (keys read regardless of case,
PacemakerConfigs read as node policies) are logged once per load."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from stagger import policy

__all__ = ["PolicySettings", "PolicyWatcher", "ReloadResult", "Subscriber"]

logger = logging.getLogger(__name__)

ReloadResult = Literal["unchanged", "reloaded", "failed"]
"""failed: a new problem (each distinct problem is reported once, not at every check)."""

Subscriber = Callable[[policy.PolicyFile], None]
"""Called with the new policy file right after a reload replaced the one in force."""


@dataclass(frozen=True)
class PolicySettings:
    """Where the policy file is (None: none) and how often it is checked for changes: the same for lockd
    and the controller (whose check also covers its certificate and token files)."""

    policies: Path | None = None
    reload_interval: float = 5.0


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _log_notes(path: Path, loaded: policy.PolicyFile) -> None:
    """What the file says in a spelling it does not write exactly (a key in another case, a PacemakerConfig):
    once per load (a check of an unchanged file parses nothing), a warning so that the operator sees it."""
    for note in loaded.notes:
        logger.warning("policy file %s: %s", path, note)


@dataclass
class PolicyWatcher:
    path: Path | None  # None: no policy file; `policy_file` is then empty and never changes
    policy_file: policy.PolicyFile
    absent: str = "no policy file"  # what `source` says without one (each app says what that means to it)
    digest: str = ""  # of the file text in force
    failed_digest: str = ""  # of the last text that did not validate (not parsed again until it changes)
    last_error: str = ""
    loaded_at: float = 0.0  # wall clock
    _subscribers: list[Subscriber] = field(default_factory=list, repr=False)

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else self.absent

    @classmethod
    def load(cls, path: Path | None, *, absent: str = "no policy file") -> PolicyWatcher:
        """The policy at start-up; raises `policy.PolicyError` naming every bad field (a bad file at start
        is an error, not a report: there is no last good policy to keep)."""
        if path is None:
            return cls(path=None, policy_file=policy.PolicyFile(), absent=absent, loaded_at=time.time())
        text = policy.read_policy_text(path)
        parsed = policy.parse_policy_text(text, source=str(path))
        _log_notes(path, parsed)
        return cls(path=path, policy_file=parsed, absent=absent, digest=_digest(text), loaded_at=time.time())

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def _failed(self, err: policy.PolicyError) -> ReloadResult:
        new = str(err) != self.last_error
        if new:
            logger.error("policy reload failed, keeping the last good policy; %s:\n%s", self.path, err)
        self.last_error = str(err)
        return "failed" if new else "unchanged"

    def check(self) -> ReloadResult:
        """Re-read the policy file; a new good text replaces the policy in force and is handed to every
        subscriber, in the order they subscribed."""
        if self.path is None:
            return "unchanged"
        try:
            text = policy.read_policy_text(self.path)
        except policy.PolicyError as err:
            return self._failed(err)
        digest = _digest(text)
        if digest == self.digest:
            if self.last_error:
                logger.info("policy file %s reads well again (the policy in force is unchanged)", self.path)
                self.last_error = ""
            return "unchanged"
        if digest == self.failed_digest:
            return "unchanged"
        try:
            parsed = policy.parse_policy_text(text, source=str(self.path), allow_empty=False)
        except policy.PolicyError as err:
            self.failed_digest = digest
            return self._failed(err)
        self.policy_file, self.digest, self.failed_digest, self.last_error = parsed, digest, "", ""
        self.loaded_at = time.time()
        logger.info(
            "policy file %s reloaded: %d staggering policies, %d node policies",
            self.path,
            len(parsed.staggering_policies),
            len(parsed.node_policies),
        )
        _log_notes(self.path, parsed)
        for subscriber in self._subscribers:
            subscriber(parsed)
        return "reloaded"
