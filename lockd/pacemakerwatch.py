"""Cluster mode with `--pacemaker-configs`: pod-pacemaker's `PacemakerConfig` objects (woehrl.net/v1alpha,
cluster-scoped, plural pacemakerconfigs: github.com/woehrl01/pod-pacemaker's CRD
charts/pod-pacemaker/crds/woehrl.net_pacemakerconfigs.yaml) read live from the API server as node
policies, beside the policy file's (`lockd.nodepolicy` chooses among both).

The pure part: each object read by the policy file's own reader (`stagger.policy`, as one document of a
file: the same rules, the same errors), and the table of the objects in force (`ObjectTable`): a valid
version replaces its object's node policy, an invalid one is skipped (logged once, naming the object and
the bad field; counted) and the object's last good version stays. The shell (`PacemakerWatch`): one
list+watch (`stagger.informer`, with its paging, resume and backoff) while the CRD is installed. A 404 on
the list means it is not: logged once, shown in /status, and looked for again every `--pacemaker-recheck`
(installing the CRD later works without a restart). Each change of the objects in force calls `on_change`
once per turn of the event loop (lockd chooses its node policy again, which wakes the waiting long polls
when it changed, as a policy file reload does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from lockd.nodepolicy import object_source
from stagger import policy
from stagger.informer import Informer, InformerSettings
from stagger.kube import ApiError, Resource, RestClient, WatchEvent, WatchEventType
from stagger.objects import Obj

__all__ = [
    "CRD_NAME",
    "PACEMAKERCONFIGS",
    "CrdAbsent",
    "ObjectRead",
    "ObjectTable",
    "PacemakerWatch",
    "lean_object",
    "read_object",
]

logger = logging.getLogger(__name__)

PACEMAKERCONFIGS: Final = Resource(
    "woehrl.net", "v1alpha", "pacemakerconfigs", "PacemakerConfig", namespaced=False
)
CRD_NAME: Final = "pacemakerconfigs.woehrl.net"

CrdState = Literal["unknown", "installed", "absent"]
"""unknown: not listed yet (or the API server has not answered); installed: listed; absent: 404."""

Outcome = Literal["unchanged", "applied", "removed", "invalid", "recovered"]
"""What one event did to the table: applied (a new or changed node policy) and removed change the
node policies in force; invalid is a new problem (the object's last good version, if any, stays);
recovered: an object that was invalid reads well again as the version in force."""


# --- pure ---------------------------------------------------------------------------------------------


def object_name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


@dataclass(frozen=True)
class ObjectRead:
    """One object read: its node policy, or every problem, each naming the object and the field."""

    name: str
    node_policy: policy.NodePolicy | None
    errors: tuple[str, ...] = ()


def read_object(obj: Mapping[str, Any]) -> ObjectRead:
    """Pure: a PacemakerConfig from the API as a node policy, validated exactly as a document of the policy
    file is (`stagger.policy.parse_policy_documents`: the same reader, rules and errors)."""
    name = object_name(obj)
    try:
        parsed = policy.parse_policy_documents([obj], source=object_source(name))
    except policy.PolicyError as err:
        return ObjectRead(name=name, node_policy=None, errors=err.errors)
    if len(parsed.node_policies) != 1 or parsed.staggering_policies:
        # Only a List of them or stagger's own format reads otherwise: never an object of this resource.
        return ObjectRead(
            name=name, node_policy=None, errors=(f"{object_source(name)}: not one PacemakerConfig",)
        )
    return ObjectRead(name=name, node_policy=parsed.node_policies[0])


def lean_object(obj: Obj) -> Obj:
    """An object as it is kept: without managedFields and annotations (kubectl's last-applied copy is the
    object again), which the reader ignores anyway."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not {"managedFields", "annotations"} & metadata.keys():
        return obj
    kept = {key: value for key, value in metadata.items() if key not in ("managedFields", "annotations")}
    return {**obj, "metadata": kept}


@dataclass
class ObjectTable:
    """The objects by name: the node policy of each one's last good version, and the problems of each one
    whose latest version is invalid."""

    good: dict[str, policy.NodePolicy] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # name -> its problems, one a line

    def policies(self) -> tuple[policy.NodePolicy, ...]:
        return tuple(self.good[name] for name in sorted(self.good))

    def apply(self, kind: WatchEventType, obj: Mapping[str, Any]) -> Outcome:
        """Pure but for the table itself: one watch event (a relist's are ADDED, MODIFIED and DELETED)."""
        name = object_name(obj)
        if kind == "DELETED":
            self.invalid.pop(name, None)
            return "removed" if self.good.pop(name, None) is not None else "unchanged"
        read = read_object(obj)
        if read.node_policy is None:
            problems = "\n".join(read.errors)
            if self.invalid.get(name) == problems:
                return "unchanged"  # the same problem again (a relist): logged and counted once
            self.invalid[name] = problems
            return "invalid"
        was_invalid = self.invalid.pop(name, None) is not None
        if self.good.get(name) == read.node_policy:
            return "recovered" if was_invalid else "unchanged"
        self.good[name] = read.node_policy
        return "applied"

    def clear(self) -> bool:
        """Forget every object (the CRD is gone, and its objects with it); True if some were in force."""
        had = bool(self.good)
        self.good.clear()
        self.invalid.clear()
        return had


# --- the shell ----------------------------------------------------------------------------------------


class CrdAbsent(Exception):
    """The API server has no such resource (404): the CRD is not installed. Not one of the errors the
    informer retries with its backoff, so that it ends the informer's run."""


class _CrdClient:
    """The cluster's client (its session, TLS context and token shared) for the informer's two calls,
    a 404 raised as `CrdAbsent`, and each whole list answered reported to `listed`."""

    def __init__(self, client: RestClient, *, listed: Callable[[], None]) -> None:
        self._client = client
        self._listed = listed

    async def list(self, resource: Resource, **options: Any) -> dict[str, Any]:
        try:
            page = await self._client.list(resource, **options)
        except ApiError as err:
            if err.status == 404:
                raise CrdAbsent(f"the list of {resource.api_version} {resource.plural} answered 404") from err
            raise
        metadata = page.get("metadata") or {}
        if not metadata.get("continue"):
            # The list's last page: the informer fills its cache and calls its handlers from it before it
            # next waits, so whoever `listed` wakes finds the objects read.
            self._listed()
        return page

    async def watch(self, resource: Resource, **options: Any) -> AsyncIterator[WatchEvent]:
        try:
            async for event in self._client.watch(resource, **options):
                yield event
        except ApiError as err:
            if err.status == 404:  # the CRD was deleted while watched
                raise CrdAbsent(
                    f"the watch of {resource.api_version} {resource.plural} answered 404"
                ) from err
            raise


SETTLE_WAIT: Final = 10.0
"""How long lockd's start-up waits for the first answer about the objects (listed, or the CRD absent)
before it grants by the policy file alone (a slow or failing API server must not keep it unready)."""


class PacemakerWatch:
    """The PacemakerConfig objects in force (`policies`), kept by a list+watch while the CRD is installed.

    `on_change()` is called when the node policies in force change; `count(result)` once per object version
    read: `object_ok` (a new or changed node policy), `object_error` (an invalid one, once per distinct
    problem). `settled` is set at the first answer: the objects listed, or the CRD absent."""

    def __init__(
        self,
        *,
        client: RestClient,
        settings: InformerSettings,
        recheck: float,
        on_change: Callable[[], None],
        count: Callable[[str], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.table = ObjectTable()
        self.crd: CrdState = "unknown"
        self.absent_checks = 0  # lists answered 404
        self.settled = asyncio.Event()
        self.informer: Informer | None = None
        self._client = client
        self._settings = settings
        self._recheck = recheck
        self._on_change = on_change
        self._count = count
        self._sleep = sleep
        self._shadowed: set[str] = set()
        self._change_scheduled = False

    def policies(self) -> tuple[policy.NodePolicy, ...]:
        return self.table.policies()

    def note_shadowed(self, names: Iterable[str]) -> None:
        """The objects the policy file wins over (a node policy of the same name): each logged once while
        it lasts."""
        now = set(names)
        for name in sorted(now - self._shadowed):
            logger.warning(
                "PacemakerConfig %s has the name of a node policy of the policy file: the file's applies, "
                "the object is not used",
                name,
            )
        self._shadowed = now

    def status(self) -> dict[str, Any]:
        """For /status (`policy.pacemakerConfigs`)."""
        found: dict[str, Any] = {
            "crd": self.crd,
            "objects": sorted(self.table.good),
            "invalid": dict(sorted(self.table.invalid.items())),
            "shadowedByFile": sorted(self._shadowed),
            "absentChecks": self.absent_checks,
        }
        if self.crd == "absent":
            found["message"] = (
                f"the PacemakerConfig CRD ({CRD_NAME}) is not installed: "
                f"looking again every {self._recheck:g}s"
            )
        return found

    async def run(self) -> None:
        """List and watch while the CRD is installed; while it is not, look again every `recheck` seconds."""
        while True:
            informer = Informer(
                # The informer calls only list and watch, which _CrdClient has.
                client=cast(RestClient, _CrdClient(self._client, listed=self._installed)),
                resource=PACEMAKERCONFIGS,
                settings=self._settings,
                transform=lean_object,
            )
            informer.add_handler(self._on_event)
            self.informer = informer
            try:
                await informer.run()
            except CrdAbsent as err:
                self._absent(err)
            finally:
                self.informer = None
            await self._sleep(self._recheck)

    def _installed(self) -> None:
        if self.crd != "installed":
            logger.info("the PacemakerConfig CRD (%s) is installed: watching PacemakerConfigs", CRD_NAME)
        self.crd = "installed"
        self.settled.set()

    def _absent(self, err: CrdAbsent) -> None:
        self.absent_checks += 1
        if self.crd != "absent":
            logger.warning(
                "the PacemakerConfig CRD (%s) is not installed (%s): only the policy file's node policies "
                "apply; looking again every %gs, one line when it is found",
                CRD_NAME,
                err,
                self._recheck,
            )
        self.crd = "absent"
        self.settled.set()
        if self.table.clear():
            self._schedule_change()

    def _on_event(self, kind: WatchEventType, obj: Obj) -> None:
        name = object_name(obj)
        outcome = self.table.apply(kind, obj)
        if outcome == "invalid":
            kept = self.table.good.get(name)
            logger.error(
                "PacemakerConfig %s skipped (%s):\n%s",
                name,
                "its last good version stays" if kept is not None else "not used",
                self.table.invalid[name],
            )
            self._count("object_error")
        elif outcome == "applied":
            read = self.table.good[name]
            logger.info("PacemakerConfig %s read: a node policy of priority %d", name, read.priority)
            self._count("object_ok")
            self._schedule_change()
        elif outcome == "removed":
            logger.info("PacemakerConfig %s deleted: its node policy no longer applies", name)
            self._schedule_change()
        elif outcome == "recovered":
            logger.info("PacemakerConfig %s reads well again (its node policy in force is unchanged)", name)

    def _schedule_change(self) -> None:
        """One call of `on_change` per turn of the event loop, however many events came in it (a list
        brings every object at once)."""
        if self._change_scheduled:
            return
        self._change_scheduled = True
        asyncio.get_running_loop().call_soon(self._changed)

    def _changed(self) -> None:
        self._change_scheduled = False
        try:
            self._on_change()
        except Exception:  # a bug there must not stop the watch (the node policy in force stays)
            logger.exception("choosing the node policy after a PacemakerConfig change failed")
