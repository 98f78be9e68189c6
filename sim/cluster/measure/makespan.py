"""The ideal makespan of a herd under a start-up limit (pure): every node's slots reused the instant a pod
is Ready, no launch, poll or scheduling overhead, computed with the start-up model's own rate function
(``sim.cluster.startup.per_container_rate``).

``ideal_makespan(nodes=N, cores=c, limit=k, pods_per_node=n, cpu_seconds=C, penalty=p)`` simulates each
node's queue: at most ``k`` of its ``n`` identical pods starting at once (``limit=None``: all at once), all
of them sharing the node's cores as the model says, and a waiting pod started the moment one becomes
Ready. With ``k <= cores`` each start runs at one core, so a node takes ``ceil(n / k) * C``; above the
cores the shared rate and the contention penalty decide. The liveness deadline is not modelled: the
ideal assumes no restart (with ``limit=None`` on an oversubscribed node that is far from what happens).

``arrivals`` (one sorted list of simulated times per node) puts each pod on its node at the time given
instead of at 0: the ideal for the pods as the control plane actually delivered them (``nodes`` and
``pods_per_node`` are then taken from it).

``pacer`` adds a staggering group's pacer over all the pods of the cluster (one group): at most
``allowance(ready)`` pods of the group started (Ready + starting), each granted start placed on the node
with the fewest pods started so far (the best case for the makespan).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from sim.cluster.startup import per_container_rate
from stagger.pacers import allowance
from stagger.policy import Pacer

__all__ = ["ideal_makespan"]

_EPS = 1e-9


def ideal_makespan(
    *,
    nodes: int,
    cores: float,
    limit: int | None,
    pods_per_node: int,
    cpu_seconds: float,
    penalty: float,
    pacer: Pacer | None = None,
    arrivals: Sequence[Sequence[float]] | None = None,
) -> float:
    """Simulated seconds from all pods present (t = 0, or their ``arrivals``) until the last one is Ready,
    in the best case."""
    if arrivals is not None:
        nodes = len(arrivals)
        pending = [sorted(a) for a in arrivals]
        if not any(pending):
            return 0.0
        pods_per_node = max(len(a) for a in pending)
    else:
        pending = [[0.0] * pods_per_node for _ in range(max(nodes, 0))]
    if nodes <= 0 or pods_per_node < 0 or cores <= 0 or cpu_seconds < 0:
        raise ValueError("need nodes > 0, pods_per_node >= 0, cores > 0, cpu_seconds >= 0")
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be > 0, got {limit}")
    if pods_per_node == 0:
        return 0.0
    cap = pods_per_node if limit is None else min(limit, pods_per_node)
    waiting = [0] * nodes  # arrived, not started
    started = [0] * nodes
    remaining: list[list[float]] = [[] for _ in range(nodes)]  # work left of each starting pod
    ready = 0
    now = 0.0
    total = sum(len(a) for a in pending)
    cursor = [0] * nodes  # arrivals taken into `waiting`
    while True:
        for i, times in enumerate(pending):
            while cursor[i] < len(times) and times[cursor[i]] <= now + _EPS:
                cursor[i] += 1
                waiting[i] += 1
        # Start what the limits allow now.
        room = None if pacer is None else allowance(pacer, ready=ready)
        group_room = math.inf if room is None else room - (ready + sum(len(r) for r in remaining))
        if group_room > 0:
            # Nodes with a waiting pod and a free slot, fewest started first.
            candidates = [(started[i], i) for i in range(nodes) if waiting[i] and len(remaining[i]) < cap]
            heapq.heapify(candidates)
            while candidates and group_room > 0:
                _, i = heapq.heappop(candidates)
                remaining[i].append(cpu_seconds)
                waiting[i] -= 1
                started[i] += 1
                group_room -= 1
                if waiting[i] and len(remaining[i]) < cap:
                    heapq.heappush(candidates, (started[i], i))
        if ready == total:
            return now
        # The next Ready: each node's starting pods all run at the rate of their count.
        step = math.inf
        rates = []
        for work in remaining:
            rate = per_container_rate(starting=len(work), cores=cores, penalty=penalty)
            rates.append(rate)
            if work:
                step = min(step, min(work) / rate)
        arrival = min((t[c] for t, c in zip(pending, cursor, strict=True) if c < len(t)), default=math.inf)
        step = min(step, arrival - now)
        if step == math.inf:
            raise RuntimeError("no pod can start: the pacer allows none")  # a pacer always allows >= 1
        now += step
        for i, work in enumerate(remaining):
            if not work:
                continue
            left = [w - rates[i] * step for w in work]
            remaining[i] = [w for w in left if w > _EPS * max(1.0, cpu_seconds)]
            ready += len(left) - len(remaining[i])
