"""The label, annotation and scheduling-gate names stagger puts on pods, under one configurable prefix."""

from __future__ import annotations

from dataclasses import dataclass

from stagger.selectors import label_key_problem

__all__ = ["DEFAULT_PREFIX", "DEFAULT_TOKEN_AUDIENCE", "Names"]

DEFAULT_PREFIX = "v1.stagger.technicianted"
# The audience of the service-account token admission projects into the init client, and lockd asks the
# API server to check: a token for stagger, of no use against the API server or anyone else.
DEFAULT_TOKEN_AUDIENCE = "stagger"


@dataclass(frozen=True)
class Names:
    """All names derive from `prefix`, so two installations with different prefixes never collide."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        # Checked once here so that a bad --prefix fails at startup, not at the first API write.
        problem = label_key_problem(f"{self.prefix}/enable") if self.prefix else "must not be empty"
        if problem:
            raise ValueError(f"prefix: {problem.replace('label key prefix ', '')} (got {self.prefix!r})")

    def _name(self, suffix: str) -> str:
        return f"{self.prefix}/{suffix}"

    @property
    def enable_label(self) -> str:
        """Label `"1"` opts a pod in; the webhook's objectSelector."""
        return self._name("enable")

    @property
    def staggered_label(self) -> str:
        """Label `"1"` while a pod is held waiting for its pacer."""
        return self._name("staggered")

    @property
    def group_label(self) -> str:
        """Label whose value is a hash of the pod's (policy names, grouping keys)."""
        return self._name("group")

    @property
    def policies_annotation(self) -> str:
        return self._name("policies")

    @property
    def group_key_annotation(self) -> str:
        return self._name("group-key")

    @property
    def granted_at_annotation(self) -> str:
        """When the start-up slot was granted; lets restarted components rebuild counts from the API."""
        return self._name("granted-at")

    @property
    def node_slot_annotation(self) -> str:
        """When this node's lockd granted the pod its start-up slot (the node throttle's), written with
        `granted-at` at every lockd grant: what a restarted lockd rebuilds its slots from. `granted-at`
        alone cannot tell: the controller writes it too, for a group grant (gate and evict mode), before
        the pod's init client has asked lockd for its node slot."""
        return self._name("node-slot")

    @property
    def probed_ready_annotation(self) -> str:
        """When lockd's own run of the pod's readiness probe passed and ended its node slot (lockd/prober.py).
        Besides telling people when the slot ended, the write is what makes the kubelet look again at once:
        a pod's annotations changing makes the kubelet sync the pod, and its sync runs the readiness probe
        of a running container not yet ready right away (kubelet prober manager, UpdatePodStatus), so the
        Ready condition follows within about a second instead of at the next periodSeconds."""
        return self._name("probed-ready-at")

    @property
    def node_slot_unready_since_annotation(self) -> str:
        """The `lastTransitionTime` of the pod's Ready condition (not Ready) as lockd saw it when it granted
        the node slot, written in the same patch as `node-slot`. A restarted lockd compares it with the
        pod's condition now: a different time means the pod has been Ready since its grant (the slot ended
        then) and is unready again, after its node restarted or a readiness probe failed. The kubelet's
        time against the kubelet's own, so no two clocks need to agree."""
        return self._name("node-slot-unready-since")

    @property
    def failed_open_annotation(self) -> str:
        """Written by lockd with a grant the group pacer had no say in, naming why
        (`stagger.contracts.failopen`: groupPacerUnreachable, groupPacerNotConfigured); the controller
        counts it as a fail-open."""
        return self._name("failed-open")

    @property
    def started_without_slot_annotation(self) -> str:
        """Written by the controller's leader once it has counted a pod that started without its slot and
        put an Event on it, naming the cause: so that no replica counts the pod again."""
        return self._name("started-without-slot")

    @property
    def scheduling_gate(self) -> str:
        return self._name("pacing")

    @property
    def hold_annotation(self) -> str:
        """On a pod held in evict mode: how it is held (`nodeSelector` or `stub`). The controller evicts
        the held pods that carry it when their pacers allow."""
        return self._name("hold")

    @property
    def hold_node_label(self) -> str:
        """The node label a pod held with `hold: nodeSelector` selects (`"true"`): no node has it."""
        return self._name("hold")

    @property
    def held_since_annotation(self) -> str:
        """When the hold of a pod began (evict mode): the first hold of its chain, carried over by the
        owner's reservation when a replacement has to be held again. Its place in the queue and the start
        of its maxBlockedDuration."""
        return self._name("held-since")

    @property
    def ticket_annotation(self) -> str:
        """On a pod admitted in evict mode without a hold: the id of the place counted for it (the owner's
        reservation it used, or the place admission took), which the pod itself counts for once seen."""
        return self._name("ticket")

    @property
    def evictable_annotation(self) -> str:
        """On a Job's pod template (by `POST /mutate/jobs`): `"1"` when the Job does not count an eviction
        as a failure, so its pods may be held in evict mode."""
        return self._name("evictable")
