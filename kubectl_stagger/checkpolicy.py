"""`check-policy FILE`: the policy file validated offline by the very code lockd and the controller load
it with (`stagger.policy.load_policy_file`: size limit, UTF-8, YAML without duplicate keys or aliases,
then the validator), so the messages are lockd's, word for word; a valid file's notes (keys read regardless
of case, PacemakerConfigs read as node policies) are printed too, as lockd logs them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from stagger import policy

__all__ = ["PolicyCheck", "check_policy_file", "note_lines", "summary"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyCheck:
    """One file's verdict: `errors` empty when it validates, else every problem lockd would report."""

    source: str
    node_policies: int = 0
    staggering_policies: int = 0
    errors: tuple[str, ...] = ()
    # What a valid file says in a spelling it does not write exactly (`PolicyFile.notes`), as lockd logs it.
    notes: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors


def check_policy_file(*, path: Path) -> PolicyCheck:
    source = str(path)
    try:
        loaded = policy.load_policy_file(path)
    except policy.PolicyError as err:
        return PolicyCheck(source=source, errors=err.errors or (str(err),))
    return PolicyCheck(
        source=source,
        node_policies=len(loaded.node_policies),
        staggering_policies=len(loaded.staggering_policies),
        notes=loaded.notes,
    )


def _policies(number: int, kind: str) -> str:
    return f"{number} {kind} polic{'y' if number == 1 else 'ies'}"


def note_lines(check: PolicyCheck) -> list[str]:
    """The lines printed on stderr for a valid file's notes (it still exits 0)."""
    return [f"note: {note}" for note in check.notes]


def summary(check: PolicyCheck) -> str:
    """The one line printed for a valid file."""
    return (
        f"{check.source}: valid: {_policies(check.node_policies, 'node')}, "
        f"{_policies(check.staggering_policies, 'staggering')}"
    )
