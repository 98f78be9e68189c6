"""A randomized herd for a chaos run, from a seed: nodes, a node policy, staggering groups in every mode,
and workloads of every kind (Deployments, StatefulSets, Jobs, bare pods) spread over the groups.

Pure: `random_herd(seed)` is a function of the seed, so that a failing run replays exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from sim.cluster.scenario import NodePool, Scenario, StaggerConfig, Workload

__all__ = ["GROUP_LABEL", "MODES", "ChaosGroup", "ChaosHerd", "ChaosWorkload", "random_herd"]

GROUP_LABEL = "chaos-group"
MODES = ("lock", "gate", "evict", "evict-stub")
Kind = Literal["Deployment", "StatefulSet", "Job", "Pod"]


@dataclass(frozen=True)
class ChaosGroup:
    name: str
    mode: str
    max_concurrent: int


@dataclass(frozen=True)
class ChaosWorkload:
    kind: Kind
    name: str
    replicas: int
    group: str | None
    """The staggering group its pods are in (None: paced by the node policy only)."""


@dataclass(frozen=True)
class ChaosHerd:
    seed: int
    namespace: str
    nodes: int
    node_limit: int
    groups: tuple[ChaosGroup, ...]
    workloads: tuple[ChaosWorkload, ...]
    time_scale: float = 10.0

    @property
    def pods(self) -> int:
        return sum(w.replicas for w in self.workloads)

    def policies(self) -> dict[str, Any]:
        """The policy file (lockd's and the controller's)."""
        staggering = []
        for group in self.groups:
            policy: dict[str, Any] = {
                "name": group.name,
                "labelSelector": {"matchLabels": {GROUP_LABEL: group.name}},
                "pacer": {"maxConcurrent": {"value": group.max_concurrent}},
                "mode": "evict" if group.mode == "evict-stub" else group.mode,
            }
            if group.mode == "evict-stub":
                policy["hold"] = "stub"
            staggering.append(policy)
        return {
            "staggeringPolicies": staggering,
            "nodePolicies": [
                {
                    "name": "chaos-node",
                    "throttleConfig": {"maxConcurrent": {"value": self.node_limit}},
                    "holdTimeout": "5m",
                }
            ],
        }

    def scenario(self) -> Scenario:
        """The sim scenario: every workload as a Deployment or Job (StatefulSets and bare pods are made
        from a Deployment's template by the runner)."""
        workloads = tuple(
            Workload(
                kind="Job" if w.kind == "Job" else "Deployment",
                name=w.name,
                namespace=self.namespace,
                replicas=w.replicas,
                cpu_seconds=10.0,
                liveness_seconds=None,
                run_seconds=5.0 if w.kind == "Job" else None,
                requests={"cpu": "100m", "memory": "64Mi"},
                labels={GROUP_LABEL: w.group} if w.group else {},
            )
            for w in self.workloads
        )
        return Scenario(
            name=f"chaos-{self.seed}",
            nodes=NodePool(count=self.nodes, cores=4, memory="16Gi"),
            workloads=workloads,
            stagger=StaggerConfig(
                enabled=True,
                host_port=0,
                policies=yaml.safe_dump(self.policies(), sort_keys=False),
                controller=True,
            ),
            time_scale=self.time_scale,
        )

    def describe(self) -> str:
        groups = ", ".join(f"{g.name} ({g.mode}, maxConcurrent {g.max_concurrent})" for g in self.groups)
        kinds = ", ".join(
            f"{w.kind} {w.name} x{w.replicas} in {w.group or 'no group'}" for w in self.workloads
        )
        return (
            f"seed {self.seed}: {self.nodes} nodes (node maxConcurrent {self.node_limit}), groups: {groups}; "
            f"{self.pods} pods: {kinds}"
        )


def random_herd(seed: int, *, size: Literal["small", "full"] = "full") -> ChaosHerd:
    """A herd for `seed`. `small` (the seeds `make test` runs): 2 nodes, about 12 pods; `full`: 2-4
    nodes, 20-40 pods."""
    rng = random.Random(seed)
    small = size == "small"
    modes = list(MODES)
    rng.shuffle(modes)
    groups = tuple(
        ChaosGroup(name=f"g{i}", mode=modes[i % len(modes)], max_concurrent=rng.randint(1, 3))
        for i in range(2 if small else rng.randint(2, 4))
    )
    kinds: list[Kind] = ["Deployment", "StatefulSet", "Job", "Pod"]
    rng.shuffle(kinds)
    count = 4 if small else rng.randint(4, 7)
    workloads = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        replicas = rng.randint(2, 4) if small else rng.randint(3, 8)
        group = None if rng.random() < 0.2 else rng.choice(groups).name
        workloads.append(ChaosWorkload(kind=kind, name=f"{kind.lower()}-{i}", replicas=replicas, group=group))
    return ChaosHerd(
        seed=seed,
        namespace=f"chaos-{seed}",
        nodes=2 if small else rng.randint(2, 4),
        node_limit=rng.randint(2, 4),
        groups=groups,
        workloads=tuple(workloads),
    )
