"""The group part's state on the controller's app (`GROUPS`): the pacing, the watch, leadership and the
reconcilers once running, and whether this replica grants now."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from aiohttp import web

from stagger import kube
from webhook.groups.pacing import Pacing
from webhook.groups.podwatch import PodWatch

if TYPE_CHECKING:
    # Types only: the reconcilers use the group book (`webhook.groups.pacing`), and the wiring above both
    # (`webhook.controller`) makes them.
    from webhook.reconcilers.evictions import EvictionReconciler
    from webhook.reconcilers.gates import GateReconciler

__all__ = ["GROUPS", "FailOpenCount", "Groups", "LeaderFactory", "Leadership", "SoleLeader", "sole_leader"]


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader(self) -> str | None: ...


class FailOpenCount(Protocol):
    """What the app reads of the leader's counting of fail-opens (`webhook.failopens.FailOpens`, which
    stands above this part and reads `GROUPS`)."""

    def status(self) -> dict[str, Any]:
        """The `failOpens` section of `/status`."""
        ...

    def now_by_cause(self) -> dict[str, int]:
        """The marked pods known now, by cause (every cause, zeros too)."""
        ...


@dataclass
class SoleLeader:
    """`--leader-elect=false`: one replica, always the leader (like kube-scheduler's flag of that name)."""

    identity: str

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def leader(self) -> str | None:
        return self.identity


@dataclass
class Groups:
    """What the group part keeps in the app. `off` says why it is not running (no API server)."""

    pacing: Pacing
    watch: PodWatch | None = None
    leadership: Leadership | None = None
    gates: GateReconciler | None = None
    evictions: EvictionReconciler | None = None
    fail_opens: FailOpenCount | None = None
    off: str | None = None
    stopping: bool = False  # shutting down: never grant again
    session: aiohttp.ClientSession | None = None  # the app's one session (API server, the leader)
    leader_ssl: ssl.SSLContext | None = None  # to verify --leader-url with --leader-ca-file

    @property
    def granting(self) -> bool:
        # Leadership is read at each request too: it ends at the renew deadline, even between two steward runs.
        return self.pacing.granting and self.leadership is not None and self.leadership.is_leader


GROUPS = web.AppKey("groups", Groups)


# Makes this replica's Leadership and the coroutine function that runs the election (None: nothing to run).
LeaderFactory = Callable[
    [web.Application, kube.RestClient], tuple[Leadership, Callable[[], Coroutine[Any, Any, None]] | None]
]


def sole_leader(app: web.Application, client: kube.RestClient) -> tuple[Leadership, None]:
    return SoleLeader(identity=os.environ.get("POD_NAME") or socket.gethostname()), None
