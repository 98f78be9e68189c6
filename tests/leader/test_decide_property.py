"""A property of the pure core (webhook.leader.decide) with the shell's renew-deadline rule: candidates
reading and writing one shared Lease record with optimistic concurrency (a write lands only on the
resourceVersion it read), in any interleaving, with writes that are lost before they land or land while
their answer is lost, and any time passing between steps (one clock, as on one machine), never both
believe they lead at the same `now`. The wall clock written as renewTime is frozen, the worst case: a
renewal must still change the record (a microsecond later), or a follower would not restart its count.

A candidate believes it leads from a write that it knows landed until `renew_deadline` after it sent its
last such write (LeaderElector.is_leader), or until it reads another holder. The same model without the
renew-deadline rule (a leader that believes until it reads otherwise) does break, as the last test shows:
the rule is what makes leader election safe."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st

from webhook.leader import Action, LeaseRecord, Observed, Timings, decide

TIMINGS = Timings()  # 15 s / 10 s / 2 s
WALL = 1_795_428_000.0


@dataclass
class Store:
    record: LeaseRecord | None = None
    version: int = 0


@dataclass
class Candidate:
    identity: str
    deadline_rule: bool = True
    observed: Observed | None = None
    pending: tuple[int, LeaseRecord] | None = None  # the version read and the record to write
    leading: bool = False
    deadline: float = float("-inf")
    took_over: list[float] = field(default_factory=list)

    def believes(self, now: float) -> bool:
        return self.leading and (now < self.deadline or not self.deadline_rule)

    def read(self, store: Store, now: float) -> None:
        decision = decide(
            store.record, self.observed, identity=self.identity, timings=TIMINGS, now=now, wall=WALL
        )
        self.observed = decision.observed
        if decision.action is Action.FOLLOW:
            self.leading = False  # another holder's unexpired lease: not (or no longer) the leader
            self.pending = None
        else:
            assert decision.record is not None
            self.pending = (store.version, decision.record)

    def write(self, store: Store, now: float, outcome: str) -> None:
        if self.pending is None:
            return
        version, record = self.pending
        self.pending = None
        if outcome == "dropped" or version != store.version:  # lost on the way, or a 409
            return
        store.record, store.version = record, store.version + 1
        if outcome == "answer-lost":  # it landed, but the candidate does not know
            return
        self.observed = Observed(record, now)
        if not self.leading:
            self.took_over.append(now)
        self.leading = True
        self.deadline = max(self.deadline, now + TIMINGS.renew_deadline)


DELAYS = st.one_of(
    st.sampled_from([0.0, 0.5, 2.0, 4.99, 5.0, 9.99, 10.0, 10.01, 14.99, 15.0, 15.01, 30.0]),
    st.floats(min_value=0.0, max_value=20.0, allow_nan=False),
)
KINDS = [
    # A whole try (read, then write at once), as the shell does, most of the time ...
    "try", "try", "try", "try-dropped", "try-answer-lost",
    # ... and its halves, so that other steps (and time) come between a read and its write.
    "read", "write", "dropped", "answer-lost",
]  # fmt: skip
STEPS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=1), st.sampled_from(KINDS), DELAYS),
    min_size=4,
    max_size=80,
)


def run(
    steps: list[tuple[int, str, float]], *, deadline_rule: bool = True
) -> tuple[list[Candidate], float | None]:
    """Plays `steps`; returns the candidates and the first `now` at which two believed they lead."""
    store = Store()
    candidates = [Candidate("a", deadline_rule), Candidate("b", deadline_rule)]
    now = 0.0
    for who, what, delay in steps:
        now += delay
        candidate = candidates[who]
        if what == "read" or what.startswith("try"):
            candidate.read(store, now)
        if what != "read":
            outcome = what.removeprefix("try").removeprefix("-") or "ok"
            candidate.write(store, now, "ok" if outcome == "write" else outcome)
        if all(c.believes(now) for c in candidates):
            return candidates, now
    return candidates, None


@settings(max_examples=500, deadline=None)
@given(STEPS)
def test_two_candidates_never_both_believe_they_lead(steps: list[tuple[int, str, float]]) -> None:
    candidates, both_at = run(steps)
    assert both_at is None, f"both lead at {both_at}"
    starts = sum(len(c.took_over) for c in candidates)
    event(f"times a candidate started leading: {min(starts, 3)}{'+' if starts >= 3 else ''}")


def test_a_takeover_after_the_lease_duration() -> None:
    """a leads, then its renewals are lost; b takes over once it has seen the same record for 15 s,
    when a has already stopped believing (10 s after its last renewal)."""
    steps = [
        (0, "read", 0.0), (0, "write", 0.0),  # a creates the Lease at 0
        (1, "read", 1.0),  # b sees it at 1
        (0, "read", 1.0), (0, "dropped", 0.0),  # a's renewal at 2 is lost
        (1, "read", 14.0),  # 16: exactly expired for b (seen at 1, 15 s)
    ]  # fmt: skip
    candidates, both_at = run([*steps, (1, "write", 0.0)])
    a, b = candidates
    assert both_at is None
    assert b.took_over == [16.0] and b.believes(16.0) and not a.believes(16.0)
    assert a.deadline == 10.0


def test_without_the_renew_deadline_rule_both_would_lead() -> None:
    steps = [(0, "read", 0.0), (0, "write", 0.0), (1, "read", 1.0), (1, "read", 15.0), (1, "write", 0.0)]
    _, both_at = run(steps, deadline_rule=False)
    assert both_at == 16.0
    _, both_at = run(steps)
    assert both_at is None
