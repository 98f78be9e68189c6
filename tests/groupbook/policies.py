"""Staggering policies for the group book's tests: any pacer, selecting every pod."""

from __future__ import annotations

from stagger.policy import Pacer, StaggeringPolicy
from stagger.selectors import LabelSelector


def staggering(
    name: str, pacer: Pacer, *, max_blocked: float = 600.0, start_timeout: float = 300.0
) -> StaggeringPolicy:
    return StaggeringPolicy(
        name=name,
        label_selector=LabelSelector(),
        pacer=pacer,
        max_blocked_duration=max_blocked,
        start_timeout=start_timeout,
    )
