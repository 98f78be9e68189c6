"""Which staggering policies a pod is in (stagger.matching): label and bypass selectors, grouping keys
(and policies skipped when their expression finds nothing), the group label value (valid, stable,
order-free), the mode and maxBlockedDuration of a placement ("never", math.inf, only when every policy
waited for says so), the pacer pairs, and the annotation values and their parser."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger import matching
from stagger.matching import Placement, PolicyMatch
from stagger.policy import ExponentialPacer, LinearPacer, Mode, StaggeringPolicy
from stagger.selectors import LabelSelector, label_value_problem


def policy(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    bypass: dict[str, str] | None = None,
    grouping: str | None = None,
    mode: Mode = "lock",
    max_blocked: float = 600.0,
) -> StaggeringPolicy:
    return StaggeringPolicy(
        name=name,
        label_selector=LabelSelector.from_labels(labels or {}),
        bypass_label_selector=None if bypass is None else LabelSelector.from_labels(bypass),
        pacer=ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16),
        grouping_expression=grouping,
        mode=mode,
        max_blocked_duration=max_blocked,
    )


def pod(labels: dict[str, Any] | None = None, image: str = "nginx:1.25", **extra: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web-1", "namespace": "shop"}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": {"containers": [{"name": "app", "image": image}], **extra}}


IMAGES = policy("image-pull", labels={"staggerimages": "1"}, grouping=".spec.containers[0].image")
NODES = policy("per-node", labels={"app": "web"}, grouping=".spec.nodeName", max_blocked=120.0)
ALL = policy("everything")
CANARY = policy("canary-aware", labels={"app": "web"}, bypass={"canary": "1"}, max_blocked=60.0)
NEVER = policy("straggler", labels={"app": "web"}, max_blocked=math.inf)


@pytest.mark.parametrize(
    ("the_pod", "policies", "matches"),
    [
        pytest.param(pod({"app": "web"}), [IMAGES], None, id="selector-does-not-match"),
        pytest.param(pod(None), [IMAGES], None, id="no-labels-at-all"),
        pytest.param(pod(None), [ALL], (PolicyMatch("everything", "", False),), id="empty-selector-no-key"),
        pytest.param(
            pod({"staggerimages": "1"}),
            [IMAGES],
            (PolicyMatch("image-pull", "nginx:1.25", False),),
            id="grouped-by-image",
        ),
        pytest.param(pod({"app": "web"}), [NODES], None, id="expression-finds-nothing-skips-policy"),
        pytest.param(
            pod({"app": "web"}, nodeName="node-3"),
            [NODES],
            (PolicyMatch("per-node", "node-3", False),),
            id="expression-finds-node",
        ),
        pytest.param(
            pod({"app": "web", "staggerimages": "1"}, nodeName="n1"),
            [NODES, IMAGES, ALL],
            (
                PolicyMatch("per-node", "n1", False),
                PolicyMatch("image-pull", "nginx:1.25", False),
                PolicyMatch("everything", "", False),
            ),
            id="several-in-file-order",
        ),
        pytest.param(
            pod({"app": "web", "canary": "1"}),
            [CANARY],
            (PolicyMatch("canary-aware", "", True),),
            id="bypassed",
        ),
        pytest.param(
            pod({"app": "web", "canary": "0"}),
            [CANARY],
            (PolicyMatch("canary-aware", "", False),),
            id="bypass-selector-not-matching",
        ),
        pytest.param(
            pod({"app": "web", "canary": 1}),
            [CANARY],
            (PolicyMatch("canary-aware", "", False),),
            id="non-string-label-value-ignored",
        ),
    ],
)
def test_match_pod(
    the_pod: dict[str, Any], policies: list[StaggeringPolicy], matches: tuple[PolicyMatch, ...] | None
) -> None:
    placement = matching.match_pod(the_pod, policies)
    assert (placement.matches if placement else None) == matches


def test_no_policies_no_placement() -> None:
    assert matching.match_pod(pod({"app": "web"}), []) is None


def test_mode_is_the_first_match_and_a_different_one_is_a_warning() -> None:
    gate = policy("gated", labels={"app": "web"}, mode="gate")
    lock = policy("locked", labels={"app": "web"}, mode="lock")
    also_gate = policy("gated-too", labels={"app": "web"}, mode="gate")
    placement = matching.match_pod(pod({"app": "web"}), [gate, lock, also_gate])
    assert placement is not None
    assert placement.mode == "gate"
    assert placement.warnings == (
        "stagger: staggering policy locked has mode lock, but gated (mode gate) matched first; "
        "the pod is paced in mode gate",
    )


def test_same_modes_no_warning() -> None:
    placement = matching.match_pod(pod({"app": "web"}, nodeName="n"), [NODES, CANARY])
    assert placement is not None and placement.warnings == ()


@pytest.mark.parametrize(
    ("labels", "policies", "expected"),
    [
        pytest.param({"app": "web"}, [NODES, CANARY], 60.0, id="smallest-of-all"),
        pytest.param({"app": "web", "canary": "1"}, [NODES, CANARY], 120.0, id="bypassed-policy-left-out"),
        pytest.param({"app": "web"}, [NEVER], math.inf, id="never-alone"),
        pytest.param({"app": "web"}, [NEVER, CANARY], 60.0, id="never-and-a-bound"),
        pytest.param(
            {"app": "web", "canary": "1"}, [NEVER, CANARY], math.inf, id="never-and-a-bypassed-bound"
        ),
    ],
)
def test_max_blocked_duration_is_the_smallest_waited_for(
    labels: dict[str, str], policies: list[StaggeringPolicy], expected: float
) -> None:
    placement = matching.match_pod(pod(labels, nodeName="n"), policies)
    assert placement is not None
    assert placement.max_blocked_duration == expected


def test_fully_bypassed_uses_all_matches() -> None:
    placement = matching.match_pod(pod({"app": "web", "canary": "1"}), [CANARY])
    assert placement is not None
    assert placement.fully_bypassed
    assert placement.max_blocked_duration == 60.0
    assert matching.pacer_groups(placement) == ()
    assert matching.counted_groups(placement) == (("canary-aware", ""),)


def test_pacer_groups_leave_out_bypassed_pairs() -> None:
    placement = matching.match_pod(pod({"app": "web", "canary": "1"}, nodeName="n7"), [NODES, CANARY])
    assert placement is not None
    assert not placement.fully_bypassed
    assert matching.pacer_groups(placement) == (("per-node", "n7"),)
    assert matching.counted_groups(placement) == (("per-node", "n7"), ("canary-aware", ""))


def test_pods_in_different_combinations_share_a_pair() -> None:
    # Two pods in different combinations get different groups, but both need image-pull's pacer for the
    # same image, which is what the controller counts by.
    both = matching.match_pod(pod({"app": "web", "staggerimages": "1"}, nodeName="n1"), [NODES, IMAGES])
    images_only = matching.match_pod(pod({"staggerimages": "1"}), [NODES, IMAGES])
    assert both is not None and images_only is not None
    assert both.group != images_only.group
    shared = set(matching.pacer_groups(both)) & set(matching.pacer_groups(images_only))
    assert shared == {("image-pull", "nginx:1.25")}


def test_annotations() -> None:
    placement = matching.match_pod(
        pod({"app": "web", "staggerimages": "1", "canary": "1"}, nodeName="n1"), [NODES, IMAGES, CANARY]
    )
    assert placement is not None
    assert matching.policies_annotation(placement) == "per-node,image-pull,canary-aware"
    text = matching.group_key_annotation(placement)
    assert text == '{"canary-aware":"","image-pull":"nginx:1.25","per-node":"n1"}'
    assert matching.parse_group_key(text) == {
        "canary-aware": "",
        "image-pull": "nginx:1.25",
        "per-node": "n1",
    }


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="absent"),
        pytest.param("", id="empty"),
        pytest.param("not json", id="not-json"),
        pytest.param('["a", "b"]', id="list"),
        pytest.param('{"a": 1}', id="non-string-key"),
        pytest.param("[" * 100_000, id="deeply-nested"),
    ],
)
def test_parse_group_key_refuses(text: object) -> None:
    assert matching.parse_group_key(text) is None


def test_group_value_known_and_stable() -> None:
    # Pinned: the label is written on pods and must not change between releases.
    digest = hashlib.sha256(b'[["image-pull","nginx:1.25"]]').hexdigest()
    assert matching.group_label_value([("image-pull", "nginx:1.25")]) == "g" + digest[:20]


pairs = st.lists(st.tuples(st.text(max_size=30), st.text(max_size=200)), max_size=6, unique_by=lambda p: p[0])


@given(pairs, st.randoms())
def test_group_value_is_a_valid_label_value_independent_of_order(
    the_pairs: list[tuple[str, str]], rnd: Any
) -> None:
    value = matching.group_label_value(the_pairs)
    assert label_value_problem(value) is None
    assert len(value) <= 63 and value.isalnum() and value == value.lower()
    shuffled = list(the_pairs)
    rnd.shuffle(shuffled)
    assert matching.group_label_value(shuffled) == value


@given(pairs)
def test_group_key_annotation_round_trips(the_pairs: list[tuple[str, str]]) -> None:
    placement = Placement(
        matches=tuple(PolicyMatch(name, key, False) for name, key in the_pairs),
        group=matching.group_label_value(the_pairs),
        mode="lock",
        max_blocked_duration=600.0,
    )
    assert matching.parse_group_key(matching.group_key_annotation(placement)) == dict(the_pairs)
    json.loads(matching.group_key_annotation(placement))  # compact JSON, always parseable


pod_ish = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.fixed_dictionaries({}, optional={"labels": pod_ish | st.just({"app": "web"})}),
            "spec": pod_ish,
        },
    )
)
def test_any_pod_shape_matches_or_not_without_raising(the_pod: dict[str, Any]) -> None:
    placement = matching.match_pod(
        the_pod, [IMAGES, NODES, ALL, CANARY, policy("lin", labels={"app": "web"})]
    )
    assert placement is not None  # ALL matches everything
    assert matching.pacer_groups(placement)


def test_linear_policy_matches_too() -> None:
    lin = StaggeringPolicy(name="jobs", label_selector=LabelSelector(), pacer=LinearPacer(2, 10))
    placement = matching.match_pod(pod(None), [lin])
    assert placement is not None and placement.group.startswith("g")
