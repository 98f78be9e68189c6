"""`kubectl stagger convert` on straggler's policy file (technicianted/straggler): its README's example, its
examples/config.yaml and its test/data/stagger-config.yaml (a linear pacer), verbatim, become staggering
policies with the same selector, grouping, pacer and evict-by-stub holding (straggler's only way); keys are
matched as straggler's Go decoder matches them (its README spells `BypassLabelSelector`). straggler's
default maxBlockedDuration (none, zero or negative: no limit) is `maxBlockedDuration: never`, and a Go
duration is read as Go reads it (hypothesis). A file straggler refuses to start with (a policy without a
pacer, an empty entry as a web-flattened example reads, a pacer field left out, a value of the wrong type,
an empty or repeated groupingExpression, a repeated name, no Go duration) is refused, exit 1, every problem
on stderr naming the file; what straggler takes but stagger cannot run is one line each on stderr, and the
rest converts. After the policies: the chart's `prefix` that keeps straggler's labels, and straggler's
objects to delete."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubectl_stagger.convert import Input, InvalidInput, convert_inputs
from kubectl_stagger.convert.straggler import go_duration
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
def test_the_readme_example_and_what_the_cluster_still_needs() -> None:
    run = convert(data("straggler-readme-example.yaml"))
    loaded = run.loaded()
    assert loaded.staggering_policies == (IMAGE_PULL,) and loaded.node_policies == ()
    assert run.not_carried == []
    assert any("mode: evict, hold: stub" in note for note in run.notes)
    # What the converted cluster needs comes last: the chart value, its --set line, straggler's objects.
    assert run.notes[-4:-2] == [
        'chart value: prefix: v1.straggler.technicianted: straggler\'s pods opt in with v1.straggler.technicianted/enable: "1" '
        "as they are, and its other labels keep their names",
        "chart values as flags of helm install or upgrade: --set prefix=v1.straggler.technicianted",
    ]
    webhooks, release = run.notes[-2:]
    assert webhooks.startswith("no longer needed: straggler's MutatingWebhookConfigurations")
    assert release.startswith("no longer needed: straggler's Deployment") and "staggered=1" in release


@pytest.mark.slow
def test_examples_config_and_the_linear_test_config_together_never_by_default() -> None:
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
    # The test config has no maxBlockedDuration: straggler holds such pods without limit, stagger "never".
    assert linear.max_blocked_duration == math.inf
    assert "  maxBlockedDuration: never\n" in run.stdout
    assert run.not_carried == []
    (never,) = [note for note in run.notes if "maxBlockedDuration: never" in note]
    assert never.startswith(
        f"{data('straggler-test-config.yaml')}: staggeringPolicies[0].maxBlockedDuration: none"
    )


def test_keys_match_as_gos_decoder_matches_them_bypass_label_selector_as_the_readme_spells_it() -> None:
    # The README's example with the bypass selector its text describes, spelt as it spells it.
    text = verbatim("straggler-readme-example.yaml").replace(
        '    staggerimages: "1"\n', '    staggerimages: "1"\n  BypassLabelSelector:\n    canary: "1"\n', 1
    )
    converted = convert_inputs([Input(source="bypass.yaml", text=text)])
    (policy,) = converted.policy_file.staggering_policies
    assert policy.bypass_label_selector == LabelSelector.from_labels({"canary": "1"})
    assert converted.not_carried == ()


def straggler_policy(*, blocked: str = "90s", **pacer: object) -> str:
    lines = "".join(f"      {key}: {value}\n" for key, value in pacer.items())
    return (
        "staggeringPolicies:\n- name: Web_Pods\n  labelSelector: {app: web}\n"
        f"  groupingExpression: .metadata.namespace\n  maxBlockedDuration: '{blocked}'\n"
        f"  pacer:\n    exponential:\n{lines}" + "  flavour: spicy\n"
    )


def test_what_stagger_cannot_run_is_said_and_the_rest_converts() -> None:
    text = straggler_policy(minInitial=2, maxStagger=8, multiplier=3) + (
        "- name: never\n  labelSelector: {app: x}\n  groupingExpression: .spec.nodeName\n"
        "  pacer:\n    exponential: {minInitial: 1, maxStagger: 4, multiplier: 1}\n"
        "- name: both\n  labelSelector: {app: y}\n  groupingExpression: .spec.schedulerName\n"
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
    assert converted.not_carried == (
        "p.yaml: staggeringPolicies[0].flavour: not a key of straggler's policies (it ignores it too)",
        "p.yaml: staggeringPolicies[1].pacer.exponential: stagger needs minInitial and maxStagger of at least 1 "
        "and a multiplier above 1 (got {'minInitial': 1, 'maxStagger': 4, 'multiplier': 1})",
        "p.yaml: staggeringPolicies[2].pacer.linear: straggler uses the exponential pacer when both are given",
    )
    assert any("'Web_Pods' is named 'web-pods'" in note for note in converted.notes)


@pytest.mark.parametrize(
    ("blocked", "seconds"),
    [
        pytest.param("10m", 600.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="hours-and-minutes"),
        pytest.param("1.5s", 1.5, id="fraction"),
        pytest.param("0s", math.inf, id="zero-is-no-limit"),
        pytest.param("0", math.inf, id="bare-zero-go-reads"),
        pytest.param("-5m", math.inf, id="negative-is-no-limit"),
    ],
)
def test_max_blocked_duration_as_go_reads_it(blocked: str, seconds: float) -> None:
    text = straggler_policy(blocked=blocked, minInitial=1, maxStagger=4, multiplier=2)
    (policy,) = convert_inputs([Input(source="p.yaml", text=text)]).policy_file.staggering_policies
    assert policy.max_blocked_duration == seconds


_UNITS = {"ns": "1e-9", "us": "1e-6", "µs": "1e-6", "ms": "1e-3", "s": "1", "m": "60", "h": "3600"}


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(_UNITS))),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["", "+", "-"]),
)
def test_go_duration_sums_its_components(components: list[tuple[int, str]], sign: str) -> None:
    text = sign + "".join(f"{number}{unit}" for number, unit in components)
    total = sum((Decimal(number) * Decimal(_UNITS[unit]) for number, unit in components), Decimal(0))
    assert go_duration(text) == float(-total if sign == "-" else total)


@pytest.mark.parametrize(
    "text",
    [pytest.param(each, id=each or "empty") for each in ("", "5", "ten minutes", "1d", "s", "1.s.", "--1s")],
)
def test_go_duration_refuses_what_go_refuses(text: str) -> None:
    assert go_duration(text) is None


# The README's example as a web page's copy can lose it: every line's indentation gone. It still parses, to
# a policy of a name alone (the rest are keys of the file straggler ignores).
FLATTENED = "".join(line.lstrip() + "\n" for line in verbatim("straggler-readme-example.yaml").splitlines())

POLICY = "staggeringPolicies:\n- name: a\n  labelSelector: {app: a}\n  groupingExpression: .x\n"
PACER = "  pacer:\n    linear: {step: 1, maxStagger: 2}\n"


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        pytest.param(
            POLICY,
            [
                'staggeringPolicies[0].pacer: none: straggler refuses the file: "failed to create pacer for a: no '
                'pacer configuration specified"'
            ],
            id="no-pacer",
        ),
        pytest.param(
            POLICY + "  pacer: {exponential: null, linear: null}\n",
            [
                "staggeringPolicies[0].pacer: neither exponential nor linear: straggler refuses the file: "
                '"failed to create pacer for a: no pacer configuration specified"'
            ],
            id="neither-pacer",
        ),
        pytest.param(
            "staggeringPolicies:\n- {}\n",
            [
                "staggeringPolicies[0]: an empty policy (got {}): straggler reads it as a policy without a pacer "
                "and refuses the file; was the YAML's indentation lost (copied from a web page)?"
            ],
            id="empty-entry",
        ),
        pytest.param(
            "staggeringPolicies:\n-\n",
            [
                "staggeringPolicies[0]: an empty policy (got None): straggler reads it as a policy without a "
                "pacer and refuses the file; was the YAML's indentation lost (copied from a web page)?"
            ],
            id="null-entry",
        ),
        pytest.param(
            FLATTENED,
            [
                'staggeringPolicies[0].pacer: none: straggler refuses the file: "failed to create pacer for '
                'image-pull: no pacer configuration specified"',
                'staggeringPolicies[0].groupingExpression: none: straggler refuses the file ("empty grouping '
                'expression")',
            ],
            id="web-flattened-readme",
        ),
        pytest.param(
            POLICY + "  pacer:\n    exponential: {minInitial: 1, maxStagger: 4}\n",
            [
                "staggeringPolicies[0].pacer.exponential.multiplier: left out: straggler dereferences it and "
                "crashes (got None): straggler refuses the file"
            ],
            id="pacer-field-left-out",
        ),
        pytest.param(
            POLICY + "  pacer:\n    linear: {step: '1', maxStagger: 2.5}\n",
            [
                "staggeringPolicies[0].pacer.linear.step: not a whole number (got '1'): straggler refuses the file",
                "staggeringPolicies[0].pacer.linear.maxStagger: not a whole number (got 2.5): straggler refuses the file",
            ],
            id="wrong-types",
        ),
        pytest.param(
            POLICY + PACER + "- name: b\n  groupingExpression: .x\n" + PACER,
            [
                "staggeringPolicies[1].groupingExpression: '.x' is p.yaml: staggeringPolicies[0].groupingExpression's "
                'too: straggler refuses the file ("grouping expression already exists")'
            ],
            id="grouping-twice",
        ),
        pytest.param(
            POLICY + PACER + "- name: a\n  groupingExpression: .y\n" + PACER,
            [
                "staggeringPolicies[1].name: 'a' is p.yaml: staggeringPolicies[0]'s name too: straggler refuses "
                'the file ("duplicate config name")'
            ],
            id="name-twice",
        ),
        pytest.param(
            POLICY + PACER + "  maxBlockedDuration: 90\n",
            [
                "staggeringPolicies[0].maxBlockedDuration: not a Go duration like 90s or 10m (got 90): straggler "
                "refuses the file"
            ],
            id="duration-a-number",
        ),
        pytest.param(
            "staggeringPolicies: {name: a}\n",
            ["staggeringPolicies: not a list (got {'name': 'a'}): straggler refuses the file"],
            id="not-a-list",
        ),
        pytest.param(
            POLICY.replace("{app: a}", "[app]") + PACER,
            [
                "staggeringPolicies[0].labelSelector: not a map of labels (got ['app']): straggler refuses the file"
            ],
            id="selector-a-list",
        ),
    ],
)
def test_what_straggler_refuses_is_refused(text: str, errors: list[str]) -> None:
    with pytest.raises(InvalidInput) as refused:
        convert_inputs([Input(source="p.yaml", text=text)])
    assert list(refused.value.errors) == [f"p.yaml: {error}" for error in errors]


@pytest.mark.slow
def test_a_refused_file_exits_1_naming_the_file_and_why(tmp_path: Path) -> None:
    path = tmp_path / "straggler.yaml"
    path.write_text(POLICY)
    run = convert(path)
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == (
        f'{path}: staggeringPolicies[0].pacer: none: straggler refuses the file: "failed to create pacer for a: '
        'no pacer configuration specified"\n'
    )


def test_a_file_of_no_policies_converts_to_none_and_says_so() -> None:
    converted = convert_inputs([Input(source="p.yaml", text="staggeringPolicies: []\n")])
    assert converted.policy_file.staggering_policies == ()
    assert "p.yaml: no staggering policy: straggler staggers nothing with it" in converted.notes
