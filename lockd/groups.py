"""lockd's side of group pacing: asks the controller's group pacer service whether a pod of a staggering
group may start, and decides what to do when that service cannot be reached.

The wire contract is in docs/contracts.md ("lockd → controller: group grants").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

import aiohttp

logger = logging.getLogger(__name__)

FailurePolicy = Literal["open", "closed"]
# While the controller is being retried (before groupUnavailableAfter), ask again this soon.
UNREACHABLE_RETRY_SECONDS = 2.0


class GrantRequest(TypedDict):
    namespace: str
    name: str
    uid: str
    group: str
    node: str


@dataclass(frozen=True)
class GroupVerdict:
    granted: bool
    reason: str
    retry_after: float
    # True when granted because the controller was unreachable (groupFailurePolicy open).
    failed_open: bool = False


class Availability:
    """How long the controller has been unreachable, and what that means. Pure apart from its one field."""

    def __init__(self, *, unavailable_after: float, policy: FailurePolicy) -> None:
        self.unavailable_after = unavailable_after
        self.policy = policy
        self.failing_since: float | None = None

    def succeeded(self) -> None:
        if self.failing_since is not None:
            logger.info("group pacer service reachable again")
        self.failing_since = None

    def failed(self, *, now: float, error: str) -> GroupVerdict:
        if self.failing_since is None:
            self.failing_since = now
            logger.warning("group pacer service unreachable: %s", error)
        failing = now - self.failing_since
        if failing < self.unavailable_after:
            return GroupVerdict(
                granted=False,
                reason=f"group pacer service unreachable for {failing:.0f}s, retrying ({error})",
                retry_after=UNREACHABLE_RETRY_SECONDS,
            )
        if self.policy == "open":
            return GroupVerdict(
                granted=True,
                reason=(
                    f"group pacer service unreachable for {failing:.0f}s: node throttles alone decide "
                    "(groupFailurePolicy open)"
                ),
                retry_after=0.0,
                failed_open=True,
            )
        return GroupVerdict(
            granted=False,
            reason=f"group pacer service unreachable for {failing:.0f}s (groupFailurePolicy closed): {error}",
            retry_after=UNREACHABLE_RETRY_SECONDS,
        )


def parse_answer(data: object) -> GroupVerdict:
    """The controller's JSON answer → a verdict; raises ValueError if it is not the contract's shape."""
    if not isinstance(data, dict) or not isinstance(data.get("granted"), bool):
        raise ValueError(f"answer is not {{granted: bool, reason, retryAfter}}: {str(data)[:200]}")
    retry = data.get("retryAfter", 1.0)
    if isinstance(retry, bool) or not isinstance(retry, int | float) or retry < 0:
        raise ValueError(f"retryAfter must be a number of seconds >= 0 (got {retry!r})")
    return GroupVerdict(
        granted=data["granted"], reason=str(data.get("reason") or ""), retry_after=float(retry)
    )


class GroupClient:
    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        url: str,
        token_file: Path | None,
        timeout: float,
        availability: Availability,
        clock: Callable[[], float],
    ) -> None:
        self._session = session
        self._url = url.rstrip("/") + "/v1/groups/grant"
        self._token_file = token_file
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self.availability = availability
        self._clock = clock

    def _token(self) -> str | None:
        if self._token_file is None:
            return None
        try:
            # Read each time: projected service account tokens are rotated on disk.
            return self._token_file.read_text().strip()
        except OSError as err:
            logger.warning("cannot read controller token %s: %s", self._token_file, err)
            return None

    async def ask(self, request: GrantRequest) -> GroupVerdict:
        headers = {"Content-Type": "application/json"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with self._session.post(
                self._url, json=request, headers=headers, timeout=self._timeout
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    raise ValueError(f"HTTP {resp.status}: {text}")
                verdict = parse_answer(await resp.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return self.availability.failed(now=self._clock(), error=str(err) or type(err).__name__)
        self.availability.succeeded()
        return verdict
