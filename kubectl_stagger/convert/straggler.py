"""straggler (technicianted/straggler): its policy file, `staggeringPolicies` of name, labelSelector,
bypassLabelSelector, groupingExpression, maxBlockedDuration and an exponential or linear pacer, read as
straggler reads it (pkg/cmd/config.go: sigs.k8s.io/yaml into Go structs, so keys match ignoring case, as
its README's `BypassLabelSelector` is spelt) and built as straggler builds it (pkg/cmd/factories.go,
pkg/controller/classifier.go), into stagger's staggering policies.

straggler holds a pod as an idle stub (its containers replaced, a blocking init container added) and evicts
it when its pacer allows (pkg/blocker/stubpod.go, the only blocker its command makes): stagger's
`mode: evict` with `hold: stub`."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubectl_stagger.convert.common import (
    Conversion,
    Input,
    go_get,
    label_map,
    policy_name,
    unique_name,
    unknown_keys,
    yaml_documents,
)
from stagger.durations import DurationError, parse_duration
from stagger.policy import ExponentialPacer, LinearPacer, Pacer, StaggeringPolicy, compile_grouping
from stagger.selectors import LabelSelector

__all__ = ["convert", "is_straggler"]

logger = logging.getLogger(__name__)

_POLICY_FIELDS = (
    "name",
    "labelSelector",
    "bypassLabelSelector",
    "groupingExpression",
    "maxBlockedDuration",
    "pacer",
)
_EXPONENTIAL = ("minInitial", "maxStagger", "multiplier")
_LINEAR = ("maxStagger", "step")
# pkg/controller/defaults: the label straggler's pods opt in with, and the name stagger reads instead.
_STRAGGLER_ENABLE = "v1.straggler.technicianted/enable"
_STAGGER_ENABLE = "v1.stagger.technicianted/enable"


def is_straggler(documents: Sequence[Any]) -> bool:
    return any(
        isinstance(each, Mapping) and go_get(each, "staggeringPolicies") is not None for each in documents
    )


class _Lines:
    """What one conversion says on stderr, in the order found."""

    def __init__(self) -> None:
        self.not_carried: list[str] = []
        self.notes: list[str] = []


def _count(raw: object) -> int | None:
    """A whole number of at least 1, as a pacer's counts must be (Go's *int takes a whole JSON number only:
    4.0 or "4" make its decoder fail); None otherwise."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1 else None


def _exponential(raw: Mapping[Any, Any], *, path: str, lines: _Lines) -> ExponentialPacer | None:
    min_initial, max_stagger = _count(go_get(raw, "minInitial")), _count(go_get(raw, "maxStagger"))
    multiplier = go_get(raw, "multiplier")
    is_number = isinstance(multiplier, int | float) and not isinstance(multiplier, bool)
    if min_initial is None or max_stagger is None or not is_number or not multiplier > 1:
        lines.not_carried.append(
            f"{path}: stagger needs whole minInitial and maxStagger of at least 1 and a multiplier above 1 "
            f"(got {dict(raw)!r})"
        )
        return None
    return ExponentialPacer(min_initial=min_initial, multiplier=float(multiplier), max_stagger=max_stagger)


def _linear(raw: Mapping[Any, Any], *, path: str, lines: _Lines) -> LinearPacer | None:
    step, max_stagger = _count(go_get(raw, "step")), _count(go_get(raw, "maxStagger"))
    if step is None or max_stagger is None:
        lines.not_carried.append(
            f"{path}: needs a whole step and maxStagger of at least 1 (got {dict(raw)!r})"
        )
        return None
    return LinearPacer(step=step, max_stagger=max_stagger)


def _pacer(raw: object, *, path: str, lines: _Lines) -> Pacer | None:
    """factories.go NewPacerFactory: exponential if given, else linear, else straggler refuses the policy;
    a pacer field left out is dereferenced there (straggler crashes)."""
    if not isinstance(raw, Mapping):
        lines.not_carried.append(f"{path}: none (straggler refuses the policy: no pacer configuration)")
        return None
    exponential, linear = go_get(raw, "exponential"), go_get(raw, "linear")
    for extra in unknown_keys(raw, ("exponential", "linear")):
        lines.not_carried.append(f"{path}.{extra}: not a pacer straggler knows (it ignores the key)")
    if isinstance(exponential, Mapping):
        if linear is not None:
            lines.not_carried.append(
                f"{path}.linear: straggler uses the exponential pacer when both are given"
            )
        return _exponential(exponential, path=f"{path}.exponential", lines=lines)
    if isinstance(linear, Mapping):
        return _linear(linear, path=f"{path}.linear", lines=lines)
    lines.not_carried.append(f"{path}: neither exponential nor linear (straggler refuses the policy)")
    return None


def _grouping(raw: object, *, path: str, lines: _Lines) -> str | None:
    """straggler requires an expression (classifier.go: "empty grouping expression") and evaluates it with
    ojg's JSONPath, where a leading `$` may be left out, as stagger allows too."""
    if not isinstance(raw, str) or not raw.strip():
        lines.not_carried.append(
            f"{path}: no groupingExpression (straggler refuses the policy); here all its pods are one group"
        )
        return None
    try:
        compile_grouping(raw)
    except ValueError as error:
        lines.not_carried.append(
            f"{path}: {raw!r} is no JSONPath stagger reads ({error}): all its pods are one group"
        )
        return None
    return raw


def _max_blocked(raw: object, *, path: str, lines: _Lines) -> float | None:
    """metav1.Duration; zero or absent is no limit in straggler (classifier.go takes only one > 0)."""
    seconds = 0.0
    if raw is not None:
        try:
            seconds = parse_duration(raw, path=path)
        except DurationError as error:
            lines.not_carried.append(f"{error}: stagger's default (10m) instead")
            return None
    if seconds <= 0:
        lines.not_carried.append(
            f"{path}: none, so straggler holds a pod without limit; stagger releases a held pod after "
            "maxBlockedDuration, 10m unless set"
        )
        return None
    return seconds


def _policy(
    raw: object, *, index: int, source: str, taken: set[str], lines: _Lines
) -> StaggeringPolicy | None:
    path = f"{source}: staggeringPolicies[{index}]"
    if not isinstance(raw, Mapping):
        lines.not_carried.append(f"{path}: not a mapping (got {raw!r})")
        return None
    for extra in unknown_keys(raw, _POLICY_FIELDS):
        lines.not_carried.append(f"{path}.{extra}: not a key of straggler's policies (it ignores it too)")
    written = go_get(raw, "name")
    name = unique_name(policy_name(written, fallback=f"straggler-{index}"), taken=taken)
    if name != written:
        lines.notes.append(
            f"{path}.name: {written!r} is named {name!r} (a stagger policy name is a DNS-1123 label)"
        )
    selector, problems, label_notes = label_map(go_get(raw, "labelSelector"), path=f"{path}.labelSelector")
    bypass, bypass_problems, bypass_notes = label_map(
        go_get(raw, "bypassLabelSelector"), path=f"{path}.bypassLabelSelector"
    )
    lines.notes.extend(label_notes + bypass_notes)
    pacer = _pacer(go_get(raw, "pacer"), path=f"{path}.pacer", lines=lines)
    if problems or bypass_problems or pacer is None:
        lines.not_carried.extend(
            f"{problem}: the policy {name!r} is left out" for problem in problems + bypass_problems
        )
        if pacer is None:
            lines.not_carried.append(f"{path}: the policy {name!r} is left out (no pacer stagger can run)")
        return None
    max_blocked = _max_blocked(
        go_get(raw, "maxBlockedDuration"), path=f"{path}.maxBlockedDuration", lines=lines
    )
    return StaggeringPolicy(
        name=name,
        # An absent or empty labelSelector selects every pod in straggler (labels.SelectorFromSet).
        label_selector=selector if selector is not None else LabelSelector(),
        pacer=pacer,
        # An empty bypass selector bypasses nothing in straggler (classifier.go checks Empty() first).
        bypass_label_selector=bypass if bypass is not None and not bypass.is_empty else None,
        grouping_expression=_grouping(
            go_get(raw, "groupingExpression"), path=f"{path}.groupingExpression", lines=lines
        ),
        max_blocked_duration=StaggeringPolicy.max_blocked_duration if max_blocked is None else max_blocked,
        mode="evict",
        hold="stub",
    )


def convert(inputs: Sequence[Input]) -> Conversion:
    lines = _Lines()
    policies: list[StaggeringPolicy] = []
    taken: set[str] = set()
    for each in inputs:
        for document in yaml_documents(each.text) or []:
            raw = go_get(document, "staggeringPolicies") if isinstance(document, Mapping) else None
            if isinstance(document, Mapping):
                for extra in unknown_keys(document, ("staggeringPolicies",)):
                    lines.not_carried.append(
                        f"{each.source}: {extra}: not a key of straggler's file (it ignores it)"
                    )
            if raw is None:
                continue
            if not isinstance(raw, list):
                lines.not_carried.append(f"{each.source}: staggeringPolicies: not a list (got {raw!r})")
                continue
            for index, item in enumerate(raw):
                if (
                    policy := _policy(item, index=index, source=each.source, taken=taken, lines=lines)
                ) is not None:
                    policies.append(policy)
    if policies:
        lines.notes.append(
            "straggler holds a pod as an idle stub and evicts it when its pacer allows: here mode: evict, "
            "hold: stub, the same; stagger's default, mode: lock, holds pods in their init container instead, "
            "with fewer API requests per pod"
        )
        lines.notes.append(
            f'pods opt in with the label {_STAGGER_ENABLE}: "1" (straggler\'s was {_STRAGGLER_ENABLE})'
        )
    return Conversion(
        staggering_policies=tuple(policies), not_carried=tuple(lines.not_carried), notes=tuple(lines.notes)
    )
