"""How a pod that started without its start-up slot says why (docs/contracts.md, "Fail-open causes").

stagger fails open: a pod it cannot pace starts anyway. Each way that can happen has a cause, and each
cause reaches the controller, which counts it, puts an Event on the pod and sums it in `/status`:

- the init client writes its outcome as its container's termination message (`/dev/termination-log`,
  Kubernetes' default `terminationMessagePath`); the kubelet copies it into the pod's status
  (`initContainerStatuses[].state.terminated.message`). `format_outcome` writes it, `read_outcome` reads it.
- lockd writes the `failed-open` annotation with its grant when the group pacer could not be asked.
- the controller itself sees a pod that opted in but was admitted without stagger's init container.

Types only, and pure readers: no I/O here.
"""

from __future__ import annotations

import json
from typing import Final, Literal, NotRequired, TypedDict, get_args

__all__ = [
    "CAUSES",
    "MESSAGE_LIMIT",
    "FailOpenCause",
    "InitOutcome",
    "format_outcome",
    "read_outcome",
]

FailOpenCause = Literal[
    # The init client gave up while lockd could not decide: no connection, 5xx, not ready (--unreachable-wait).
    "lockdUnreachable",
    # The init client waited in lockd's queue for its whole max-wait (or lockd's node policy maxWait).
    "maxWait",
    # lockd answered 4xx: asking again would not help (a bad name, a pod lockd does not know of).
    "rejected",
    # The init client's own configuration was unusable (its environment, its flags).
    "badConfig",
    # lockd granted the node slot without the group pacer: it was unreachable (groupFailurePolicy open).
    "groupPacerUnreachable",
    # lockd granted the node slot without the group pacer: it has no --controller-url to ask.
    "groupPacerNotConfigured",
    # The pod opted in but was admitted without stagger's init container (webhook not called, or failed).
    "webhookNotCalled",
    # The init client finished without a grant and left no outcome (an older init client, say).
    "unknown",
]
CAUSES: Final[tuple[FailOpenCause, ...]] = get_args(FailOpenCause)

# The kubelet keeps at most 4096 bytes of a container's termination message.
MESSAGE_LIMIT: Final = 4096


class InitOutcome(TypedDict):
    """The init client's termination message, as JSON: `{"slot": "granted"}`, or `{"slot": "none",
    "cause": ..., "reason": ...}` when it let the pod start without a slot."""

    slot: Literal["granted", "none"]
    cause: NotRequired[FailOpenCause]
    reason: NotRequired[str]  # the init client's one line on why; may be cut to fit MESSAGE_LIMIT


def format_outcome(*, cause: FailOpenCause | None, reason: str = "") -> str:
    """The termination message: granted when `cause` is None; at most MESSAGE_LIMIT bytes in UTF-8."""
    if cause is None:
        return json.dumps({"slot": "granted"})
    outcome: InitOutcome = {"slot": "none", "cause": cause, "reason": reason}
    text = json.dumps(outcome, ensure_ascii=True)
    if len(text) <= MESSAGE_LIMIT:
        return text
    # ASCII only, so one character is one byte; the cut leaves room for the JSON around the reason.
    room = MESSAGE_LIMIT - len(json.dumps({**outcome, "reason": ""})) - len(" [cut]")
    cut = json.dumps(reason)[1 : room + 1]
    while True:  # a cut inside an escape (\" or \u00e9) would not decode: drop its start too
        try:
            shortened = json.loads(f'"{cut}"')
            break
        except json.JSONDecodeError:
            cut = cut[:-1]
    return json.dumps({**outcome, "reason": shortened + " [cut]"}, ensure_ascii=True)


def read_outcome(message: object) -> InitOutcome | None:
    """The outcome in a termination message, or None when the message is not one (another container's,
    an older init client's, the logs that `FallbackToLogsOnError` put there)."""
    if not isinstance(message, str) or not message.startswith("{"):
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("slot") == "granted":
        return {"slot": "granted"}
    cause = data.get("cause")
    if data.get("slot") != "none" or cause not in CAUSES:
        return None
    reason = data.get("reason")
    return {"slot": "none", "cause": cause, "reason": reason if isinstance(reason, str) else ""}
