"""lockd in a cluster: one list+watch of the pods on this node and one of its Node object, and what
follows from them — identity checks, slot ends, held slots rebuilt after a restart, the node policy
chosen by the node's labels, grants recorded on the pod, group pacing, and Events.

No other API reads happen per request: every answer comes from the informers' caches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from lockd import ledger, pods
from lockd.groups import GroupClient
from lockd.service import LockService
from stagger import events, policy, throttles
from stagger.informer import Informer, InformerSettings
from stagger.kube import NODES, PODS, ApiError, RestClient, WatchEventType
from stagger.names import Names
from stagger.timestamps import format_rfc3339

logger = logging.getLogger(__name__)

EVENT_COMPONENT = "stagger-lockd"


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
    ) -> None:
        self.node = node
        self.names = names
        self.own_pod = own_pod
        self.pods = Informer(
            client=client, resource=PODS, settings=informer_settings, field_selector=f"spec.nodeName={node}"
        )
        self.nodes = Informer(
            client=client, resource=NODES, settings=informer_settings, field_selector=f"metadata.name={node}"
        )

    def pod(self, key: ledger.PodKey) -> dict[str, Any] | None:
        return self.pods.get(f"{key[0]}/{key[1]}")

    def node_labels(self) -> dict[str, str]:
        obj = self.nodes.get(self.node) or {}
        return dict((obj.get("metadata") or {}).get("labels") or {})

    def identity_problem(self, *, namespace: str, name: str, uid: str) -> str | None:
        return pods.identity_problem(
            self.pod((namespace, name)), node=self.node, namespace=namespace, name=name, uid=uid
        )

    # NodeState
    def starting_elsewhere(self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]) -> int:
        return len(
            pods.other_starting(
                self.pods.objects(),
                names=self.names,
                exclude_namespaces=node_policy.exclude_namespaces,
                holders=holders,
            )
        )

    def daemonsets_waiting(self) -> list[str]:
        return pods.daemonsets_not_ready(self.pods.objects(), own_pod=self.own_pod)

    async def run(self) -> None:
        await asyncio.gather(self.pods.run(), self.nodes.run())

    async def wait_synced(self) -> None:
        await asyncio.gather(self.pods.synced.wait(), self.nodes.synced.wait())


class ClusterFinisher:
    """Completes a reserved grant: the group pacer (if the pod belongs to a group), then one patch of the
    pod that records the grant (`granted-at`) and takes the pod off the held list (`staggered` label)."""

    def __init__(
        self, *, client: RestClient, view: NodeView, groups: GroupClient | None, names: Names
    ) -> None:
        self._client = client
        self._view = view
        self._groups = groups
        self._names = names
        self._warned_no_controller = False

    async def finish(self, slot: ledger.Slot, *, wall: float) -> throttles.Verdict:
        key = (slot.namespace, slot.name)
        pod = self._view.pod(key)
        if pod is None:
            return throttles.Verdict(
                allowed=False, reason="pod no longer on this node", throttle="api", retry_after=1.0
            )
        group = ((pod.get("metadata") or {}).get("labels") or {}).get(self._names.group_label)
        if group:
            verdict = await self._ask_group(slot, group=str(group))
            if verdict is not None:
                return verdict
        patch = {
            "metadata": {
                "annotations": {self._names.granted_at_annotation: format_rfc3339(wall)},
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

    async def _ask_group(self, slot: ledger.Slot, *, group: str) -> throttles.Verdict | None:
        if self._groups is None:
            if not self._warned_no_controller:
                logger.warning(
                    "pod %s/%s belongs to group %s but no --controller-url is set: node throttles alone decide",
                    slot.namespace,
                    slot.name,
                    group,
                )
                self._warned_no_controller = True
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
            return None
        return throttles.Verdict(
            allowed=False,
            reason=f"group {group}: {answer.reason}",
            throttle="group",
            retry_after=answer.retry_after,
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


def follow_pods(view: NodeView, service: LockService) -> None:
    """Slots end when their pod is Ready, finishes or is deleted; the service hears of every change."""

    def on_pod(kind: WatchEventType, obj: dict[str, Any]) -> None:
        key = pods.key_of(obj)
        service.pod_changed(key, "deleted" if kind == "DELETED" else pods.stage(obj))

    view.pods.add_handler(on_pod)


def pod_details(view: NodeView) -> Callable[[ledger.PodKey], dict[str, str]]:
    """For /status: each slot's and waiter's pod phase and why its slot is still held."""

    def details(key: ledger.PodKey) -> dict[str, str]:
        pod = view.pod(key)
        return {
            "phase": pods.phase(pod) if pod is not None else "Unknown",
            "heldBecause": pods.why_held(pod),
        }

    return details
