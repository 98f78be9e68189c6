"""straggler (technicianted/straggler): its policy file, `staggeringPolicies` of name, labelSelector,
bypassLabelSelector, groupingExpression, maxBlockedDuration and an exponential or linear pacer, read as
straggler reads it (pkg/cmd/config.go: sigs.k8s.io/yaml into Go structs, so keys match ignoring case, as
its README's `BypassLabelSelector` is spelt, and a number given for a string is read as its text) and built
as straggler builds it (pkg/cmd/factories.go, pkg/controller/classifier.go), into stagger's staggering
policies.

What straggler refuses, convert refuses (InvalidInput, every problem named): straggler does not start
when a policy has no pacer ("no pacer configuration specified": an empty entry too, as a YAML whose
indentation was lost reads), a pacer field is left out (it dereferences the nil pointer), a value has the
wrong type (its decoder fails), the groupingExpression is empty or another policy's, a name is used twice,
or maxBlockedDuration is no Go duration. What straggler accepts but stagger cannot run (a multiplier of 1,
a JSONPath stagger's parser does not read) is said, and the rest converts.

straggler holds a pod as an idle stub (its containers replaced, a blocking init container added) and evicts
it when its pacer allows (pkg/blocker/stubpod.go, the only blocker its command makes): stagger's
`mode: evict` with `hold: stub`. A maxBlockedDuration of zero or none is no limit in straggler
(classifier.go takes only one > 0): `maxBlockedDuration: never`."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, TypeGuard

from kubectl_stagger.convert.common import (
    ChartValue,
    Conversion,
    Input,
    InvalidInput,
    go_get,
    label_map,
    policy_name,
    unique_name,
    unknown_keys,
    yaml_documents,
)
from stagger.policy import ExponentialPacer, LinearPacer, Pacer, StaggeringPolicy, compile_grouping
from stagger.selectors import LabelSelector

__all__ = ["convert", "go_duration", "is_straggler"]

logger = logging.getLogger(__name__)

_POLICY_FIELDS = (
    "name",
    "labelSelector",
    "bypassLabelSelector",
    "groupingExpression",
    "maxBlockedDuration",
    "pacer",
)
# pkg/controller/admission.go: the label straggler's pods opt in with; the chart's `prefix` set to its
# prefix makes stagger read the same label (and write its own labels under it).
_STRAGGLER_PREFIX = "v1.straggler.technicianted"
_REFUSED = "straggler refuses the file"

# Go's time.ParseDuration, as metav1.Duration reads a string: a sign, then "0" or number-unit pairs.
_GO_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),  # U+00B5
    "μs": Decimal("1e-6"),  # U+03BC
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_GO_COMPONENT = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION = re.compile(rf"([-+]?)(0|(?:{_GO_COMPONENT.pattern})+)")


def go_duration(text: str) -> float | None:
    """Seconds in `text` as Go's time.ParseDuration reads it ("1h30m", "-5s", "0", ".5s"), or None when Go
    refuses it ("5" without a unit, "ten minutes")."""
    whole = _GO_DURATION.fullmatch(text)
    if whole is None:
        return None
    total = sum(
        (Decimal(number) * _GO_UNITS[unit] for number, unit in _GO_COMPONENT.findall(whole.group(2))),
        Decimal(0),
    )
    return float(-total if whole.group(1) == "-" else total)


def is_straggler(documents: Sequence[Any]) -> bool:
    return any(
        isinstance(each, Mapping) and go_get(each, "staggeringPolicies") is not None for each in documents
    )


@dataclass
class _Lines:
    """What one conversion says, in the order found: what straggler refuses (`errors`), what stagger
    cannot carry over, notes."""

    errors: list[str] = field(default_factory=list)
    not_carried: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Seen:
    """What one file's policies used so far: straggler refuses a name or a groupingExpression twice."""

    names: dict[str, str] = field(default_factory=dict)
    groupings: dict[str, str] = field(default_factory=dict)


def _is_number(raw: object) -> TypeGuard[int | float]:
    return isinstance(raw, int | float) and not isinstance(raw, bool)


def _count(raw: object, *, path: str, lines: _Lines) -> int | None:
    """A pacer's whole number as Go's *int takes it (a YAML 4.0 is JSON 4); None, and an error, when
    straggler's decoder fails on it or it is left out (straggler dereferences it)."""
    if raw is None:
        lines.errors.append(f"{path}: left out: straggler dereferences it and crashes ({_REFUSED})")
        return None
    if not _is_number(raw) or not float(raw).is_integer():
        lines.errors.append(f"{path}: not a whole number (got {raw!r}): {_REFUSED}")
        return None
    return int(raw)


def _exponential(raw: Mapping[Any, Any], *, path: str, lines: _Lines) -> ExponentialPacer | None:
    min_initial = _count(go_get(raw, "minInitial"), path=f"{path}.minInitial", lines=lines)
    max_stagger = _count(go_get(raw, "maxStagger"), path=f"{path}.maxStagger", lines=lines)
    multiplier = go_get(raw, "multiplier")
    if multiplier is None or not _is_number(multiplier):
        why = "left out: straggler dereferences it and crashes" if multiplier is None else "not a number"
        lines.errors.append(f"{path}.multiplier: {why} (got {multiplier!r}): {_REFUSED}")
        return None
    if min_initial is None or max_stagger is None:
        return None
    if min_initial < 1 or max_stagger < 1 or not multiplier > 1:
        lines.not_carried.append(
            f"{path}: stagger needs minInitial and maxStagger of at least 1 and a multiplier above 1 "
            f"(got {dict(raw)!r})"
        )
        return None
    return ExponentialPacer(min_initial=min_initial, multiplier=float(multiplier), max_stagger=max_stagger)


def _linear(raw: Mapping[Any, Any], *, path: str, lines: _Lines) -> LinearPacer | None:
    step = _count(go_get(raw, "step"), path=f"{path}.step", lines=lines)
    max_stagger = _count(go_get(raw, "maxStagger"), path=f"{path}.maxStagger", lines=lines)
    if step is None or max_stagger is None:
        return None
    if step < 1 or max_stagger < 1:
        lines.not_carried.append(
            f"{path}: stagger needs a step and maxStagger of at least 1 (got {dict(raw)!r})"
        )
        return None
    return LinearPacer(step=step, max_stagger=max_stagger)


def _pacer(raw: object, *, path: str, name: str, lines: _Lines) -> Pacer | None:
    """factories.go NewPacerFactory: exponential if given, else linear, else straggler refuses the file."""
    no_pacer = f'{_REFUSED}: "failed to create pacer for {name}: no pacer configuration specified"'
    if raw is not None and not isinstance(raw, Mapping):
        lines.errors.append(f"{path}: not a pacer (got {raw!r}): {_REFUSED}")
        return None
    raw = raw or {}
    for extra in unknown_keys(raw, ("exponential", "linear")):
        lines.not_carried.append(f"{path}.{extra}: not a pacer straggler knows (it ignores the key)")
    exponential, linear = go_get(raw, "exponential"), go_get(raw, "linear")
    for kind, given in (("exponential", exponential), ("linear", linear)):
        if given is not None and not isinstance(given, Mapping):
            lines.errors.append(f"{path}.{kind}: not a mapping (got {given!r}): {_REFUSED}")
            return None
    if exponential is not None:
        if linear is not None:
            lines.not_carried.append(
                f"{path}.linear: straggler uses the exponential pacer when both are given"
            )
        return _exponential(exponential, path=f"{path}.exponential", lines=lines)
    if linear is not None:
        return _linear(linear, path=f"{path}.linear", lines=lines)
    lines.errors.append(f"{path}: {'none' if not raw else 'neither exponential nor linear'}: {no_pacer}")
    return None


def _grouping(raw: object, *, path: str, seen: _Seen, lines: _Lines) -> str | None:
    """straggler refuses an empty expression (classifier.go: "empty grouping expression") and one another
    policy of the file has; it evaluates it with ojg's JSONPath, where a leading `$` may be left out, as
    stagger allows too."""
    text = str(raw) if _is_number(raw) else raw
    if text is not None and not isinstance(text, str):
        lines.errors.append(f"{path}: not a string (got {raw!r}): {_REFUSED}")
        return None
    if not text:
        lines.errors.append(f'{path}: none: {_REFUSED} ("empty grouping expression")')
        return None
    if (other := seen.groupings.setdefault(text, path)) != path:
        lines.errors.append(
            f'{path}: {text!r} is {other}\'s too: {_REFUSED} ("grouping expression already exists")'
        )
        return None
    try:
        compile_grouping(text)
    except ValueError as error:
        lines.not_carried.append(
            f"{path}: {text!r} is no JSONPath stagger reads ({error}): all its pods are one group"
        )
        return None
    return text


def _max_blocked(raw: object, *, path: str, lines: _Lines) -> float:
    """metav1.Duration, a Go duration string; zero, negative or absent is no limit in straggler
    (classifier.go takes only one > 0): `never` in stagger."""
    seconds = 0.0
    if raw is not None:
        found = go_duration(raw) if isinstance(raw, str) else None
        if found is None:
            lines.errors.append(f"{path}: not a Go duration like 90s or 10m (got {raw!r}): {_REFUSED}")
            return StaggeringPolicy.max_blocked_duration
        seconds = found
    if seconds <= 0:
        lines.notes.append(
            f"{path}: {'none' if raw is None else repr(raw)}, so straggler holds a pod without limit: "
            "maxBlockedDuration: never (stagger still lets a held pod go after the controller's maxWait, "
            "the largest node policy maxWait, 10m unless set)"
        )
        return math.inf
    return seconds


def _labels(raw: object, *, path: str, lines: _Lines) -> tuple[LabelSelector | None, list[str]]:
    """A `map[string]string`: anything but a map (or null) makes straggler's decoder fail; a scalar value
    is read as its text, as sigs.k8s.io/yaml reads it for a string; an entry no pod label can equal is a
    problem (the policy is left out: without it, it would match more pods than straggler's)."""
    if raw is not None and not isinstance(raw, Mapping):
        lines.errors.append(f"{path}: not a map of labels (got {raw!r}): {_REFUSED}")
        return None, []
    nested = [(key, value) for key, value in (raw or {}).items() if isinstance(value, Mapping | list)]
    if nested:
        (key, value), *_ = nested
        lines.errors.append(f"{path}[{key!r}]: no label value (got {value!r}): {_REFUSED}")
        return None, []
    selector, problems, read_as_text = label_map(raw, path=path)
    lines.notes.extend(read_as_text)
    return selector, problems


def _name(raw: Mapping[Any, Any], *, path: str, seen: _Seen, lines: _Lines) -> str:
    written = go_get(raw, "name")
    text = str(written) if _is_number(written) else (written if written is not None else "")
    if not isinstance(text, str):
        lines.errors.append(f"{path}.name: not a string (got {written!r}): {_REFUSED}")
        text = ""
    elif (other := seen.names.setdefault(text, path)) != path:
        lines.errors.append(
            f'{path}.name: {text!r} is {other}\'s name too: {_REFUSED} ("duplicate config name")'
        )
    return text


def _policy(raw: object, *, index: int, source: str, seen: _Seen, lines: _Lines) -> StaggeringPolicy | None:
    path = f"{source}: staggeringPolicies[{index}]"
    if raw is None or raw == {}:
        lines.errors.append(
            f"{path}: an empty policy (got {raw!r}): straggler reads it as a policy without a pacer and "
            f"refuses the file; was the YAML's indentation lost (copied from a web page)?"
        )
        return None
    if not isinstance(raw, Mapping):
        lines.errors.append(f"{path}: not a policy (got {raw!r}): {_REFUSED}")
        return None
    for extra in unknown_keys(raw, _POLICY_FIELDS):
        lines.not_carried.append(f"{path}.{extra}: not a key of straggler's policies (it ignores it too)")
    written = _name(raw, path=path, seen=seen, lines=lines)
    selector, problems = _labels(go_get(raw, "labelSelector"), path=f"{path}.labelSelector", lines=lines)
    bypass, bypass_problems = _labels(
        go_get(raw, "bypassLabelSelector"), path=f"{path}.bypassLabelSelector", lines=lines
    )
    pacer = _pacer(go_get(raw, "pacer"), path=f"{path}.pacer", name=written, lines=lines)
    grouping = _grouping(
        go_get(raw, "groupingExpression"), path=f"{path}.groupingExpression", seen=seen, lines=lines
    )
    max_blocked = _max_blocked(
        go_get(raw, "maxBlockedDuration"), path=f"{path}.maxBlockedDuration", lines=lines
    )
    if problems or bypass_problems:
        lines.not_carried.extend(
            f"{problem}: the policy {written!r} is left out" for problem in problems + bypass_problems
        )
        return None
    if pacer is None:
        return None
    return StaggeringPolicy(
        name=written,  # made a unique DNS-1123 label by the caller
        # An absent or empty labelSelector selects every pod in straggler (labels.SelectorFromSet).
        label_selector=selector if selector is not None else LabelSelector(),
        pacer=pacer,
        # An empty bypass selector bypasses nothing in straggler (classifier.go checks Empty() first).
        bypass_label_selector=bypass if bypass is not None and not bypass.is_empty else None,
        grouping_expression=grouping,
        max_blocked_duration=max_blocked,
        mode="evict",
        hold="stub",
    )


def _file(each: Input, *, lines: _Lines) -> list[tuple[str, StaggeringPolicy]]:
    """One straggler file's policies, each with the path of its entry."""
    found: list[tuple[str, StaggeringPolicy]] = []
    seen = _Seen()
    for document in yaml_documents(each.text) or []:
        if not isinstance(document, Mapping):
            continue
        for extra in unknown_keys(document, ("staggeringPolicies",)):
            lines.not_carried.append(f"{each.source}: {extra}: not a key of straggler's file (it ignores it)")
        raw = go_get(document, "staggeringPolicies")
        if raw is not None and not isinstance(raw, list):
            lines.errors.append(f"{each.source}: staggeringPolicies: not a list (got {raw!r}): {_REFUSED}")
            continue
        for index, item in enumerate(raw or []):
            if (policy := _policy(item, index=index, source=each.source, seen=seen, lines=lines)) is not None:
                found.append((f"{each.source}: staggeringPolicies[{index}]", policy))
    if not found and not lines.errors:
        lines.notes.append(f"{each.source}: no staggering policy: straggler staggers nothing with it")
    return found


def _named(found: Sequence[tuple[str, StaggeringPolicy]], *, lines: _Lines) -> list[StaggeringPolicy]:
    """Each policy under a unique DNS-1123 label, as a stagger policy's name must be."""
    taken: set[str] = set()
    named = []
    for index, (path, policy) in enumerate(found):
        name = unique_name(policy_name(policy.name, fallback=f"straggler-{index}"), taken=taken)
        if name != policy.name:
            lines.notes.append(
                f"{path}.name: {policy.name!r} is named {name!r} (a stagger policy name is a DNS-1123 label)"
            )
        named.append(replace(policy, name=name))
    return named


_NO_LONGER_NEEDED = (
    "straggler's MutatingWebhookConfigurations (<release>-pods and <release>-jobs): delete them first, before "
    "stagger runs with straggler's prefix, or both hold the same pods",
    "straggler's Deployment, Service, Secret and ConfigMap <release>-configs (helm uninstall <release>); first "
    f"let the pods it holds go (kubectl get pods -A -l {_STRAGGLER_PREFIX}/staggered=1: none left, or delete "
    "them for their controllers to make anew): an idle stub straggler made is evicted by nobody else",
)


def convert(inputs: Sequence[Input]) -> Conversion:
    lines = _Lines()
    found = [pair for each in inputs for pair in _file(each, lines=lines)]
    if lines.errors:
        raise InvalidInput(lines.errors)
    policies = _named(found, lines=lines)
    if policies:
        lines.notes.append(
            "straggler holds a pod as an idle stub and evicts it when its pacer allows: here mode: evict, "
            "hold: stub, the same; stagger's default, mode: lock, holds pods in their init container instead, "
            "with fewer API requests per pod"
        )
    return Conversion(
        staggering_policies=tuple(policies),
        not_carried=tuple(lines.not_carried),
        notes=tuple(lines.notes),
        chart_values=(
            ChartValue(
                "prefix",
                _STRAGGLER_PREFIX,
                f'straggler\'s pods opt in with {_STRAGGLER_PREFIX}/enable: "1" as they are, and its other '
                "labels keep their names",
            ),
        ),
        no_longer_needed=_NO_LONGER_NEEDED,
    )
