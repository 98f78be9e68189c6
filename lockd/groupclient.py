"""lockd's client of the controller's group pacer service: asks whether a pod of a staggering group may
start, follows the node's wait stream, and decides what to do when that service cannot be reached.

The wire contract is in docs/contracts.md ("lockd → controller: group grants"); its bodies are built and
read by `stagger.contracts.groups`, and this module translates (HTTP status, timeouts, logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp

from stagger.contracts.groups import (
    GRANT_PATH,
    WAIT_PATH,
    GrantAnswer,
    GrantRequest,
    WaitReply,
    WaitRequest,
    read_grant_answer,
    read_wait_answer,
    wait_request,
)
from stagger.objectnames import PodKey
from stagger.waiting import wait_event

logger = logging.getLogger(__name__)

FailurePolicy = Literal["open", "closed"]
# What became of a grant the controller gave in a wait's answer.
PushedOutcome = Literal["received", "used", "lapsed"]
# While the controller is being retried (before groupUnavailableAfter), ask again this soon.
UNREACHABLE_RETRY_SECONDS = 2.0


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


def verdict_of(answer: GrantAnswer) -> GroupVerdict:
    """The controller's answer (`stagger.contracts.groups.read_grant_answer`) as lockd decides on it."""
    return GroupVerdict(granted=answer["granted"], reason=answer["reason"], retry_after=answer["retryAfter"])


def controller_ssl(ca_file: Path | None) -> ssl.SSLContext | bool:
    """TLS to the controller: its CA from --controller-ca-file, else the system's (True)."""
    if ca_file is None:
        return True
    return ssl.create_default_context(cafile=str(ca_file))


def _headers(token_file: Path | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if token_file is not None:
        try:
            # Read each time: a mounted Secret is updated on disk when it is rotated.
            token = token_file.read_text().strip()
        except OSError as err:
            logger.warning("cannot read controller token %s: %s", token_file, err)
            token = ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
    return headers


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
        ssl_context: ssl.SSLContext | bool = True,
    ) -> None:
        self._session = session
        self._url = url.rstrip("/") + GRANT_PATH
        self._token_file = token_file
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ssl = ssl_context
        self.availability = availability
        self._clock = clock

    async def ask(self, request: GrantRequest) -> GroupVerdict:
        headers = _headers(self._token_file)
        try:
            async with self._session.post(
                self._url, json=request, headers=headers, timeout=self._timeout, ssl=self._ssl
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    raise ValueError(f"HTTP {resp.status}: {text}")
                verdict = verdict_of(read_grant_answer(await resp.json(content_type=None)))
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return self.availability.failed(now=self._clock(), error=str(err) or type(err).__name__)
        self.availability.succeeded()
        return verdict


class PushedGrants:
    """Grants the controller gave in a wait's answer, until their pods take their node slot. A pushed
    grant is used only within half the time the controller keeps it reserved (`grantedFor`, counted from
    when lockd read the answer, which is after the controller reserved it), so the pod's `granted-at`
    reaches the controller before the reservation can lapse: the group's limit holds as it does for
    `POST /v1/groups/grant`. Past that, the pod asks over `POST /v1/groups/grant` (which the controller answers
    from the same reservation while it lasts). Pure: `now` is given."""

    def __init__(self, *, count: Callable[[PushedOutcome, int], None] = lambda outcome, amount: None) -> None:
        self._until: dict[PodKey, tuple[str, float]] = {}
        # Also counted by `count` (lockd's stagger_lockd_pushed_grants_total).
        self._count = count
        self.received = 0
        self.used = 0
        self.lapsed = 0

    def add(self, granted: list[tuple[PodKey, str]], *, granted_for: float, now: float) -> None:
        self.expire(now)
        for key, uid in granted:
            if key in self._until:
                self._lapse(1)  # granted again: the earlier grant is replaced
            self._until[key] = (uid, now + granted_for / 2)
        self.received += len(granted)
        self._count("received", len(granted))

    def take(self, key: PodKey, *, uid: str, now: float) -> bool:
        """Whether the pod may start on a grant the controller pushed (used once)."""
        self.expire(now)
        pushed = self._until.pop(key, None)
        if pushed is None:
            return False
        if pushed[0] and uid and pushed[0] != uid:
            self._lapse(1)  # granted to an earlier pod of that name
            return False
        self.used += 1
        self._count("used", 1)
        return True

    def expire(self, now: float) -> None:
        for key, (_, until) in list(self._until.items()):
            if until <= now:
                del self._until[key]
                self._lapse(1)

    def _lapse(self, amount: int) -> None:
        self.lapsed += amount
        self._count("lapsed", amount)

    def __len__(self) -> int:
        return len(self._until)


class GroupWatch:
    """The node's one long poll to the controller (`POST /v1/groups/wait`): it names the pods stepping
    aside for their group pacer and is answered as soon as any of them may go, granted in the answer
    (`grant: true`, kept in `pushed`); `on_grantable` then ends their step-aside, and they start as soon as
    the node throttles allow, without asking the controller again. (A controller of before that answers
    with `grantable` pods only, which ask `POST /v1/groups/grant` at once.)

    While it works (`healthy`), a pod the group said no to steps aside for `--group-recheck` (a bound, in
    case a wake-up is lost), not for the controller's short retryAfter: the requests lockd sends grow with
    nodes and grants, not with waiting pods. When it stops working, every stepping-aside pod asks again
    within UNREACHABLE_RETRY_SECONDS (`on_unhealthy`) and the per-pod path with its failure rules
    (--group-unavailable-after, --group-failure-policy) takes over until the stream is back. A controller without the wait API (404)
    is asked again every UNSUPPORTED_RETRY_SECONDS.
    """

    UNSUPPORTED_RETRY_SECONDS = 60.0

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        url: str,
        token_file: Path | None,
        node: str,
        wait: float,
        timeout: float,
        aside: Callable[[], list[tuple[PodKey, str]]],
        on_grantable: Callable[[list[PodKey]], None],
        on_unhealthy: Callable[[], None],
        pushed: PushedGrants,
        clock: Callable[[], float],
        ssl_context: ssl.SSLContext | bool = True,
        max_backoff: float = 30.0,
    ) -> None:
        self._session = session
        self._url = url.rstrip("/") + WAIT_PATH
        self._token_file = token_file
        self._node = node
        self._wait = wait
        # The server answers after `wait` at the latest; the request may take that plus the usual limit.
        self._timeout = aiohttp.ClientTimeout(total=wait + timeout)
        self._aside = aside
        self._on_grantable = on_grantable
        self._on_unhealthy = on_unhealthy
        self.pushed = pushed
        self._clock = clock
        self._ssl = ssl_context
        self._max_backoff = max_backoff
        self._changed = asyncio.Event()
        self.healthy = False
        self.requests = 0
        self.wakeups = 0

    def aside_changed(self) -> None:
        """A pod started stepping aside for its group: the open request must name it too."""
        self._changed.set()

    async def run(self) -> None:
        failures = 0
        while True:
            self._changed.clear()
            keys = self._aside()
            if not keys:
                await wait_event(self._changed, within=self._wait)
                continue
            try:
                reply = await self._poll(keys)
            except _Unsupported as err:
                self._set_unhealthy(str(err))
                await asyncio.sleep(self.UNSUPPORTED_RETRY_SECONDS)
                continue
            except (aiohttp.ClientError, TimeoutError, ValueError) as err:
                failures += 1
                self._set_unhealthy(str(err) or type(err).__name__)
                delay = min(self._max_backoff, 0.5 * 2 ** min(failures, 10))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                continue
            if reply is None:
                continue  # cut short: ask again naming the new pods too
            failures = 0
            if not self.healthy:
                logger.info("group wait stream to the controller is up")
            self.healthy = True
            if reply.granted:
                self.pushed.add(reply.granted, granted_for=reply.granted_for, now=self._clock())
            woken = reply.grantable + [key for key, _ in reply.granted]
            if woken:
                self.wakeups += 1
                self._on_grantable(woken)

    async def _poll(self, pods: list[tuple[PodKey, str]]) -> WaitReply | None:
        """One long poll; None when it was cut short because more pods stepped aside meanwhile."""
        body = wait_request(node=self._node, wait=self._wait, pods=pods, grant=True)
        request = asyncio.ensure_future(self._post(body))
        # Its failure is handled below or by the caller; when this poll is itself cancelled (lockd
        # stopping) the request may fail after nobody awaits it: mark it seen, never "Task exception was
        # never retrieved" with a traceback in the log (found by `python -m sim chaos`).
        request.add_done_callback(_seen)
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            done, _ = await asyncio.wait({request, changed}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            request.cancel()
            raise
        finally:
            changed.cancel()
        if request in done:
            return request.result()
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, TimeoutError, ValueError):
            await request
        return None

    async def _post(self, body: WaitRequest) -> WaitReply:
        self.requests += 1
        async with self._session.post(
            self._url, json=body, headers=_headers(self._token_file), timeout=self._timeout, ssl=self._ssl
        ) as resp:
            if resp.status == 404:
                raise _Unsupported("the controller has no POST /v1/groups/wait (an older version)")
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            return read_wait_answer(await resp.json(content_type=None))

    def _set_unhealthy(self, error: str) -> None:
        if self.healthy:
            logger.warning(
                "group wait stream to the controller failed (%s): pods held by their group ask per pod", error
            )
            self.healthy = False
            self._on_unhealthy()
        else:
            logger.debug("group wait stream: %s", error)


class _Unsupported(Exception):
    pass


def _seen(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
