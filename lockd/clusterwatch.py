"""lockd in a cluster: one list+watch of the pods on this node and one of its Node object (and, while
the node's policy waits for DaemonSets, one of the cluster's DaemonSets: `lockd.daemonsetwatch`), and what
follows from them — identity checks, slot ends, held slots rebuilt after a restart, the node policy
chosen by the node's labels, grants recorded on the pod, group pacing, and Events.

Every answer comes from the informers' caches, with one exception: a caller the pods watch has not
delivered yet (a pod that asks right after it was scheduled, or a pod recreated with the same name) is
read from the API once before it is refused (`NodeView.check_identity`); such reads are remembered for a
few seconds and bounded in rate, so that made-up callers cannot turn lockd into an API-request amplifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from lockd import daemonsetwatch, ledger, podprobes, pods
from lockd.groupclient import GroupClient, GroupWatch
from lockd.service import LockService
from stagger import events, policy, throttles
from stagger.contracts.failopen import FailOpenCause
from stagger.informer import Informer, InformerSettings, cache_key
from stagger.kube import NODES, PODS, ApiError, RestClient, WatchEventType
from stagger.names import Names
from stagger.timestamps import format_rfc3339

logger = logging.getLogger(__name__)

EVENT_COMPONENT = "stagger-lockd"


@dataclass(frozen=True)
class IdentitySettings:
    """How `NodeView.check_identity` treats a caller that the pods watch has not delivered."""

    wait: float = 5.0
    """Longest one check takes before it refuses: the API read, then waiting for the watch."""
    remember: float = 5.0
    """How long the answer of an API read that refused (no such pod on this node, another uid), or that
    failed, is reused for the same namespace, name and uid instead of reading again."""
    read_burst: int = 10
    """API reads allowed at once (0: never read, only wait for the watch) ..."""
    read_fill_seconds: float = 0.5
    """... then one more every this many seconds. A check that finds no read left waits for the watch."""


_UNANSWERED: Final = "the API server did not answer"


class Unconfirmed(str):
    """A refusal `check_identity` could not confirm: the watch has not brought the pod and the API server
    could not be asked (it failed, or no read was left). The pod may well be on this node: the caller is
    told to ask again (503), never refused for good (403, after which its init client starts the pod
    without a slot: `python -m sim chaos` found pods of a node started past its limit that way)."""


"""`_read`'s result when the API could not say (read failed, or none allowed): wait for the watch."""

IdentityKey = tuple[str, str, str]  # namespace, name, uid


@dataclass
class _Arrival:
    """Checks waiting for the watch to deliver one pod; set when it does."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

NODE_LIST_PAGE_SIZE: Final = 50
"""Pods per list request of the node's pods. Each page is made lean before the next is read: a node's
whole list decoded at once (110 pods by default, more with a raised max-pods) is a peak lockd would keep
most of for its life; in pages of 50 its resting memory no longer grows with the pods listed at start
(issue 14: 42.3 MiB with 260 pods in one list, 41.0 in pages of 50; 48.3 and 42.2 with 1,000)."""


def _lean_metadata(metadata: Any) -> Any:
    """Without what lockd never reads and a real API server sends with every object: managedFields (often
    more than the rest of a pod) and kubectl's last-applied copy of the object."""
    if not isinstance(metadata, dict):
        return metadata
    annotations = metadata.get("annotations")
    if "managedFields" not in metadata and not (
        isinstance(annotations, dict) and _LAST_APPLIED in annotations
    ):
        return metadata
    lean = {key: value for key, value in metadata.items() if key != "managedFields"}
    if isinstance(annotations, dict) and _LAST_APPLIED in annotations:
        lean["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    return lean


# What lockd reads of a pod's spec and status (lockd/pods.py, `NodeView.is_pod_request`, the /status
# page); a field read anywhere else in lockd must be added here, or it reads as missing. Of the spec's
# volumes, `lean_pod` keeps one boolean.
_POD_SPEC_READ: Final = ("nodeName", "hostNetwork")
_POD_STATUS_READ: Final = ("phase", "podIP", "conditions", "initContainerStatuses", "containerStatuses")
_CONDITION_READ: Final = ("type", "status", "lastTransitionTime")
_CONTAINER_STATUS_READ: Final = ("name", "ready", "state", "restartCount")


def _pick(obj: Any, keys: tuple[str, ...]) -> Any:
    return {key: obj[key] for key in keys if key in obj} if isinstance(obj, dict) else obj


def _pick_each(items: Any, keys: tuple[str, ...]) -> Any:
    return [_pick(item, keys) for item in items] if isinstance(items, list) else items


def lean_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod as lockd keeps it (about 110 per node, each in memory for its lifetime): its metadata without
    managedFields and kubectl's last-applied copy, and of its spec and status only the fields lockd reads.
    The rest (containers with their env, probes and volumes; image IDs, last states, condition times) is
    most of a real pod, and decoded JSON costs several times its size in Python objects."""
    lean: dict[str, Any] = {key: pod[key] for key in ("apiVersion", "kind") if key in pod}
    lean["metadata"] = _lean_metadata(pod.get("metadata"))
    if "spec" in pod:
        lean["spec"] = spec = _pick(pod["spec"], _POD_SPEC_READ)
        if isinstance(spec, dict) and pods.has_token_volume(pod):
            # Of the volumes, only that the pod was given its token for lockd (`pods.has_token_volume`);
            # a pod without one keeps no key, and reads False.
            spec[pods.TOKEN_VOLUME_KEPT] = True
        if isinstance(spec, dict):
            # Of the containers, only the probes lockd runs while the pod holds a slot (NO_PROBE is shared).
            spec[podprobes.PLAN_KEPT] = podprobes.pod_plan(pod)
    if "status" in pod:
        status = _pick(pod["status"], _POD_STATUS_READ)
        if isinstance(status, dict):
            if "conditions" in status:
                status["conditions"] = _pick_each(status["conditions"], _CONDITION_READ)
            for key in ("initContainerStatuses", "containerStatuses"):
                if key in status:
                    status[key] = _pick_each(status[key], _CONTAINER_STATUS_READ)
        lean["status"] = status
    return lean


def lean_node(node: dict[str, Any]) -> dict[str, Any]:
    """The Node as lockd keeps it: its metadata (the labels choose the node policy, and with the name
    decide which DaemonSets should run here) and its taints (which DaemonSets tolerate them). Its status
    (images, conditions, addresses: tens of KB on a real node) is never read."""
    lean = {key: node[key] for key in ("apiVersion", "kind") if key in node} | {
        "metadata": _lean_metadata(node.get("metadata") or {})
    }
    spec = node.get("spec")
    if isinstance(spec, dict) and "taints" in spec:
        lean["spec"] = {"taints": spec["taints"]}
    return lean


class NodeView:
    """The pods bound to this node and the Node itself, as informers keep them."""

    def __init__(
        self,
        *,
        client: RestClient,
        node: str,
        names: Names,
        own_pod: tuple[str, str] | None,
        informer_settings: InformerSettings,
        identity: IdentitySettings | None = None,
        daemonset_wait: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.names = names
        self.own_pod = own_pod
        self.pods = Informer(
            client=client,
            resource=PODS,
            settings=informer_settings,
            field_selector=f"spec.nodeName={node}",
            transform=lean_pod,
        )
        self.nodes = Informer(
            client=client,
            resource=NODES,
            settings=informer_settings,
            field_selector=f"metadata.name={node}",
            transform=lean_node,
        )
        # The cluster's DaemonSets, watched only while the node's policy waits for them (`want_daemonsets`).
        self.daemonsets = daemonsetwatch.DaemonSetWatch(
            client=client,
            settings=informer_settings,
            node=lambda: self.nodes.get(node),
            pods=self.pods.objects,
            own_pod=own_pod,
            bound=daemonset_wait,
            clock=clock,
        )
        self.nodes.add_handler(lambda kind, obj: self.daemonsets.changed())
        self._client = client
        self._identity = identity or IdentitySettings()
        self._clock = clock
        self._reads = (
            throttles.TokenBucket(
                burst=self._identity.read_burst, fill_seconds=self._identity.read_fill_seconds, now=clock()
            )
            if self._identity.read_burst > 0
            else None
        )
        # Answers of recent API reads that did not accept the caller: key -> (until, problem or _UNANSWERED).
        self._remembered: dict[IdentityKey, tuple[float, str]] = {}
        self._reading: dict[IdentityKey, asyncio.Task[str | None]] = {}
        # Checks waiting for the watch to deliver a pod, by "namespace/name".
        self._arrivals: dict[str, _Arrival] = {}
        self.pods.add_handler(self._pod_arrived)
        self.api_reads = 0
        """API reads made by identity checks (for /status and tests)."""

    def pod(self, key: ledger.PodKey) -> dict[str, Any] | None:
        return self.pods.get(f"{key[0]}/{key[1]}")

    def node_labels(self) -> dict[str, str]:
        obj = self.nodes.get(self.node) or {}
        return dict((obj.get("metadata") or {}).get("labels") or {})

    def has_token_volume(self, *, namespace: str, name: str) -> bool:
        """The pod of that name on this node was given its token for lockd by admission, so a request in
        its name must carry it (`pods.has_token_volume`). By name, whatever uid is asked with: the name is
        what a request acts on."""
        return pods.has_token_volume(self.pod((namespace, name)))

    def is_pod_request(self, *, namespace: str, name: str, uid: str, remote: str | None) -> bool:
        """A request that comes from the pod itself: its uid, and its own pod IP as the source address.

        A pod cannot send from another pod's IP; hostNetwork pods share the node's address, so they never
        count as verified (they must use the release token)."""
        pod = self.pod((namespace, name))
        if pod is None or remote is None or pods.meta(pod).get("uid") != uid:
            return False
        spec, pod_status = pod.get("spec") or {}, pod.get("status") or {}
        return not spec.get("hostNetwork") and bool(pod_status.get("podIP")) and pod_status["podIP"] == remote

    def identity_problem(self, *, namespace: str, name: str, uid: str) -> str | None:
        """Why this caller may not have a slot, from the watch's view alone (see `check_identity`)."""
        return pods.identity_problem(
            self.pod((namespace, name)), node=self.node, namespace=namespace, name=name, uid=uid
        )

    async def check_identity(self, *, namespace: str, name: str, uid: str) -> str | None:
        """Why this caller may not have a slot on this node, or None if it may.

        The watch's view decides when it knows the pod with that uid. When it does not (no such pod, or
        another uid: the pod may have just been created or recreated and the watch is behind), the pod is
        read from the API once: found on this node with that uid, it is put into the pods cache and
        decides; otherwise the refusal is remembered for `remember` seconds (asking again within that
        time reads nothing). Concurrent checks of one pod share one read, and reads are rate-bounded;
        when no read is allowed or it fails, the check waits for the watch to deliver the pod, and if it
        does not, the refusal is `Unconfirmed` (ask again), not final. A check takes at most `wait` seconds.
        """
        problem = self.identity_problem(namespace=namespace, name=name, uid=uid)
        if problem is None or self._watched(namespace, name, uid):
            return problem
        until = asyncio.get_running_loop().time() + self._identity.wait
        answer = await self._ask_api((namespace, name, uid))
        if answer != _UNANSWERED:
            return answer
        problem = await self._wait_for_watch(namespace=namespace, name=name, uid=uid, until=until)
        if problem is None or self._watched(namespace, name, uid):
            return problem
        return Unconfirmed(f"{problem}; the API server could not confirm it: ask again")

    def _watched(self, namespace: str, name: str, uid: str) -> bool:
        """The cache has this very pod (then its view is final: finished or being deleted stays so)."""
        pod = self.pod((namespace, name))
        return pod is not None and str(pods.meta(pod).get("uid") or "") == uid

    async def _ask_api(self, key: IdentityKey) -> str | None:
        now = self._clock()
        for stale in [k for k, (until, _) in self._remembered.items() if until <= now]:
            del self._remembered[stale]
        remembered = self._remembered.get(key)
        if remembered is not None:
            return remembered[1]
        task = self._reading.get(key)
        if task is None:
            if self._reads is None or not self._reads.take(now):
                logger.debug("%s/%s: no API read left, waiting for the watch", key[0], key[1])
                return _UNANSWERED
            task = asyncio.create_task(self._read(key), name=f"identity-read {key[0]}/{key[1]}")
            self._reading[key] = task
            task.add_done_callback(lambda _: self._reading.pop(key, None))
        # Shielded: a caller that goes away does not cancel the read others wait for.
        return await asyncio.shield(task)

    async def _read(self, key: IdentityKey) -> str | None:
        namespace, name, uid = key
        self.api_reads += 1
        pod: dict[str, Any] | None
        try:
            async with asyncio.timeout(self._identity.wait):
                pod = await self._client.get(PODS, name=name, namespace=namespace)
        except ApiError as err:
            if err.status != 404:
                return self._remember(key, _UNANSWERED, why=str(err))
            pod = None
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return self._remember(key, _UNANSWERED, why=str(err) or type(err).__name__)
        if pod is not None and (pod.get("spec") or {}).get("nodeName") == self.node:
            # A pod of this node the watch has not brought yet: the watch will bring the same or newer.
            self.pods.record(pod)
        else:
            pod = None
        problem = pods.identity_problem(pod, node=self.node, namespace=namespace, name=name, uid=uid)
        return problem if problem is None else self._remember(key, problem, why=problem)

    def _remember(self, key: IdentityKey, answer: str, *, why: str) -> str:
        logger.debug("%s/%s (uid %s): API read: %s", key[0], key[1], key[2], why)
        self._remembered[key] = (self._clock() + self._identity.remember, answer)
        return answer

    async def _wait_for_watch(self, *, namespace: str, name: str, uid: str, until: float) -> str | None:
        loop = asyncio.get_running_loop()
        while True:
            problem = self.identity_problem(namespace=namespace, name=name, uid=uid)
            if problem is None or self._watched(namespace, name, uid) or loop.time() >= until:
                return problem
            key = f"{namespace}/{name}"
            arrival = self._arrivals.setdefault(key, _Arrival())
            arrival.waiters += 1
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(until):
                        await arrival.event.wait()
            finally:
                arrival.waiters -= 1
                # A pod that never comes must not leave its entry behind.
                if arrival.waiters == 0 and self._arrivals.get(key) is arrival:
                    del self._arrivals[key]

    def _pod_arrived(self, kind: WatchEventType, obj: dict[str, Any]) -> None:
        if kind != "DELETED" and self._arrivals:
            arrival = self._arrivals.pop(cache_key(obj), None)
            if arrival is not None:
                arrival.event.set()

    # NodeState
    def starting_elsewhere(
        self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]
    ) -> list[pods.OtherStarting]:
        return pods.other_starting(
            self.pods.objects(),
            names=self.names,
            exclude_namespaces=node_policy.exclude_namespaces,
            # lockd's own pod, a DaemonSet's, is not Ready until lockd answers: it never counts.
            holders=holders if self.own_pod is None else holders | {self.own_pod},
            workloads=node_policy.count_all_starting,
            daemonsets=node_policy.count_daemonsets,
        )

    def daemonsets_waiting(self) -> list[str]:
        return self.daemonsets.waiting()

    def want_daemonsets(self, wanted: bool, *, chosen: policy.DaemonSetFilter | None = None) -> None:
        self.daemonsets.want(wanted, chosen=chosen)

    async def run(self) -> None:
        await asyncio.gather(self.pods.run(), self.nodes.run(), self.daemonsets.run())

    async def wait_synced(self) -> None:
        await asyncio.gather(self.pods.synced.wait(), self.nodes.synced.wait())


class ClusterFinisher:
    """Completes a reserved grant: the group pacer (if the pod belongs to a group), then one patch of the
    pod that records the grant (`granted-at`) and takes the pod off the held list (`staggered` label)."""

    def __init__(
        self,
        *,
        client: RestClient,
        view: NodeView,
        groups: GroupClient | None,
        names: Names,
        watch: GroupWatch | None = None,
        recheck: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._view = view
        self._groups = groups
        self._names = names
        # With the controller's wait stream up, a pod its group said no to is woken by the stream; it asks
        # again after `recheck` at the latest (a bound in case a wake-up is lost).
        self._watch = watch
        self._recheck = recheck
        self._clock = clock
        self._warned_no_controller = False

    async def finish(self, slot: ledger.Slot, *, wall: float) -> throttles.Verdict:
        key = (slot.namespace, slot.name)
        pod = self._view.pod(key)
        if pod is None:
            return throttles.Verdict(
                allowed=False, reason="pod no longer on this node", throttle="api", retry_after=1.0
            )
        group = ((pod.get("metadata") or {}).get("labels") or {}).get(self._names.group_label)
        failed_open: FailOpenCause | None = None
        if group:
            verdict = await self._ask_group(slot, group=str(group))
            if isinstance(verdict, throttles.Verdict):
                return verdict
            failed_open = verdict
        patch = {
            "metadata": {
                "annotations": {
                    self._names.granted_at_annotation: format_rfc3339(wall),
                    self._names.node_slot_annotation: format_rfc3339(wall),
                    # The unready spell this grant is for (null removes a previous grant's): a restarted
                    # lockd tells from it whether the pod has been Ready since (pods.ready_since).
                    self._names.node_slot_unready_since_annotation: pods.unready_since(pod),
                    # Granted without the group pacer: the controller counts it (null removes an earlier one).
                    self._names.failed_open_annotation: failed_open,
                },
                "labels": {self._names.staggered_label: None},
            }
        }
        try:
            updated = await self._client.patch(PODS, name=slot.name, namespace=slot.namespace, patch=patch)
        except ApiError as err:
            if err.status == 404:
                return throttles.Verdict(
                    allowed=False, reason="pod was deleted", throttle="api", retry_after=1.0
                )
            logger.warning("could not record the grant on %s/%s: %s", slot.namespace, slot.name, err)
            return throttles.Verdict(
                allowed=False,
                reason=f"could not record the grant on the pod ({err})",
                throttle="api",
                retry_after=2.0,
            )
        except (aiohttp.ClientError, TimeoutError) as err:
            return throttles.Verdict(
                allowed=False,
                reason=f"could not record the grant on the pod ({err or type(err).__name__})",
                throttle="api",
                retry_after=2.0,
            )
        # The watch will bring the same object; recording it now keeps the next decision current.
        self._view.pods.record(updated)
        return throttles.ALLOWED

    async def _ask_group(self, slot: ledger.Slot, *, group: str) -> throttles.Verdict | FailOpenCause | None:
        """The group pacer's no, or None for its yes, or the cause when the node throttles alone decide."""
        if self._groups is None:
            if not self._warned_no_controller:
                logger.warning(
                    "pod %s/%s belongs to group %s but no --controller-url is set: node throttles alone decide",
                    slot.namespace,
                    slot.name,
                    group,
                )
                self._warned_no_controller = True
            return "groupPacerNotConfigured"
        if self._watch is not None and self._watch.pushed.take(
            (slot.namespace, slot.name), uid=slot.uid, now=self._clock()
        ):
            logger.debug("%s/%s: granted by group %s in the wait stream", slot.namespace, slot.name, group)
            return None
        answer = await self._groups.ask(
            {
                "namespace": slot.namespace,
                "name": slot.name,
                "uid": slot.uid,
                "group": group,
                "node": self._view.node,
            }
        )
        if answer.granted:
            if answer.failed_open:
                logger.warning("%s/%s: %s", slot.namespace, slot.name, answer.reason)
                return "groupPacerUnreachable"
            return None
        retry_after = answer.retry_after
        if self._watch is not None:
            if self._watch.healthy:
                retry_after = max(retry_after, self._recheck)
            # The stream's task runs after the ledger has put the pod aside (this returns first).
            self._watch.aside_changed()
        return throttles.Verdict(
            allowed=False,
            reason=f"group {group}: {answer.reason}",
            throttle=ledger.GROUP_THROTTLE,
            retry_after=retry_after,
        )


class EventAnnouncer:
    """StaggerWaiting when a pod is first held, StaggerGranted with the time it waited."""

    def __init__(self, *, recorder: events.EventRecorder, node: str, wall: Callable[[], float]) -> None:
        self._recorder = recorder
        self._node = node
        self._wall = wall

    def waiting(self, waiter: ledger.Waiter) -> None:
        self._recorder.record(
            events.pod_event(
                pod=events.PodRef(waiter.namespace, waiter.name, waiter.uid),
                reason="StaggerWaiting",
                message=f"waiting for a start-up slot on node {self._node}: {waiter.reason}",
                component=EVENT_COMPONENT,
                host=self._node,
                wall=self._wall(),
            )
        )

    def granted(self, slot: ledger.Slot, *, node_policy: policy.NodePolicy) -> None:
        self._recorder.record(
            events.pod_event(
                pod=events.PodRef(slot.namespace, slot.name, slot.uid),
                reason="StaggerGranted",
                message=(
                    f"start-up slot granted on node {self._node} after {slot.waited:.1f}s "
                    f"(node policy {node_policy.name})"
                ),
                component=EVENT_COMPONENT,
                host=self._node,
                wall=self._wall(),
            )
        )


def probed_ready_recorder(
    *, client: RestClient, view: NodeView, names: Names
) -> Callable[[ledger.PodKey, float], Coroutine[Any, Any, None]]:
    """For lockd/prober.py: writes `<prefix>/probed-ready-at` on a pod whose probe lockd saw pass, which also
    makes the kubelet run the pod's readiness probe at once (`Names.probed_ready_annotation`). A failure
    is logged and changes nothing else: the slot has ended, and the Ready condition comes at the kubelet's
    next period."""

    async def record(key: ledger.PodKey, wall: float) -> None:
        patch = {"metadata": {"annotations": {names.probed_ready_annotation: format_rfc3339(wall)}}}
        try:
            updated = await client.patch(PODS, name=key[1], namespace=key[0], patch=patch)
        except (ApiError, aiohttp.ClientError, TimeoutError) as err:
            logger.info(
                "could not record on %s/%s that its probe passed: %s", *key, err or type(err).__name__
            )
            return
        view.pods.record(updated)

    return record


def follow_pods(view: NodeView, service: LockService) -> None:
    """Slots end when their pod is Ready, finishes or is deleted; the service hears of every change."""

    def on_pod(kind: WatchEventType, obj: dict[str, Any]) -> None:
        key = pods.key_of(obj)
        service.pod_changed(key, "deleted" if kind == "DELETED" else pods.stage(obj))

    view.pods.add_handler(on_pod)


def pod_details(
    view: NodeView, *, probes: Callable[[ledger.PodKey], str] | None = None
) -> Callable[[ledger.PodKey], dict[str, str]]:
    """For /status: each slot's and waiter's pod phase and why its slot is still held, and with `probes`
    (lockd/prober.py) the last results of lockd's runs of its probes, or why lockd runs none."""

    def details(key: ledger.PodKey) -> dict[str, str]:
        pod = view.pod(key)
        found = {
            "phase": pods.phase(pod) if pod is not None else "Unknown",
            "heldBecause": pods.why_held(pod),
        }
        if probes is not None and (probed := probes(key)):
            found["readinessProbe"] = probed
        return found

    return details
