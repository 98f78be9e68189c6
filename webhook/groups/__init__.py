"""The controller's group pacing, plugged into the TLS app: the pod watch, the group book, leader election,
the grant API lockd calls, the gate and eviction reconcilers, evict mode's admission decisions, Events,
metrics and the `groups` section of `/status`.

It needs the API server (`--kubeconfig`, or the in-cluster service account). Without either (a local
experiment), the controller serves admission only and says so in its log and `/status`.

Who answers: only the leader grants and removes gates, and only once its watch has listed every enabled
pod (its counts rebuilt from the API: `granted-at`, gates, labels, Ready). Every other replica answers
the grant API with 503 naming the leader; admission is answered by all. In evict mode admission needs
the leader's counts: a replica that does not lead asks the leader (`POST /v1/groups/admit` at
`--leader-url`, within `--admit-timeout`), and holds the pod when it cannot get an answer (safe: the
leader evicts held pods as their pacers allow). The leader, while it rebuilds its counts (just started or
elected), waits for them as long before it holds a pod for want of them. On shutdown the leader stops
granting first, waits (at most `--grant-drain`, 5 s) until the grants it reserved show on their
pods, and only then gives up the Lease: the next leader, which counts from the pods, never misses a
grant it did not see.

The parts: the state on the app (`state`), the pod watch (`podwatch`), the leader's book and wake-ups
(`pacing`), the grant and admit API (`api`, with the grant decisions' wire side in `grants`), the steward
(`steward`), and what the part shows (`report`: gauges, readiness, `/status`). `webhook.controller`
installs them on the app, with the reconcilers and leader election.
"""

from __future__ import annotations

from webhook.groups.state import GROUPS, Groups, LeaderFactory, Leadership, SoleLeader

__all__ = ["GROUPS", "Groups", "LeaderFactory", "Leadership", "SoleLeader"]
