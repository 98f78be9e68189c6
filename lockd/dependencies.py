"""Node policy dependencies (pod-startup-lock's "the lock may depend on an additional endpoint check"):
while any dependency of the node's policy fails, lockd grants nothing.

The pure core: a dependency's name, the result of one check, and which dependency fails (`failing`,
`dependency_verdict`), a function of the node policy's dependencies and the cached results, as the load
throttles are of the load sample; how soon a dependency is checked again (`pause_after`); and the target
a node checks (`node_target`: `$(NODE_NAME)` and `$(NODE_IP)` expanded with this node's). The thin
shell: `DependencyChecks`, the cache and the checker that fills it in the background (one loop per
dependency of the current node policy, each checked within its own timeout, then again after its
`interval` while it answers and its `failInterval` while it fails, both `--dependency-interval` by
default: pod-startup-lock's --passHc and --failHc), so an ask never waits on a network call and a
dependency that is down costs one check per interval however many pods ask. A result changing between
up and down wakes the waiting long polls (the caller's `on_change`), as a new load sample does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import aiohttp

from lockd.metrics import Metrics
from stagger import throttles
from stagger.addresses import parse_host_port
from stagger.durations import format_duration
from stagger.nodechecks import check_dependencies
from stagger.policy import Dependency, expand_target
from stagger.timestamps import format_rfc3339
from stagger.version import VERSION
from stagger.waiting import stop_tasks

__all__ = [
    "NOT_CHECKED",
    "DependencyChecks",
    "DependencyStatus",
    "Result",
    "UnknownVariable",
    "check",
    "dependency_status",
    "dependency_verdict",
    "failing",
    "name_of",
    "node_target",
    "node_variables",
    "pause_after",
]

logger = logging.getLogger(__name__)

NOT_CHECKED = "not checked yet"

# The longest piece of a server's answer (a redirect's Location) put into a reason: reasons go into every
# 423 body, /status and the log.
_SHOWN = 200


# --- the pure core --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def name_of(dependency: Dependency) -> str:
    """How a dependency is named in reasons, /status, logs and the metrics' `dependency` label: an HTTP
    dependency by its URL, a TCP one as `tcp HOST:PORT`."""
    target = dependency.shown_target
    return target if dependency.kind == "http" else f"tcp {target}"


@dataclass(frozen=True)
class Result:
    """One check's outcome: `error` says why it failed ("" when it answered)."""

    error: str
    checked_at: float  # monotonic
    checked_wall: float

    @property
    def ok(self) -> bool:
        return not self.error


def failing(
    dependencies: Sequence[Dependency], results: Mapping[Dependency, Result]
) -> list[tuple[Dependency, str]]:
    """Pure: the dependencies that do not answer now, in the policy's order, each with why (its last error,
    or `NOT_CHECKED` before its first result)."""
    down: list[tuple[Dependency, str]] = []
    for dependency in dependencies:
        result = results.get(dependency)
        if result is None:
            down.append((dependency, NOT_CHECKED))
        elif not result.ok:
            down.append((dependency, result.error))
    return down


def dependency_verdict(
    dependencies: Sequence[Dependency], results: Mapping[Dependency, Result], *, retry_after: float
) -> throttles.Verdict:
    """Pure: no grant while a dependency fails; the reason names the first that fails and its error.
    `retry_after` is the check interval: the answer cannot change sooner (a waiting long poll is woken
    when it does)."""
    down = failing(dependencies, results)
    return check_dependencies(
        [(name_of(dependency), error) for dependency, error in down], retry_after=retry_after
    )


def node_variables(*, node_name: str, node_ip: str | None) -> dict[str, str]:
    """What a dependency's `$(VAR)`s stand for on this node; without a node IP (no --node-ip), a target
    with `$(NODE_IP)` fails its checks, naming the setting."""
    return {"NODE_NAME": node_name} | ({"NODE_IP": node_ip} if node_ip else {})


class UnknownVariable(ValueError):
    """A target names a node variable this lockd has no value for."""


_SETTING_OF = {"NODE_NAME": "--node-name (STAGGER_NODE_NAME)", "NODE_IP": "--node-ip (STAGGER_NODE_IP)"}


def node_target(dependency: Dependency, variables: Mapping[str, str]) -> str:
    """Pure: the target this node checks, its `$(VAR)`s expanded. Raises UnknownVariable naming the
    setting that gives a missing one."""
    try:
        return expand_target(dependency.target, kind=dependency.kind, variables=variables)
    except KeyError as missing:
        name = str(missing.args[0])
        setting = _SETTING_OF.get(name, "a setting")
        raise UnknownVariable(f"lockd does not know $({name}) on this node: set {setting}") from None


def pause_after(dependency: Dependency, *, ok: bool, default: float) -> float:
    """Pure: how long after a check `dependency` is checked again: its `interval` when it answered, its
    `failInterval` when it failed, `default` (--dependency-interval) for one it does not set."""
    own = dependency.interval if ok else dependency.fail_interval
    return default if own is None else own


class DependencyStatus(TypedDict):
    name: str
    kind: str
    target: str
    # The target this node checks: `target` with $(NODE_NAME) and $(NODE_IP) expanded (its user and
    # password left out); null when this lockd lacks a variable it names.
    checkedTarget: str | None
    timeoutSeconds: float
    # How soon it is checked again while it answers, and while it fails (the policy's, or
    # --dependency-interval).
    intervalSeconds: float
    failIntervalSeconds: float
    up: bool | None  # None: not checked yet
    error: str  # "" while it answers
    checkedAt: str | None  # RFC 3339, of the last check
    checkedSecondsAgo: float | None


def _checked_target(dependency: Dependency, variables: Mapping[str, str]) -> str | None:
    try:
        expanded = node_target(dependency, variables)
    except UnknownVariable:
        return None
    return dataclasses.replace(dependency, target=expanded).shown_target


def dependency_status(
    dependencies: Sequence[Dependency],
    results: Mapping[Dependency, Result],
    *,
    now: float,
    interval: float = 5.0,
    variables: Mapping[str, str] | None = None,
) -> list[DependencyStatus]:
    """Pure: each dependency of the node policy with its last result and when it was checked, for /status;
    `interval` is --dependency-interval, `variables` the node's (`node_variables`)."""
    shown: list[DependencyStatus] = []
    for dependency in dependencies:
        result = results.get(dependency)
        shown.append(
            {
                "name": name_of(dependency),
                "kind": dependency.kind,
                "target": dependency.shown_target,
                "checkedTarget": _checked_target(dependency, variables or {}),
                "timeoutSeconds": dependency.timeout,
                "intervalSeconds": pause_after(dependency, ok=True, default=interval),
                "failIntervalSeconds": pause_after(dependency, ok=False, default=interval),
                "up": None if result is None else result.ok,
                "error": NOT_CHECKED if result is None else result.error,
                "checkedAt": None if result is None else format_rfc3339(result.checked_wall),
                "checkedSecondsAgo": None if result is None else round(max(0.0, now - result.checked_at), 3),
            }
        )
    return shown


def _printable(text: str) -> str:
    """A server's text made safe for a one-line reason: control characters dropped, cut at `_SHOWN`."""
    kept = "".join(c for c in text if c.isprintable())
    return kept if len(kept) <= _SHOWN else kept[:_SHOWN] + "…"


def _os_error(err: OSError) -> str:
    if err.errno == errno.ECONNREFUSED or isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if err.strerror:
        return err.strerror[:1].lower() + err.strerror[1:]
    return str(err) or type(err).__name__


# --- one check -------------------------------------------------------------------------------------------


async def _check_tcp(target: str) -> str:
    """The connection is accepted, then closed at once: nothing is sent."""
    host, port = parse_host_port(target, name="tcp")
    try:
        transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, host, port)
    except socket.gaierror as err:
        return f"cannot resolve {host}: {err.strerror}"
    except OSError as err:
        return _os_error(err)
    transport.close()
    return ""


async def _check_http(url: str, session: aiohttp.ClientSession) -> str:
    """GET the URL: a 2xx answers. The body is not read (only the status counts, and a dependency's answer
    costs lockd nothing however large), the connection is not kept (`Connection: close`: each check
    proves a new connection works, as a starting pod's would, and no pooled connection the server has
    dropped makes a check fail), and TLS is verified against lockd's trusted CAs (aiohttp's default).

    Redirects are not followed: a 3xx fails, naming where it points. Following them would let a
    dependency send every node's lockd to a host or scheme the policy does not name (https to http,
    another service), and a health URL that redirects usually lands on a login or index page whose 200
    says nothing about health; the policy should name the final URL."""
    async with session.get(
        url,
        allow_redirects=False,
        headers={"User-Agent": f"stagger-lockd/{VERSION}", "Connection": "close"},
    ) as response:
        status = response.status
        if 200 <= status < 300:
            return ""
        if 300 <= status < 400:
            location = response.headers.get("Location")
            to = f" to {_printable(location)}" if location else ""
            return f"HTTP {status} redirect{to}: redirects are not followed (name the final URL)"
        return f"HTTP {status}"


def _client_error(err: aiohttp.ClientError) -> str:
    if isinstance(err, aiohttp.ClientConnectorCertificateError):
        cert = err.certificate_error
        why = getattr(cert, "verify_message", None) or getattr(cert, "reason", None) or str(cert)
        return f"TLS certificate not trusted: {why}"
    if isinstance(err, aiohttp.ClientSSLError):
        return f"TLS failed: {err}"
    if isinstance(err, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve {err.host}"
    if isinstance(err, aiohttp.ClientConnectorError):
        return _os_error(err.os_error)
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return "the connection closed without an answer"
    return _printable(f"{type(err).__name__}: {err}")


async def check(
    dependency: Dependency,
    *,
    session: aiohttp.ClientSession,
    variables: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> Result:
    """One check of `dependency` on this node (its `$(VAR)`s from `variables`, `node_variables`), within its
    timeout (the whole check, name resolution included)."""
    try:
        target = node_target(dependency, variables or {})
        async with asyncio.timeout(dependency.timeout):
            if dependency.kind == "tcp":
                error = await _check_tcp(target)
            else:
                error = await _check_http(target, session)
    except UnknownVariable as err:
        error = str(err)
    except TimeoutError:
        error = f"timed out after {format_duration(dependency.timeout)}"
    except aiohttp.ClientError as err:
        error = _client_error(err)
    except (OSError, ValueError) as err:  # a socket error aiohttp did not wrap; a URL it cannot use
        error = _printable(f"{type(err).__name__}: {err}")
    return Result(error=error, checked_at=clock(), checked_wall=wall())


# --- the cache and the checker ------------------------------------------------------------------------


class DependencyChecks:
    """The results of the current node policy's dependencies (read by the decision, never refreshed on an
    ask), and the background checker that keeps them current. `want` names the dependencies to check
    (those of the node policy in force): new ones are checked at once, results of ones no longer named
    are dropped."""

    def __init__(
        self,
        *,
        interval: float,
        metrics: Metrics,
        variables: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.interval = interval
        self.metrics = metrics
        # The node's $(NODE_NAME) and $(NODE_IP) (`node_variables`).
        self.variables: Mapping[str, str] = dict(variables or {})
        self._sleep = sleep
        self.clock = clock
        self.wall = wall
        self.results: dict[Dependency, Result] = {}
        self.wanted: tuple[Dependency, ...] = ()
        self._changed = asyncio.Event()

    def get(self) -> Mapping[Dependency, Result]:
        return self.results

    def status(self, dependencies: Sequence[Dependency], *, now: float) -> list[DependencyStatus]:
        """`dependency_status` of `dependencies` with this node's results, interval and variables."""
        return dependency_status(
            dependencies, self.results, now=now, interval=self.interval, variables=self.variables
        )

    def want(self, dependencies: Sequence[Dependency]) -> None:
        """The node policy's dependencies (a reload, a relabel): checking starts at once for the new ones."""
        wanted = tuple(dependencies)
        if wanted == self.wanted:
            return
        self.wanted = wanted
        for gone in [d for d in self.results if d not in wanted]:
            del self.results[gone]
            self.metrics.dependency_up.remove(name_of(gone))
        self._changed.set()

    async def run(self, *, session: aiohttp.ClientSession, on_change: Callable[[], None]) -> None:
        """Keeps one checking loop per wanted dependency until cancelled; `on_change` is called when a
        dependency comes up or goes down (a waiter may be granted now, or nobody may)."""
        loops: dict[Dependency, asyncio.Task[None]] = {}
        try:
            while True:
                self._changed.clear()
                for gone in [d for d in loops if d not in self.wanted]:
                    loops.pop(gone).cancel()
                for dependency in self.wanted:
                    if dependency not in loops:
                        loops[dependency] = asyncio.create_task(
                            self._keep_checking(dependency, session=session, on_change=on_change),
                            name=f"dependency {name_of(dependency)}",
                        )
                await self._changed.wait()
        finally:
            await stop_tasks(loops.values())

    async def _keep_checking(
        self, dependency: Dependency, *, session: aiohttp.ClientSession, on_change: Callable[[], None]
    ) -> None:
        while True:
            try:
                result = await check(
                    dependency, session=session, variables=self.variables, clock=self.clock, wall=self.wall
                )
            # A bug here must not end this dependency's checks (its last result would stay for good).
            except Exception as err:
                logger.exception("checking dependency %s failed", name_of(dependency))
                result = Result(
                    error=_printable(f"check failed: {type(err).__name__}: {err}"),
                    checked_at=self.clock(),
                    checked_wall=self.wall(),
                )
            self.record(dependency, result, on_change=on_change)
            await self._sleep(pause_after(dependency, ok=result.ok, default=self.interval))

    def record(self, dependency: Dependency, result: Result, *, on_change: Callable[[], None]) -> None:
        """Keeps a check's result; logs and calls `on_change` only when the dependency came up or went down
        (or on its first result), not on every check."""
        if dependency not in self.wanted:
            return
        previous = self.results.get(dependency)
        self.results[dependency] = result
        name = name_of(dependency)
        self.metrics.dependency_up.set(name, 1.0 if result.ok else 0.0)
        if not result.ok:
            self.metrics.dependency_check_failures.labels(dependency=name).inc()
        if previous is not None and previous.ok == result.ok:
            return
        if result.ok:
            logger.info("dependency %s answers%s", name, "" if previous is None else " again: grants resume")
        else:
            logger.warning(
                "dependency %s fails: %s; lockd grants nothing until it answers", name, result.error
            )
        on_change()
