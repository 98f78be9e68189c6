"""The policy file's JSON Schema in values.schema.json (`policies`): made from the validator's own table
(`make chart-schema`; this test fails when they differ), so that `helm install/upgrade` refuses a policy with a
misspelt key or a wrong kind of value, naming the field, before it reaches a node; and every policy the
validator accepts (the chart's own file, the test policies) passes it. Each refused case is refused by lockd's
validator too, with its own message. Keys match regardless of case in both (lockd reads them as Go's
decoder does; the schema says each key as a case-insensitive RE2 pattern), and a misspelt key is refused in
any case."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
import yaml

from stagger import policy
from stagger.policy import PolicyError
from tests.chart.helm import CHART, RenderError, render
from tests.tools import ROOT

CHART_POLICIES = yaml.safe_load((CHART / "configs" / "_policies.yaml").read_text())
STRAGGLER_EXAMPLE = yaml.safe_load((ROOT / "tests/convert/data/straggler-readme-example.yaml").read_text())
# `make chart-schema`'s script, beside the chart it writes into (not a package: loaded from its file).
_SPEC = importlib.util.spec_from_file_location("schemagen", ROOT / "charts" / "schemagen.py")
assert _SPEC is not None and _SPEC.loader is not None
SCHEMAGEN = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(SCHEMAGEN)
GOOD_NODE = {"name": "default", "throttleConfig": {"maxConcurrent": {"perCore": 0.5}}}
GOOD_GROUP = {
    "name": "web",
    "labelSelector": {"app": "web"},
    "pacer": {"linear": {"step": 2, "maxStagger": 10}},
}


def test_the_schema_is_the_validators() -> None:
    in_chart = json.loads((CHART / "values.schema.json").read_text())["properties"]["policies"]
    assert in_chart == SCHEMAGEN.policies_schema(), "values.schema.json is stale: run `make chart-schema`"


def _render(policies: dict[str, Any]) -> None:
    render(jsons=(f"policies={json.dumps(policies)}",))


@pytest.mark.parametrize(
    "policies",
    [
        pytest.param(CHART_POLICIES, id="the-charts-file"),
        pytest.param({"nodePolicies": [GOOD_NODE], "staggeringPolicies": [GOOD_GROUP]}, id="both"),
        pytest.param(
            {
                "nodePolicies": [
                    {
                        "name": "gpu",
                        "nodeSelector": {
                            "matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]
                        },
                        "priority": 10,
                        "holdTimeout": 90,
                        "minHold": "0s",
                        "maxWait": "1h30m",
                        "unreachableWait": "500ms",
                        "countAllStarting": True,
                        "waitForDaemonSets": None,
                        "excludeNamespaces": ["kube-system"],
                        "throttleConfig": {
                            "cpu": {"maxLoad": 80, "incrementBy": 5},
                            "io": {"maxLoad": 12.5, "incrementBy": 0},
                            "loadAvg": {"maxLoad": 1.5, "perCore": True, "incrementBy": 0.25},
                            "rateLimit": {"burst": 3, "fillFactor": "10s"},
                            "maxConcurrent": {"value": 2, "perCore": 1},
                        },
                        "dependencies": [
                            {"http": "https://registry.example:5000/v2/", "timeout": "1s"},
                            {"tcp": "[fd00::1]:5432"},
                            {"tcp": "db.example:5432", "timeout": 3},
                        ],
                    }
                ],
                "staggeringPolicies": [
                    {
                        **GOOD_GROUP,
                        "mode": "evict",
                        "hold": "stub",
                        "groupingExpression": ".spec.containers[0].image",
                        "maxBlockedDuration": "10m",
                        "pacer": {"exponential": {"minInitial": 1, "multiplier": 2, "maxStagger": 64}},
                    }
                ],
            },
            id="every-key",
        ),
        pytest.param(
            {
                "NodePolicies": [
                    {
                        "NAME": "default",
                        "ThrottleConfig": {"MaxConcurrent": {"PerCore": 0.5}, "LoadAvg": {"maxload": 2}},
                        "Dependencies": [{"HTTP": "http://x/", "Timeout": "1s"}],
                    }
                ],
                "staggeringPolicies": [
                    {**GOOD_GROUP, "BypassLabelSelector": {"canary": "1"}, "maxBloc\u212aedDuration": "1m"}
                ],
            },
            id="keys-in-any-case",
        ),
        pytest.param(STRAGGLER_EXAMPLE, id="stragglers-readme-example"),
    ],
)
def test_what_the_validator_accepts_installs(policies: dict[str, Any]) -> None:
    policy.parse_policy_file(policies, source="test")
    _render(policies)


def node(**changes: Any) -> dict[str, Any]:
    return {"nodePolicies": [{**GOOD_NODE, **changes}]}


def group(**changes: Any) -> dict[str, Any]:
    return {"staggeringPolicies": [{**GOOD_GROUP, **changes}]}


@pytest.mark.parametrize(
    ("policies", "field", "helm_says", "lockd_says"),
    [
        pytest.param(
            node(throttleConfig={"maxConcurent": {"value": 1}}),
            "/policies/nodePolicies/0/throttleConfig",
            "additional properties 'maxConcurent' not allowed",
            "did you mean 'maxConcurrent'?",
            id="misspelt-key",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "ThrottleConfig": {"MaxConcurent": {"value": 1}}}]},
            "/policies/nodePolicies/0/ThrottleConfig",
            "additional properties 'MaxConcurent' not allowed",
            "did you mean 'maxConcurrent'?",
            id="misspelt-key-in-another-case",
        ),
        pytest.param(
            {"nodePolicies": [{"throttleConfig": {}}]},
            "/policies/nodePolicies/0",
            "missing property 'name'",
            "is required",
            id="required-key-in-no-case",
        ),
        pytest.param(
            node(Priority=1.5),
            "/policies/nodePolicies/0/Priority",
            "want null or integer",
            "integer",
            id="a-value-under-a-key-in-another-case",
        ),
        pytest.param(
            node(dependencies=[{"timeout": "1s"}]),
            "/policies/nodePolicies/0/dependencies/0",
            "oneOf",
            "exactly one of http or tcp",
            id="dependency-without-a-target",
        ),
        pytest.param(
            node(dependencies=[{"http": "ftp://x/"}]),
            "/policies/nodePolicies/0/dependencies/0/http",
            "does not match pattern",
            "http or https URL",
            id="dependency-url",
        ),
        pytest.param(
            node(throttleConfig={"loadAvg": {"perCore": True}}),
            "/policies/nodePolicies/0/throttleConfig/loadAvg",
            "missing property 'maxLoad'",
            "is required",
            id="load-avg-max-load",
        ),
        pytest.param(
            node(throttleConfig={"cpu": {"maxLoad": 1, "incrementBy": 101}}),
            "/policies/nodePolicies/0/throttleConfig/cpu/incrementBy",
            "maximum",
            "at most 100",
            id="increment-over-100",
        ),
        pytest.param(
            {"nodePolicy": [GOOD_NODE]},
            "/policies",
            "additional properties 'nodePolicy' not allowed",
            "did you mean 'nodePolicies'?",
            id="misspelt-top-key",
        ),
        pytest.param(
            node(name="Default"),
            "/policies/nodePolicies/0/name",
            "does not match pattern",
            "DNS-1123",
            id="name",
        ),
        pytest.param(
            node(holdTimeout="ten minutes"),
            "/policies/nodePolicies/0/holdTimeout",
            "anyOf",
            "not a duration",
            id="duration",
        ),
        pytest.param(
            node(holdTimeout="0s"),
            "/policies/nodePolicies/0/holdTimeout",
            "anyOf",
            "longer than 0s",
            id="zero-duration",
        ),
        pytest.param(
            node(priority=1.5),
            "/policies/nodePolicies/0/priority",
            "want null or integer",
            "integer",
            id="not-integer",
        ),
        pytest.param(
            node(throttleConfig={"cpu": {"maxLoad": 150}}),
            "/policies/nodePolicies/0/throttleConfig/cpu/maxLoad",
            "maximum",
            "at most 100",
            id="over-100",
        ),
        pytest.param(
            node(throttleConfig={"maxConcurrent": {}}),
            "/policies/nodePolicies/0/throttleConfig/maxConcurrent",
            "minProperties",
            "needs perCore, value or both",
            id="empty-max-concurrent",
        ),
        pytest.param(
            group(mode="later"),
            "/policies/staggeringPolicies/0/mode",
            "value must be one of",
            "must be one of",
            id="mode",
        ),
        pytest.param(
            group(labelSelector=None), "/policies/staggeringPolicies/0", "", "is required", id="required"
        ),
        pytest.param(
            group(pacer={"linear": {"step": 2, "maxStagger": 4}, "maxConcurrent": {"value": 3}}),
            "/policies/staggeringPolicies/0/pacer",
            "maxProperties",
            "exactly one of",
            id="two-pacers",
        ),
    ],
)
def test_a_bad_policy_is_refused_at_install_naming_the_field(
    policies: dict[str, Any], field: str, helm_says: str, lockd_says: str
) -> None:
    with pytest.raises(PolicyError, match=lockd_says.replace("?", r"\?")):
        policy.parse_policy_file(policies, source="test")
    if (
        "labelSelector" in json.dumps(policies)
        and policies.get("staggeringPolicies", [{}])[0].get("labelSelector") is None
    ):
        # JSON Schema's `required` counts a key set to null as present; lockd refuses it (checked above). Left
        # out: a null there is not a mistake anyone makes by typing.
        return
    with pytest.raises(RenderError) as refused:
        _render(policies)
    message = str(refused.value)
    assert f"at '{field}'" in message, message
    assert helm_says in message, message
