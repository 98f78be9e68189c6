"""The policy file in force, and its hot reload: like lockd, a bad, emptied, oversized or unreadable file
is reported (log, metric, `/status` lastReloadError) and the last good policy stays; the report clears as
soon as the file reads well again. An unchanged file is neither parsed nor logged again."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stagger import policy

__all__ = ["PolicyState", "ReloadResult"]

logger = logging.getLogger(__name__)

ReloadResult = Literal["unchanged", "reloaded", "failed"]
"""failed: a new problem (each distinct problem is reported once, not at every check)."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class PolicyState:
    path: Path | None  # None: no policy file, no staggering policies
    policy_file: policy.PolicyFile
    digest: str = ""  # of the file text in force
    failed_digest: str = ""  # of the last text that did not validate (not parsed again until it changes)
    last_error: str = ""
    loaded_at: float = 0.0  # wall clock

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else "none (no --policies)"

    @classmethod
    def load(cls, path: Path | None) -> PolicyState:
        """The policy at start-up; raises `policy.PolicyError` naming every bad field."""
        if path is None:
            return cls(path=None, policy_file=policy.PolicyFile(), loaded_at=time.time())
        text = policy.read_policy_text(path)
        parsed = policy.parse_policy_text(text, source=str(path))
        return cls(path=path, policy_file=parsed, digest=_digest(text), loaded_at=time.time())

    def _failed(self, err: policy.PolicyError) -> ReloadResult:
        new = str(err) != self.last_error
        if new:
            logger.error("policy reload failed, keeping the last good policy:\n%s", err)
        self.last_error = str(err)
        return "failed" if new else "unchanged"

    def reload_if_changed(self) -> ReloadResult:
        """Re-read the policy file; a new good text replaces the policy in force."""
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
            "policy file %s reloaded: %d staggering policies",
            self.path,
            len(parsed.staggering_policies),
        )
        return "reloaded"
