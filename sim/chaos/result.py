"""The result of one chaos run (`sim.chaos.run`): what it injected, what it saw and the problems its
checks found; a run that could not finish is a failed one."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sim.chaos.herd import ChaosHerd


@dataclass
class ChaosResult:
    seed: int
    herd: str
    faults: dict[str, int]
    kills: list[str]
    pods: int
    started: int
    group_violations: dict[str, int]
    node_violations: dict[str, str]
    fail_opens: dict[str, int]
    slowest: tuple[str, float] | None
    bound_seconds: float
    not_ready: list[str]
    problems: list[str]
    seconds: float
    crashes: int = 0
    """Tracebacks in lockd's and the controller's logs: a crash, or an error nobody handled."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def replay(self) -> str:
        return f"python -m sim chaos --seed {self.seed}"

    def summary(self) -> str:
        slowest = "none" if self.slowest is None else f"{self.slowest[0]} {self.slowest[1]:.1f}s"
        lines = [
            f"chaos {self.herd}",
            f"  faults injected: {dict(sorted(self.faults.items())) or 'none'}; kills: {self.kills or 'none'}",
            f"  pods: {self.pods} created, {self.started} started; fail-opens: {self.fail_opens or 'none'}",
            f"  group limit violations: {self.group_violations or 'none'}; node: {self.node_violations or 'none'}",
            f"  slowest pod: {slowest} (bound {self.bound_seconds:.0f}s); took {self.seconds:.0f}s",
        ]
        if self.problems:
            lines.append("  FAILED: " + "; ".join(self.problems))
            lines.append(f"  replay: {self.replay()}")
        else:
            lines.append("  ok")
        return "\n".join(lines)


def failed_run(*, seed: int, herd: ChaosHerd, why: str, began: float) -> ChaosResult:
    """The result of a run that could not finish (the cluster did not come up, say): a failed seed."""
    return ChaosResult(
        seed=seed,
        herd=herd.describe(),
        faults={},
        kills=[],
        pods=0,
        started=0,
        group_violations={},
        node_violations={},
        fail_opens={},
        slowest=None,
        bound_seconds=0.0,
        not_ready=[],
        problems=[why],
        seconds=time.monotonic() - began,
    )
