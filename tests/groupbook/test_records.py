"""Reading the book's record from a pod as the API returns it (stagger.groupbook.record_from_pod): the
pairs from the group-key annotation, held by label or gate, granted-at, Ready, finished, deleted or not
ours (None), bypass split with the policies, and malformed fields."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger import groupbook
from stagger.groupbook import PodRecord
from stagger.names import Names
from stagger.policy import MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector

NAMES = Names()
P = NAMES.prefix
GATE = NAMES.scheduling_gate


def api_pod(**changes: Any) -> dict[str, Any]:
    """A held lock-mode pod as admission leaves it; `changes` are dotted paths set (None deletes)."""
    pod: dict[str, Any] = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u-1",
            "creationTimestamp": "2026-01-01T00:00:10Z",
            "labels": {f"{P}/enable": "1", f"{P}/staggered": "1", f"{P}/group": "gabc", "canary": "1"},
            "annotations": {
                f"{P}/policies": "image-pull,canary-aware",
                f"{P}/group-key": '{"canary-aware":"","image-pull":"nginx:1.25"}',
            },
        },
        "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
        "status": {"phase": "Pending"},
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = pod
        for part in parents:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return pod


T0 = 1767225610.0  # 2026-01-01T00:00:10Z
BASE = PodRecord(
    namespace="shop",
    name="web-1",
    uid="u-1",
    pacer_groups=(("canary-aware", ""), ("image-pull", "nginx:1.25")),
    held=True,
    created=T0,
)


def with_labels(**labels: str) -> dict[str, str]:
    return {f"{P}/enable": "1", f"{P}/group": "gabc", **labels}


def _fields(record: PodRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def changed(**fields: Any) -> PodRecord:
    return PodRecord(**{**_fields(BASE), **fields})


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(api_pod(), BASE, id="held-by-label"),
        pytest.param(
            api_pod(
                metadata__labels=with_labels(), spec__schedulingGates=[{"name": "other"}, {"name": GATE}]
            ),
            changed(gated=True),
            id="held-by-gate",
        ),
        pytest.param(api_pod(metadata__labels=with_labels()), changed(held=False), id="not-held"),
        pytest.param(
            api_pod(
                metadata__labels=with_labels(),
                **{"metadata__annotations__" + f"{P}/granted-at": "2026-01-01T00:00:40.500Z"},
            ),
            changed(held=False, granted_at=T0 + 30.5),
            id="granted",
        ),
        pytest.param(
            api_pod(**{"metadata__annotations__" + f"{P}/granted-at": "yesterday"}),
            BASE,
            id="granted-at-unreadable",
        ),
        pytest.param(
            api_pod(status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
            changed(ready=True),
            id="ready",
        ),
        pytest.param(
            api_pod(status={"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
            BASE,
            id="not-ready",
        ),
        pytest.param(api_pod(status={"phase": "Succeeded"}), changed(finished=True), id="succeeded"),
        pytest.param(api_pod(status={"phase": "Failed"}), changed(finished=True), id="failed"),
        pytest.param(api_pod(status="weird", spec="weird"), BASE, id="status-and-spec-not-objects"),
        pytest.param(api_pod(metadata__uid=None), changed(uid=""), id="no-uid"),
        pytest.param(
            api_pod(**{"metadata__annotations__" + f"{P}/group-key": '{"solo":"k"}'}),
            changed(pacer_groups=(("solo", "k"),)),
            id="one-pair",
        ),
        pytest.param(api_pod(metadata__deletionTimestamp="2026-01-01T00:01:00Z"), None, id="being-deleted"),
        pytest.param(
            api_pod(**{"metadata__annotations__" + f"{P}/group-key": None}), None, id="no-group-key-not-ours"
        ),
        pytest.param(
            api_pod(**{"metadata__annotations__" + f"{P}/group-key": "{}"}), None, id="empty-group-key"
        ),
        pytest.param(
            api_pod(**{"metadata__annotations__" + f"{P}/group-key": "nope"}), None, id="group-key-not-json"
        ),
        pytest.param(api_pod(metadata__creationTimestamp=None), None, id="no-creation-time"),
        pytest.param(api_pod(metadata__name=None), None, id="no-name"),
        pytest.param(api_pod(metadata__annotations=None), None, id="no-annotations"),
    ],
)
def test_record_from_pod(pod: dict[str, Any], expected: PodRecord | None) -> None:
    assert groupbook.record_from_pod(pod, names=NAMES) == expected


CANARY_AWARE = StaggeringPolicy(
    name="canary-aware",
    label_selector=LabelSelector(),
    bypass_label_selector=LabelSelector.from_labels({"canary": "1"}),
    pacer=MaxConcurrentPacer(value=1),
)


IMAGE_PULL = StaggeringPolicy(
    name="image-pull", label_selector=LabelSelector(), pacer=MaxConcurrentPacer(value=2)
)


def test_with_policies_a_bypassed_pair_is_only_counted() -> None:
    policies = {"canary-aware": CANARY_AWARE, "image-pull": IMAGE_PULL}
    record = groupbook.record_from_pod(api_pod(), names=NAMES, policies=policies)
    assert record == changed(
        pacer_groups=(("image-pull", "nginx:1.25"),), bypassed_groups=(("canary-aware", ""),)
    )
    assert record is not None and not record.bypassed and record.waiting


@pytest.mark.parametrize(
    ("policies", "kept"),
    [
        pytest.param({"canary-aware": CANARY_AWARE}, (), id="policy-not-in-the-file"),
        pytest.param(
            {
                "canary-aware": CANARY_AWARE,
                "image-pull": StaggeringPolicy(
                    name="image-pull",
                    label_selector=LabelSelector.from_labels({"team": "other"}),
                    pacer=MaxConcurrentPacer(value=2),
                ),
            },
            (),
            id="policy-does-not-select-the-pod",
        ),
    ],
)
def test_with_policies_a_claim_no_policy_backs_is_dropped(
    policies: dict[str, StaggeringPolicy], kept: tuple[object, ...]
) -> None:
    """A group-key annotation the pod wrote itself (or left from before a reload or a relabel) counts
    only where a policy of the file selects the pod: one team cannot join another's group."""
    record = groupbook.record_from_pod(api_pod(), names=NAMES, policies=policies)
    assert record is not None and record.pacer_groups == kept
    assert record.bypassed_groups == (("canary-aware", ""),)


def test_bypassed_everywhere() -> None:
    pod = api_pod(**{"metadata__annotations__" + f"{P}/group-key": '{"canary-aware":""}'})
    record = groupbook.record_from_pod(pod, names=NAMES, policies={"canary-aware": CANARY_AWARE})
    assert record is not None and record.bypassed and record.pacer_groups == ()


def test_other_prefix_reads_its_own_names() -> None:
    other = Names(prefix="stagger.example.com")
    assert groupbook.record_from_pod(api_pod(), names=other) is None


json_ish = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@given(
    st.sampled_from(
        [
            "metadata",
            "metadata__labels",
            "metadata__annotations",
            "metadata__namespace",
            "metadata__creationTimestamp",
            "spec",
            "spec__schedulingGates",
            "status",
            "status__conditions",
            "status__phase",
        ]
    ),
    json_ish,
)
def test_any_field_of_any_shape_gives_a_record_or_none(path: str, value: Any) -> None:
    pod = api_pod()
    pod_copy = copy.deepcopy(pod)
    *parents, last = path.split("__")
    target = pod_copy
    for part in parents:
        target = target[part]
    target[last] = value
    record = groupbook.record_from_pod(pod_copy, names=NAMES)
    assert record is None or isinstance(record, PodRecord)
