"""straggler's own policy example (its README, kept verbatim in tests/convert/data/straggler-readme-example.yaml) loads
as stagger's policy file and means what straggler means by it: pods labelled `staggerimages: "1"`, one group
per image, exponential pacing 4, 16, x4, released after 10m at the latest. And straggler's spellings, read
as its Go decoder reads them (its struct fields have no json tags: `BypassLabelSelector`, as its README
names the key, `Name`, `MinInitial`...), load to the same policy, each with a note."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from stagger.policy import ExponentialPacer, StaggeringPolicy, load_policy_file, parse_policy_text
from stagger.selectors import LabelSelector

# One copy of the peers' texts, shared with the convert tests.
EXAMPLE = Path(__file__).parents[1] / "convert" / "data" / "straggler-readme-example.yaml"
NOTE = "(keys match regardless of case, as Go's decoder does)"

# The README's Deployment that goes with the example: its pod template's labels and image.
POD = {
    "metadata": {"labels": {"app": "nginx", "v1.straggler.technicianted/enable": "1", "staggerimages": "1"}},
    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2"}]},
}


def _readme_block() -> str:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[next(i for i, line in enumerate(lines) if not line.startswith("# ")) :])


def test_the_data_file_is_still_the_readmes_text() -> None:
    """Not tidied by an editor: the block's sha256, its trailing space and typo ("inifnite") included."""
    block = _readme_block()
    assert "staggered after which \n" in block and "inifnite" in block
    assert hashlib.sha256(block.encode()).hexdigest() == (
        "f2ca014648c68ec65ebcdaaaab538530245c4d98d858a70a0633eb678600dee6"
    )


def test_the_example_means_what_straggler_means() -> None:
    loaded = load_policy_file(EXAMPLE)
    assert loaded.notes == ()
    assert loaded.node_policies == ()
    (policy,) = loaded.staggering_policies
    assert policy == StaggeringPolicy(
        name="image-pull",
        label_selector=LabelSelector.from_labels({"staggerimages": "1"}),
        pacer=ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16),
        grouping_expression=".spec.containers[0].image",
        max_blocked_duration=600.0,
    )
    assert policy.label_selector.matches(POD["metadata"]["labels"])
    assert policy.grouping_key(POD) == "nginx:1.14.2"
    assert policy.bypass_label_selector is None


def test_bypass_label_selector_as_straggler_spells_it() -> None:
    text = _readme_block() + '  BypassLabelSelector:\n    canary: "1"\n'
    loaded = parse_policy_text(text)
    assert loaded.notes == (f"staggeringPolicies[0].BypassLabelSelector: read as bypassLabelSelector {NOTE}",)
    (policy,) = loaded.staggering_policies
    assert policy.bypass_label_selector == LabelSelector.from_labels({"canary": "1"})


def test_straggler_s_go_field_names_mean_the_same() -> None:
    """pkg/cmd/config.go: Config.StaggeringPolicies, StaggeringPolicy.{Name, LabelSelector,
    BypassLabelSelector, GroupingExpression, MaxBlockedDuration, Pacer}, Pacer.{Exponential, Linear},
    ExponentialPacer.{MinInitial, MaxStagger, Multiplier}: no json tags, so Go matches them in any case."""
    go_names = {
        "staggeringPolicies": "StaggeringPolicies",
        "name": "Name",
        "labelSelector": "LabelSelector",
        "maxBlockedDuration": "MaxBlockedDuration",
        "groupingExpression": "GroupingExpression",
        "pacer": "Pacer",
        "exponential": "Exponential",
        "minInitial": "MinInitial",
        "maxStagger": "MaxStagger",
        "multiplier": "Multiplier",
    }

    def respelt(data: object) -> object:
        if isinstance(data, list):
            return [respelt(item) for item in data]
        if isinstance(data, dict):
            return {go_names.get(k, k): v if k == "labelSelector" else respelt(v) for k, v in data.items()}
        return data

    text = yaml.safe_dump(respelt(yaml.safe_load(_readme_block())), sort_keys=False)
    loaded = parse_policy_text(text)
    assert loaded == load_policy_file(EXAMPLE)
    assert len(loaded.notes) == len(go_names)
    assert loaded.notes[0] == f"StaggeringPolicies: read as staggeringPolicies {NOTE}"
