"""`kubectl stagger convert` on straggler's policy file (technicianted/straggler): its README's example, its
examples/config.yaml and its test/data/stagger-config.yaml (a linear pacer), verbatim, become staggering
policies with the same selector, grouping, pacer and evict-by-stub holding (straggler's only way); keys are
matched as straggler's Go decoder matches them (its README spells `BypassLabelSelector`); what straggler
says that stagger cannot (no maxBlockedDuration: held for ever; a pacer stagger cannot run; keys it ignores)
is one line each on stderr, and the rest still converts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_stagger.convert import Input, convert_inputs
from stagger.policy import ExponentialPacer, LinearPacer, StaggeringPolicy
from stagger.selectors import LabelSelector
from tests.convert.plugin import convert, data, verbatim

IMAGE_PULL = StaggeringPolicy(
    name="image-pull",
    label_selector=LabelSelector.from_labels({"staggerimages": "1"}),
    pacer=ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16),
    grouping_expression=".spec.containers[0].image",
    max_blocked_duration=600.0,
    mode="evict",
    hold="stub",
)


@pytest.mark.slow
def test_the_readme_example() -> None:
    run = convert(data("straggler-readme-example.yaml"))
    loaded = run.loaded()
    assert loaded.staggering_policies == (IMAGE_PULL,) and loaded.node_policies == ()
    assert run.not_carried == []
    assert any("mode: evict, hold: stub" in note for note in run.notes)
    assert any("v1.stagger.technicianted/enable" in note for note in run.notes)


@pytest.mark.slow
def test_examples_config_and_the_linear_test_config_together() -> None:
    run = convert(data("straggler-examples-config.yaml"), data("straggler-test-config.yaml"))
    examples, linear = run.loaded().staggering_policies
    assert examples == StaggeringPolicy(
        name="image-pull",
        label_selector=IMAGE_PULL.label_selector,
        pacer=ExponentialPacer(min_initial=4, multiplier=2.0, max_stagger=16),
        grouping_expression=".spec.containers[0].image",
        max_blocked_duration=600.0,
        mode="evict",
        hold="stub",
    )
    assert linear.name == "test-staggering-policy"
    assert linear.label_selector == LabelSelector.from_labels({"app": "test-app"})
    assert linear.pacer == LinearPacer(step=1, max_stagger=4)
    # The test config has no maxBlockedDuration: straggler holds such pods without limit.
    (line,) = run.not_carried
    assert line.startswith(f"{data('straggler-test-config.yaml')}: staggeringPolicies[0].maxBlockedDuration:")
    assert "without limit" in line


def test_keys_match_as_gos_decoder_matches_them_bypass_label_selector_as_the_readme_spells_it() -> None:
    # The README's example with the bypass selector its text describes, spelt as it spells it.
    text = verbatim("straggler-readme-example.yaml").replace(
        '    staggerimages: "1"\n', '    staggerimages: "1"\n  BypassLabelSelector:\n    canary: "1"\n', 1
    )
    converted = convert_inputs([Input(source="bypass.yaml", text=text)])
    (policy,) = converted.policy_file.staggering_policies
    assert policy.bypass_label_selector == LabelSelector.from_labels({"canary": "1"})
    assert converted.not_carried == ()


def straggler_policy(**pacer: object) -> str:
    lines = "".join(f"      {key}: {value}\n" for key, value in pacer.items())
    return (
        "staggeringPolicies:\n- name: Web_Pods\n  labelSelector: {app: web}\n"
        "  groupingExpression: .metadata.namespace\n  maxBlockedDuration: 90s\n"
        f"  pacer:\n    exponential:\n{lines}" + "  flavour: spicy\n"
    )


def test_what_cannot_be_carried_over_is_said_and_the_rest_converts() -> None:
    text = straggler_policy(minInitial=2, maxStagger=8, multiplier=3) + (
        "- name: never\n  labelSelector: {app: x}\n  groupingExpression: .spec.nodeName\n"
        "  pacer:\n    exponential: {minInitial: 1, maxStagger: 4, multiplier: 1}\n"
        "- name: both\n  labelSelector: {app: y}\n  groupingExpression: .spec.nodeName\n"
        "  pacer:\n    exponential: {minInitial: 1, maxStagger: 4, multiplier: 2}\n    linear: {step: 1, maxStagger: 4}\n"
    )
    converted = convert_inputs([Input(source="p.yaml", text=text)])
    web, both = converted.policy_file.staggering_policies
    assert (web.name, web.max_blocked_duration, web.grouping_expression) == (
        "web-pods",
        90.0,
        ".metadata.namespace",
    )
    assert web.pacer == ExponentialPacer(min_initial=2, multiplier=3.0, max_stagger=8)
    assert both.pacer == ExponentialPacer(min_initial=1, multiplier=2.0, max_stagger=4)
    said = "\n".join(converted.not_carried)
    assert "p.yaml: staggeringPolicies[0].flavour: not a key of straggler's policies" in said
    assert "staggeringPolicies[1].pacer.exponential: stagger needs" in said and "a multiplier above 1" in said
    assert "the policy 'never' is left out" in said
    assert (
        "staggeringPolicies[2].pacer.linear: straggler uses the exponential pacer when both are given" in said
    )
    assert any("'Web_Pods' is named 'web-pods'" in note for note in converted.notes)


@pytest.mark.slow
def test_a_policy_without_a_pacer_is_left_out_with_why(tmp_path: Path) -> None:
    path = tmp_path / "straggler.yaml"
    path.write_text("staggeringPolicies:\n- name: a\n  labelSelector: {app: a}\n  groupingExpression: .x\n")
    run = convert(path)
    assert run.loaded().staggering_policies == ()
    assert run.not_carried == [
        f"{path}: staggeringPolicies[0].pacer: none (straggler refuses the policy: no pacer configuration)",
        f"{path}: staggeringPolicies[0]: the policy 'a' is left out (no pacer stagger can run)",
    ]
