"""pod-pacemaker's PacemakerConfig as a node policy: its chart's own default config (helm's output, kept
verbatim in data/pod-pacemaker-default-config.yaml), and what `kubectl get pacemakerconfigs -o yaml` prints
(a List, metadata and status included, every throttle with its numbers as strings, as the CRD takes them)
load with a note each; fillFactor in every unit of Go's durations; every way a PacemakerConfig is bad is an
error naming its path under the PacemakerConfig's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stagger.policy import (
    LoadAvg,
    MaxConcurrent,
    NodePolicy,
    PolicyError,
    PolicyFile,
    RateLimit,
    ThrottleConfig,
    load_policy_file,
    parse_policy_documents,
    parse_policy_text,
)
from stagger.policy.rules import got_text
from stagger.selectors import LabelSelector

DEFAULT_CONFIG = Path(__file__).with_name("data") / "pod-pacemaker-default-config.yaml"

# As `kubectl get pacemakerconfigs -o yaml` prints two of them (written for this test: uid, resourceVersion,
# managedFields and the rest as the API server fills them in for a Helm-installed object).
KUBECTL_GET = """\
apiVersion: v1
items:
- apiVersion: woehrl.net/v1alpha
  kind: PacemakerConfig
  metadata:
    annotations:
      meta.helm.sh/release-name: pod-pacemaker
      meta.helm.sh/release-namespace: default
    creationTimestamp: "2024-07-26T17:20:31Z"
    generation: 1
    labels:
      app.kubernetes.io/managed-by: Helm
    managedFields:
    - apiVersion: woehrl.net/v1alpha
      fieldsType: FieldsV1
      fieldsV1:
        f:spec:
          .: {}
          f:nodeSelector: {}
      manager: helm
      operation: Update
      time: "2024-07-26T17:20:31Z"
    name: default-pacemaker-config
    resourceVersion: "1234"
    uid: 3f0d8c6e-4a4e-4c39-9d7e-2d5b6f1e0a11
  spec:
    nodeSelector: {}
    priority: 0
    throttleConfig:
      maxConcurrent:
        perCore: "0.5"
- apiVersion: woehrl.net/v1alpha
  kind: PacemakerConfig
  metadata:
    creationTimestamp: "2024-07-27T08:00:00Z"
    generation: 3
    name: build-nodes
    resourceVersion: "5678"
    uid: 9a1b2c3d-0000-4000-8000-000000000001
  spec:
    nodeSelector:
      node.kubernetes.io/pool: build
    priority: 10
    throttleConfig:
      cpu:
        incrementBy: "10"
        maxLoad: "80"
      io:
        incrementBy: "2.5"
        maxLoad: "50"
      loadAvg:
        incrementBy: "0.2"
        maxLoad: "1.5"
        perCore: true
      maxConcurrent:
        perCore: "0.5"
        value: 4
      rateLimit:
        burst: 3
        fillFactor: 500ms
  status: {}
kind: List
metadata:
  resourceVersion: ""
"""

DEFAULT = NodePolicy(
    name="default-pacemaker-config", throttle=ThrottleConfig(max_concurrent=MaxConcurrent(per_core=0.5))
)
BUILD_NODES = NodePolicy(
    name="build-nodes",
    node_selector=LabelSelector.from_labels({"node.kubernetes.io/pool": "build"}),
    priority=10,
    throttle=ThrottleConfig(
        cpu_max_load=80.0,
        cpu_increment_by=10.0,
        io_max_load=50.0,
        io_increment_by=2.5,
        load_avg=LoadAvg(max_load=1.5, per_core=True, increment_by=0.2),
        max_concurrent=MaxConcurrent(per_core=0.5, value=4),
        rate_limit=RateLimit(burst=3, fill_seconds=0.5),
    ),
)


def test_pod_pacemakers_own_default_config() -> None:
    loaded = load_policy_file(DEFAULT_CONFIG)
    assert loaded == PolicyFile(node_policies=(DEFAULT,))
    assert loaded.notes == (
        'PacemakerConfig "default-pacemaker-config": read as node policy "default-pacemaker-config"',
    )
    # Everything a PacemakerConfig does not say is stagger's default.
    assert (DEFAULT.hold_timeout, DEFAULT.exclude_namespaces, DEFAULT.max_queue) == (
        120.0,
        ("kube-system",),
        None,
    )


def test_what_kubectl_get_prints() -> None:
    loaded = parse_policy_text(KUBECTL_GET)
    assert loaded == PolicyFile(node_policies=(DEFAULT, BUILD_NODES))
    assert loaded.notes == (
        'items[0] (PacemakerConfig "default-pacemaker-config"): read as node policy "default-pacemaker-config"',
        'items[1] (PacemakerConfig "build-nodes"): read as node policy "build-nodes"',
    )


def test_numbers_may_be_numbers_too() -> None:
    as_numbers = KUBECTL_GET
    for text in ('"10"', '"2.5"', '"0.2"', '"1.5"', '"0.5"', '"80"', '"50"'):
        as_numbers = as_numbers.replace(text, text.strip('"'))
    assert parse_policy_text(as_numbers) == parse_policy_text(KUBECTL_GET)


@pytest.mark.parametrize(
    ("fill_factor", "seconds"),
    [
        pytest.param("100\u00b5s", 0.0001, id="micro-sign"),
        pytest.param("250ns", 2.5e-7, id="ns"),
        pytest.param("1.5s", 1.5, id="fraction"),
        pytest.param("2m", 120.0, id="minutes"),
        pytest.param("1h", 3600.0, id="hours"),
        pytest.param(2, 2.0, id="a-number-is-seconds-as-in-stagger"),
    ],
)
def test_fill_factor_is_a_go_duration(fill_factor: object, seconds: float) -> None:
    loaded = parse_policy_documents(
        [config(throttleConfig={"rateLimit": {"burst": 1, "fillFactor": fill_factor}})]
    )
    rate = loaded.node_policies[0].throttle.rate_limit
    assert rate is not None and rate.fill_seconds == pytest.approx(seconds, rel=1e-12)


def config(name: object = "x", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "woehrl.net/v1alpha",
        "kind": "PacemakerConfig",
        "metadata": {"name": name},
        "spec": spec,
    }


X = 'PacemakerConfig "x"'
CPU = f"{X}.spec.throttleConfig.cpu"
NUMBER = 'must be a number, or a decimal number in quotes like "0.5"'


@pytest.mark.parametrize(
    ("document", "errors"),
    [
        pytest.param(config(throttleConfig={"cpu": {"maxLoad": "80%"}}), [f"{CPU}.maxLoad: {NUMBER} (got '80%')"], id="percent-sign"),
        pytest.param(config(throttleConfig={"cpu": {"maxLoad": "-5"}}), [f"{CPU}.maxLoad: {NUMBER} (got '-5')"], id="crd-pattern-has-no-sign"),
        pytest.param(config(throttleConfig={"cpu": {"maxLoad": ".5"}}), [f"{CPU}.maxLoad: {NUMBER} (got '.5')"], id="crd-pattern-needs-a-digit-first"),
        pytest.param(config(throttleConfig={"cpu": {"maxLoad": "150"}}), [f"{CPU}.maxLoad: must be greater than 0 and at most 100 (got '150')"], id="over-100"),
        pytest.param(config(throttleConfig={"cpu": {"maxLoad": "9" * 400}}), [f"{CPU}.maxLoad: {NUMBER} (got {got_text('9' * 400)})"], id="past-any-float"),
        pytest.param(config(throttleConfig={"cpu": {"incrementBy": "1"}}), [f"{CPU}.maxLoad: is required"], id="max-load-required"),
        pytest.param(
            config(throttleConfig={"maxConcurrent": {"perCore": "0"}}),
            [f"{X}.spec.throttleConfig.maxConcurrent.perCore: must be greater than 0 (got '0')"],
            id="per-core-zero",
        ),
        pytest.param(
            config(throttleConfig={"maxConcurrent": {"value": "4"}}),
            [f"{X}.spec.throttleConfig.maxConcurrent.value: must be an integer (got '4')"],
            id="value-is-an-integer-in-the-crd",
        ),
        pytest.param(
            config(throttleConfig={"rateLimit": {"burst": 1, "fillFactor": "1x"}}),
            [f"{X}.spec.throttleConfig.rateLimit.fillFactor: not a duration like 90s, 10m or 1h30m (got '1x')"],
            id="fill-factor",
        ),
        pytest.param(
            config(throttleConfig={"loadAvg": {"maxLoad": "1", "perCore": "true"}}),
            [f"{X}.spec.throttleConfig.loadAvg.perCore: must be true or false (got 'true')"],
            id="per-core-is-a-bool",
        ),
        pytest.param(
            config(throttleConfig={"cpu": {"maxLoads": "1"}}),
            [f"{CPU}.maxLoads: unknown key; did you mean 'maxLoad'?", f"{CPU}.maxLoad: is required"],
            id="unknown-spec-key",
        ),
        pytest.param(
            config(nodeSelectors={}),
            [f"{X}.spec.nodeSelectors: unknown key; did you mean 'nodeSelector'?"],
            id="unknown-spec-key-at-the-top",
        ),
        pytest.param(
            config(nodeSelector={"matchLabels": {"pool": "gpu"}}),
            [f"{X}.spec.nodeSelector[\"matchLabels\"]: label value must be a string; quote it in YAML (got {{'pool': 'gpu'}})"],
            id="node-selector-is-a-plain-map",
        ),
        pytest.param(
            config(name="Default.Config"),
            [
                'PacemakerConfig "Default.Config".metadata.name: cannot be a stagger node policy name: must be a '
                "DNS-1123 label (at most 63 lowercase letters, digits or '-', starting and ending with a letter or "
                "digit) (got 'Default.Config')"
            ],
            id="name-not-a-node-policy-name",
        ),
        pytest.param({**config(), "metadata": {"uid": "u"}}, ["PacemakerConfig.metadata.name: is required"], id="no-name"),
        pytest.param(
            {**config(), "metadata": {"name": "x", "nam": "y"}},
            [f"{X}.metadata.nam: unknown key; did you mean 'name'?"],
            id="unknown-metadata-key",
        ),
        pytest.param(
            {**config(), "apiVersion": "woehrl.net/v1"},
            [f"{X}.apiVersion: must be one of woehrl.net/v1alpha (got 'woehrl.net/v1')"],
            id="api-version",
        ),
        pytest.param(
            {**config(), "kind": "ConfigMap"},
            ["kind: must be PacemakerConfig (apiVersion woehrl.net/v1alpha) or a List of them (got 'ConfigMap')"],
            id="another-kind",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "List", "items": [config(), {"kind": "ConfigMap"}, "x"]},
            ["items[1].kind: must be a PacemakerConfig (got 'ConfigMap')", "items[2]: must be a PacemakerConfig (got 'x')"],
            id="list-of-other-things",
        ),
        pytest.param(
            {"apiVersion": "woehrl.net/v1alpha", "kind": "List", "items": []},
            ["apiVersion: must be v1 for a List (got 'woehrl.net/v1alpha')"],
            id="list-api-version",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "List", "items": [config(), config()]},
            ['items[1] (PacemakerConfig "x").metadata.name: duplicate node policy name; items[0] (PacemakerConfig "x").metadata.name has it already (got \'x\')'],
            id="a-name-twice-in-a-list",
        ),
    ],
)  # fmt: skip
def test_errors(document: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_documents([document])
    assert list(caught.value.errors) == errors


def test_a_list_error_names_its_whole_path_in_a_file_of_several_documents() -> None:
    text = "nodePolicies: []\n---\n" + yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": [config(throttleConfig={"io": {"maxLoad": "x"}})]}
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, source="p.yaml")
    assert caught.value.errors == (
        f"documents[1].items[0] (PacemakerConfig \"x\").spec.throttleConfig.io.maxLoad: {NUMBER} (got 'x')",
    )
