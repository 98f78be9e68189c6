"""The chart's opt-in webhooks (templates/controller-webhook.yaml, `controller.webhook.*`), as rendered: the
Jobs webhook selects a Job by its pod template's enable label (matchConditions); `namespaceOptIn` (on by default) adds `namespaced-pods.<prefix>`, selecting the
namespaces labelled `<prefix>/enable: "1"` besides the exclusions and the user's namespaceSelector, with
no objectSelector; `schedulerNames` adds `scheduler-pods.<prefix>` with a matchCondition on the pod's
schedulerName, and hands the names to the controller (STAGGER_SCHEDULER_NAMES, which it accepts); every webhook shares the rest (service, caBundle, timeouts, policies); bad values are
refused by the schema. What the API server does with them: tests/admission/test_optin_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import CONTROLLER, NAMESPACE, PREFIX, Doc, RenderError, by_kind, named, render, values
from webhook.settings import parse_settings

ENABLE = f"{PREFIX}/enable"
EXCLUDED = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]}


def template_condition(enable: str = ENABLE) -> str:
    labels = "object.spec.template.metadata.labels"
    return (
        f"has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) && "
        f"has({labels}) && '{enable}' in {labels} && {labels}['{enable}'] == '1'"
    )


def webhooks(*sets: str, jsons: tuple[str, ...] = (), flags: tuple[str, ...] = ()) -> dict[str, Doc]:
    """The webhooks of the MutatingWebhookConfiguration by name, in their order."""
    config = by_kind(render(*sets, jsons=jsons, flags=flags), "MutatingWebhookConfiguration")
    hooks = {hook["name"]: hook for hook in config["webhooks"]}
    assert len(hooks) == len(config["webhooks"])
    return hooks


def path(hook: Doc) -> str:
    return str(hook["clientConfig"]["service"]["path"])


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        pytest.param(
            (),
            {
                f"pods.{PREFIX}": "/mutate/pods",
                f"jobs.{PREFIX}": "/mutate/jobs",
                f"namespaced-pods.{PREFIX}": "/mutate/pods/namespace",
            },
            id="defaults",
        ),
        pytest.param(
            ("controller.webhook.namespaceOptIn=false",),
            {f"pods.{PREFIX}": "/mutate/pods", f"jobs.{PREFIX}": "/mutate/jobs"},
            id="namespace-off",
        ),
        pytest.param(
            ("controller.webhook.schedulerNames={straggler}", "controller.webhook.jobs=false"),
            {
                f"pods.{PREFIX}": "/mutate/pods",
                f"namespaced-pods.{PREFIX}": "/mutate/pods/namespace",
                f"scheduler-pods.{PREFIX}": "/mutate/pods/scheduler",
            },
            id="scheduler-on-jobs-off",
        ),
    ],
)
def test_which_webhooks_and_where_they_call(sets: tuple[str, ...], expected: dict[str, str]) -> None:
    hooks = webhooks(*sets)
    # In this order: the labelled pods' webhook first, so that it injects and the others find it done.
    assert {name: path(hook) for name, hook in hooks.items()} == expected
    assert list(hooks) == list(expected)


def test_jobs_are_sent_by_their_pod_templates_label() -> None:
    jobs = webhooks()[f"jobs.{PREFIX}"]
    assert "objectSelector" not in jobs
    assert jobs["matchConditions"] == [{"name": "template-enabled", "expression": template_condition()}]
    assert jobs["namespaceSelector"] == {"matchExpressions": [EXCLUDED]}


def test_the_namespace_webhook_selects_opted_in_namespaces_and_every_pod_there() -> None:
    hook = webhooks()[f"namespaced-pods.{PREFIX}"]
    assert "objectSelector" not in hook and "matchConditions" not in hook
    assert hook["namespaceSelector"] == {"matchLabels": {ENABLE: "1"}, "matchExpressions": [EXCLUDED]}
    assert hook["rules"] == webhooks()[f"pods.{PREFIX}"]["rules"]
    # Evict mode claims places at admission whichever webhook lets the pod through.
    assert hook["sideEffects"] == "NoneOnDryRun"


def test_the_namespace_webhook_is_anded_with_the_users_namespace_selector() -> None:
    users = '{"matchLabels":{"team":"a"},"matchExpressions":[{"key":"tier","operator":"In","values":["x"]}]}'
    hooks = webhooks(jsons=(f"controller.webhook.namespaceSelector={users}",))
    tier = {"key": "tier", "operator": "In", "values": ["x"]}
    assert hooks[f"namespaced-pods.{PREFIX}"]["namespaceSelector"] == {
        "matchLabels": {ENABLE: "1", "team": "a"},
        "matchExpressions": [EXCLUDED, tier],
    }
    assert hooks[f"pods.{PREFIX}"]["namespaceSelector"] == {
        "matchLabels": {"team": "a"},
        "matchExpressions": [EXCLUDED, tier],
    }


@pytest.mark.parametrize(
    ("names", "listed"),
    [
        pytest.param("{straggler}", "'straggler'", id="one"),
        pytest.param("{straggler,peer.example.com}", "'straggler', 'peer.example.com'", id="two"),
    ],
)
def test_the_scheduler_webhook_and_the_controllers_names(names: str, listed: str) -> None:
    sets = (f"controller.webhook.schedulerNames={names}",)
    hook = webhooks(*sets)[f"scheduler-pods.{PREFIX}"]
    assert "objectSelector" not in hook
    assert hook["matchConditions"] == [
        {
            "name": "scheduler-named",
            "expression": f"has(object.spec.schedulerName) && object.spec.schedulerName in [{listed}]",
        }
    ]
    assert hook["namespaceSelector"] == {"matchExpressions": [EXCLUDED]}
    assert hook["sideEffects"] == "NoneOnDryRun"
    controller = named(render(*sets), "Deployment", CONTROLLER)
    settings = parse_settings([], values(controller))
    assert settings.inject.scheduler_names == tuple(names.strip("{}").split(","))


def test_no_scheduler_names_no_setting() -> None:
    assert "STAGGER_SCHEDULER_NAMES" not in values(named(render(), "Deployment", CONTROLLER))


def test_every_webhook_shares_the_rest() -> None:
    def rest(hook: Doc) -> dict[str, Any]:
        service = {k: v for k, v in hook["clientConfig"]["service"].items() if k != "path"}
        own = ("name", "rules", "clientConfig", "sideEffects", "objectSelector", "matchConditions")
        return {
            **{k: v for k, v in hook.items() if k not in own and k != "namespaceSelector"},
            "service": service,
            "caBundle": hook["clientConfig"]["caBundle"],
            "exclusions": hook["namespaceSelector"]["matchExpressions"],
        }

    hooks = list(
        webhooks(
            "controller.webhook.schedulerNames={straggler}", "controller.webhook.timeoutSeconds=5"
        ).values()
    )
    assert len(hooks) == 4
    first = rest(hooks[0])
    assert first["timeoutSeconds"] == 5 and first["reinvocationPolicy"] == "IfNeeded"
    assert all(rest(hook) == first for hook in hooks)


def test_the_prefix_names_everything() -> None:
    other = "stagger.example.com"
    hooks = webhooks(f"prefix={other}", "controller.webhook.schedulerNames={straggler}")
    assert list(hooks) == [
        f"{kind}.{other}" for kind in ("pods", "jobs", "namespaced-pods", "scheduler-pods")
    ]
    assert hooks[f"jobs.{other}"]["matchConditions"][0]["expression"] == template_condition(f"{other}/enable")
    assert hooks[f"namespaced-pods.{other}"]["namespaceSelector"]["matchLabels"] == {f"{other}/enable": "1"}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        pytest.param(
            ("controller.webhook.schedulerNames={default-scheduler}",), "schedulerNames/0", id="default"
        ),
        pytest.param(("controller.webhook.schedulerNames={Straggler}",), "schedulerNames/0", id="not-a-name"),
        pytest.param(("controller.webhook.schedulerNames={a,a}",), "schedulerNames", id="repeated"),
        pytest.param(("controller.webhook.schedulerNames=straggler",), "schedulerNames", id="not-a-list"),
        pytest.param(("controller.webhook.namespaceOptIn=maybe",), "namespaceOptIn", id="not-a-bool"),
    ],
)
def test_bad_values_are_refused(sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(*sets)
