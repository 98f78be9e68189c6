"""A policy file of several YAML documents (`---`): each is stagger's format or a PacemakerConfig (or a List
of them), put together in the file's order; empty documents are skipped; names stay unique across
documents; errors name their document (`documents[1]...`) only when there are several, so a one-document
file's messages are what they always were; a YAML error in a later document is a PolicyError with its
line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagger.policy import NodePolicy, PolicyError, PolicyFile, load_policy_file, parse_policy_text

STAGGER = """\
staggeringPolicies:
- name: web
  labelSelector: {app: web}
  pacer: {linear: {step: 2, maxStagger: 10}}
nodePolicies:
- name: default
  throttleConfig: {maxConcurrent: {perCore: 0.5}}
"""

PACEMAKER = """\
apiVersion: woehrl.net/v1alpha
kind: PacemakerConfig
metadata: {name: gpu}
spec:
  nodeSelector: {pool: gpu}
  priority: 5
  throttleConfig: {maxConcurrent: {value: 2}}
"""


def test_documents_are_put_together_in_order() -> None:
    text = f"{STAGGER}---\n{PACEMAKER}---\nnodePolicies:\n- name: last\n"
    loaded = parse_policy_text(text)
    assert [policy.name for policy in loaded.node_policies] == ["default", "gpu", "last"]
    assert [policy.name for policy in loaded.staggering_policies] == ["web"]
    assert loaded.notes == ('documents[1] (PacemakerConfig "gpu"): read as node policy "gpu"',)
    assert loaded.node_policies[1].priority == 5


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("---\n" + STAGGER, id="leading-marker"),
        pytest.param(STAGGER + "---\n", id="trailing-marker"),
        pytest.param("---\n# nothing\n---\n" + STAGGER + "---\n---\n", id="empty-documents"),
    ],
)
def test_empty_documents_are_skipped(text: str) -> None:
    assert parse_policy_text(text) == parse_policy_text(STAGGER)


def test_a_file_of_empty_documents_is_empty() -> None:
    assert parse_policy_text("---\n---\n") == PolicyFile()
    with pytest.raises(PolicyError, match="the policy file is empty"):
        parse_policy_text("---\n# nothing\n---\n", source="p.yaml", allow_empty=False)


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        pytest.param(
            f"{STAGGER}---\nnodePolicies:\n- name: default\n",
            [
                "documents[1].nodePolicies[0].name: duplicate node policy name; documents[0].nodePolicies[0].name "
                "has it already (got 'default')"
            ],
            id="node-policy-name-in-two-documents",
        ),
        pytest.param(
            f"{STAGGER}---\n{PACEMAKER.replace('name: gpu', 'name: default')}",
            [
                'documents[1] (PacemakerConfig "default").metadata.name: duplicate node policy name; '
                "documents[0].nodePolicies[0].name has it already (got 'default')"
            ],
            id="a-pacemaker-config-named-as-a-node-policy",
        ),
        pytest.param(
            f"{STAGGER}---\nstaggeringPolicies:\n- {{name: web, labelSelector: {{}}, pacer: {{maxConcurrent: {{value: 1}}}}}}\n",
            [
                "documents[1].staggeringPolicies[0].name: duplicate staggering policy name; "
                "documents[0].staggeringPolicies[0].name has it already (got 'web')"
            ],
            id="staggering-policy-name-in-two-documents",
        ),
        pytest.param(
            f"{STAGGER}---\n- 1\n",
            [
                "p.yaml: documents[1]: must be a mapping with staggeringPolicies and/or nodePolicies, or a "
                "PacemakerConfig (got [1])"
            ],
            id="a-document-not-a-mapping",
        ),
        pytest.param(
            f"nodePolicies:\n- name: A\n---\n{PACEMAKER.replace('value: 2', 'value: 0')}",
            [
                "documents[0].nodePolicies[0].name: must be a DNS-1123 label: at most 63 lowercase letters, digits "
                "or '-', starting and ending with a letter or digit (got 'A')",
                'documents[1] (PacemakerConfig "gpu").spec.throttleConfig.maxConcurrent.value: must be at least 1 '
                "(got 0)",
            ],
            id="every-document-s-errors",
        ),
        pytest.param(
            f"{STAGGER}---\nnodePolicies: [\n",
            ["p.yaml:10:1: invalid YAML: expected the node content, but found '<stream end>' (while parsing a flow node)"],
            id="yaml-error-in-a-later-document",
        ),
    ],
)  # fmt: skip
def test_errors_name_the_document(text: str, errors: list[str]) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, source="p.yaml")
    assert list(caught.value.errors) == errors


def test_a_staggering_and_a_node_policy_may_share_a_name(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(f"{STAGGER}---\n{PACEMAKER.replace('name: gpu', 'name: web')}", encoding="utf-8")
    loaded = load_policy_file(path)
    assert [p.name for p in loaded.staggering_policies] == ["web"]
    assert loaded.node_policies[1] == NodePolicy(
        name="web",
        node_selector=loaded.node_policies[1].node_selector,
        priority=5,
        throttle=loaded.node_policies[1].throttle,
    )
