"""The pacer arithmetic of staggering groups: how many pods of a group may have started, given how many
are Ready.

Pure functions of two counts. R (`ready`) is the number of Ready pods of the group, S (`starting`) the
number of pods that are starting: granted (or never held), not Ready, not finished, not deleted, granted
less than the policy's `startTimeout` ago. Who counts as what is the group book's business
(`stagger.groupbook`); here is only what a pacer allows for given R and S.

- exponential: `max(minInitial, ceil(R x multiplier))` pods may have started (R + S); no limit once
  R >= maxStagger. With 4/4/16: 4 start, then 16 once 4 are Ready, then all once 16 are Ready.
- linear: `step` pods may be starting at once (R + step started) until R >= maxStagger, then no limit.
- maxConcurrent: `value` pods may be starting at once (R + value started), always.
"""

from __future__ import annotations

import math
from decimal import Decimal

from stagger.policy import ExponentialPacer, LinearPacer, MaxConcurrentPacer, Pacer

__all__ = ["allowance", "describe", "name", "room"]


def allowance(pacer: Pacer, *, ready: int) -> int | None:
    """How many pods of the group may have started (Ready + starting); None: no limit."""
    match pacer:
        case ExponentialPacer(min_initial=min_initial, multiplier=multiplier, max_stagger=max_stagger):
            if ready >= max_stagger:
                return None
            # Decimal on the written number: multiplier 1.1 with 10 Ready allows 11, not
            # ceil(11.000000000000002) = 12.
            return max(min_initial, math.ceil(Decimal(repr(multiplier)) * ready))
        case LinearPacer(step=step, max_stagger=max_stagger):
            return None if ready >= max_stagger else ready + step
        case MaxConcurrentPacer(value=value):
            return ready + value


def room(pacer: Pacer, *, ready: int, starting: int) -> int | None:
    """How many more pods of the group may start now (never negative); None: no limit."""
    limit = allowance(pacer, ready=ready)
    if limit is None:
        return None
    return max(0, limit - (ready + starting))


def name(pacer: Pacer) -> str:
    """The pacer as written in the policy file, short: `exponential 4/4/16`, `linear step 2`, ..."""
    match pacer:
        case ExponentialPacer(min_initial=min_initial, multiplier=multiplier, max_stagger=max_stagger):
            return f"exponential {min_initial}/{multiplier:g}/{max_stagger}"
        case LinearPacer(step=step):
            return f"linear step {step}"
        case MaxConcurrentPacer(value=value):
            return f"maxConcurrent {value}"


def describe(pacer: Pacer, *, ready: int, starting: int) -> str:
    """The reason text for the pacer's state, with its numbers (for grant answers, events, /status).

    `4 of 4 started (exponential 4/4/16, 0 Ready)`, `2 of 2 starting (linear step 2 until 10 Ready,
    3 Ready)`, `3 of 3 starting (maxConcurrent 3)`, `no limit: 16 Ready >= maxStagger 16 (exponential
    4/4/16)`.
    """
    limit = allowance(pacer, ready=ready)
    match pacer:
        case ExponentialPacer(max_stagger=max_stagger):
            if limit is None:
                return f"no limit: {ready} Ready >= maxStagger {max_stagger} ({name(pacer)})"
            # The exponential limit is on pods started (Ready included), so that is the number shown.
            return f"{ready + starting} of {limit} started ({name(pacer)}, {ready} Ready)"
        case LinearPacer(step=step, max_stagger=max_stagger):
            if limit is None:
                return f"no limit: {ready} Ready >= maxStagger {max_stagger} ({name(pacer)})"
            return f"{starting} of {step} starting ({name(pacer)} until {max_stagger} Ready, {ready} Ready)"
        case MaxConcurrentPacer(value=value):
            return f"{starting} of {value} starting ({name(pacer)})"
