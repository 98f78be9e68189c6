"""The policy file in the chart: by default the ConfigMap both components mount holds
charts/stagger/configs/_policies.yaml as written (comments included), a `policies` value replaces it whole,
and either way the rendered text is a policy file stagger's own loader accepts; the example staggering
policy commented out in the file is valid once uncommented; a policy edit leaves the pod templates as they
were (lockd and the controller re-read the file: no rollout for a policy change)."""

from __future__ import annotations

import json

import pytest

from stagger import policy
from tests.chart.helm import CHART, CONTROLLER, FULLNAME, Doc, by_kind, named, render

POLICY_FILE = CHART / "configs" / "_policies.yaml"
CUSTOM = {
    "nodePolicies": [
        {"name": "gpu", "nodeSelector": {"pool": "gpu"}, "priority": 10, "throttleConfig": {"maxConcurrent": {"value": 1}}}
    ],
    "staggeringPolicies": [
        {"name": "web", "labelSelector": {"app": "web"}, "pacer": {"linear": {"step": 2, "maxStagger": 10}}}
    ],
}  # fmt: skip


def policy_text(docs: list[Doc]) -> str:
    text: str = named(docs, "ConfigMap", f"{FULLNAME}-policies")["data"]["policies.yaml"]
    return text


def pod_templates(docs: list[Doc]) -> list[Doc]:
    return [
        w["spec"]["template"] for w in (by_kind(docs, "DaemonSet"), named(docs, "Deployment", CONTROLLER))
    ]


def test_the_default_is_the_charts_policy_file() -> None:
    text = policy_text(render())
    assert text.strip() == POLICY_FILE.read_text().strip()
    parsed = policy.parse_policy_text(text, source="chart", allow_empty=False)
    assert [p.name for p in parsed.node_policies] == ["default"]
    assert parsed.staggering_policies == ()


def test_the_commented_out_example_is_a_valid_staggering_policy() -> None:
    example = POLICY_FILE.read_text().split("# staggeringPolicies:\n", 1)[1]
    uncommented = "staggeringPolicies:\n" + "\n".join(
        line.removeprefix("# ") for line in example.splitlines()
    )
    [example_policy] = policy.parse_policy_text(uncommented, source="example").staggering_policies
    assert example_policy.name == "image-pull"


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="empty-map"),
        pytest.param(("policies=null",), id="null"),
    ],
)
def test_an_empty_policies_value_means_the_file(sets: tuple[str, ...]) -> None:
    assert policy_text(render(*sets)) == policy_text(render())


def test_a_policies_value_replaces_the_file() -> None:
    docs = render(jsons=(f"policies={json.dumps(CUSTOM)}",))
    text = policy_text(docs)
    assert "configs/_policies.yaml" not in text and "# " not in text
    parsed = policy.parse_policy_text(text, source="values", allow_empty=False)
    assert [p.name for p in parsed.node_policies] == ["gpu"]
    assert [p.name for p in parsed.staggering_policies] == ["web"]


def test_a_policy_edit_does_not_change_the_pod_templates() -> None:
    """A change to a pod template rolls every node's lockd and both controller replicas; the policy reaches
    them through the mounted ConfigMap instead, which they re-read."""
    default, custom = render(), render(jsons=(f"policies={json.dumps(CUSTOM)}",))
    assert policy_text(default) != policy_text(custom)
    assert pod_templates(default) == pod_templates(custom)
