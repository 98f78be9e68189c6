"""PodDisruptionBudget arithmetic, as the disruption controller computes it, done on the fly for evictions.

expected: the pods the budget covers (the real controller uses the owning controllers' scale; the
emulator counts the matching pods, which is the same once a workload is settled).
desired healthy: minAvailable (an int, or a percentage of expected rounded up), or expected minus
maxUnavailable (rounded up). healthy: matching pods that are Ready and not being deleted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sim.emulator.selectors import SelectorError, selector_from_object
from stagger.objects import Obj
from stagger.podstate import is_pod_ready


@dataclass(frozen=True)
class Budget:
    expected: int
    desired_healthy: int
    current_healthy: int

    @property
    def disruptions_allowed(self) -> int:
        return max(0, self.current_healthy - self.desired_healthy)


def scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text.endswith("%"):
        return int(text)
    return math.ceil(int(text[:-1]) * total / 100)


def pdb_selects(pdb: Obj, pod: Obj) -> bool:
    """A nil or empty PDB selector selects nothing (as the eviction code insists)."""
    selector_obj = (pdb.get("spec") or {}).get("selector")
    try:
        selector = selector_from_object(selector_obj, nil_selects=False)
    except SelectorError:
        return False
    if selector.empty:
        return False
    return selector.matches((pod.get("metadata") or {}).get("labels"))


def budget(pdb: Obj, pods: Iterable[Obj]) -> Budget:
    covered = [p for p in pods if pdb_selects(pdb, p)]
    expected = len(covered)
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    healthy = sum(
        1 for p in covered if not (p.get("metadata") or {}).get("deletionTimestamp") and is_pod_ready(p)
    )
    return Budget(expected, desired, healthy)
