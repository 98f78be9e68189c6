"""Jobs: pkg/apis/batch/validation/validation.go (v1.36) validateJobSpec, validatePodFailurePolicy(Rule),
ValidateJobSpecUpdate / validatePodTemplateUpdate with the job strategy's options
(pkg/registry/batch/job/strategy.go), and the defaults (pkg/apis/batch/v1/defaults.go SetDefaults_Job,
SetDefaults_PodFailurePolicyOnPodConditionsPattern)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.support import PAUSE, STRATEGIC, Conn, invalid_message


def job(name: str, *, restart: str | None = "Never", **spec: Any) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": PAUSE}]}
    if restart is not None:
        pod_spec["restartPolicy"] = restart
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": pod_spec}, **spec},
    }


def ignore_disruptions() -> dict[str, Any]:
    return {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


async def test_pod_failure_policy_needs_restart_policy_never(kube: Conn) -> None:
    reply = await kube.post(kube.jobs, job("j", restart="OnFailure", podFailurePolicy=ignore_disruptions()))
    assert reply.status == 422
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'Job.batch "j" is invalid: spec.template.spec.restartPolicy: Invalid value: "OnFailure": '
        'only "Never" is supported when podFailurePolicy is specified',
        "reason": "Invalid",
        "details": {
            "name": "j",
            "group": "batch",
            "kind": "Job",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": 'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified',
                    "field": "spec.template.spec.restartPolicy",
                }
            ],
        },
        "code": 422,
    }


async def test_pod_failure_policy_rules_are_checked(kube: Conn) -> None:
    rules = [
        {"action": "Bogus"},
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [0, 3, 2, 2]}},
        {
            "action": "Ignore",
            "onExitCodes": {"operator": "X", "values": []},
            "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}],
        },
        {},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0], "containerName": "nope"}},
        {"action": "FailJob", "onPodConditions": [{"type": "bad type!", "status": "True"}]},
    ]
    reply = await kube.post(kube.jobs, job("j", podFailurePolicy={"rules": rules}))
    assert reply.status == 422
    assert reply.causes == [
        (
            "FieldValueNotSupported",
            "spec.podFailurePolicy.rules[0].action",
            'Unsupported value: "Bogus": supported values: "Count", "FailIndex", "FailJob", "Ignore"',
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[0]",
            "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[1].action",
            'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set',
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[1].onExitCodes.values[0]",
            "Invalid value: 0: must not be 0 for the In operator",
        ),
        ("FieldValueDuplicate", "spec.podFailurePolicy.rules[1].onExitCodes.values[3]", "Duplicate value: 2"),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[1].onExitCodes.values",
            "Invalid value: [0,3,2,2]: must be ordered",
        ),
        (
            "FieldValueNotSupported",
            "spec.podFailurePolicy.rules[2].onExitCodes.operator",
            'Unsupported value: "X": supported values: "In", "NotIn"',
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[2].onExitCodes.values",
            "Invalid value: []: at least one value is required",
        ),
        (
            "FieldValueNotSupported",
            "spec.podFailurePolicy.rules[2].onPodConditions[0].status",
            'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"',
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[2]",
            "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported",
        ),
        (
            "FieldValueRequired",
            "spec.podFailurePolicy.rules[3].action",
            'Required value: valid values: ["Count" "FailIndex" "FailJob" "Ignore"]',
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[3]",
            "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[4].onExitCodes.containerName",
            'Invalid value: "nope": must be one of the container or initContainer names in the pod template',
        ),
        (
            "FieldValueInvalid",
            "spec.podFailurePolicy.rules[5].onPodConditions[0].type",
            "Invalid value: \"bad type!\": name part must consist of alphanumeric characters, '-', '_' or "
            "'.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
    ]


async def test_fail_index_needs_backoff_limit_per_index(kube: Conn) -> None:
    policy = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}]}
    indexed = {"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 1}
    created = await kube.post(kube.jobs, job("j", podFailurePolicy=policy, **indexed))
    assert created.status == 201, created.body


@pytest.mark.parametrize(
    ("spec", "errors"),
    [
        (
            {"parallelism": -1, "completions": -2, "backoffLimit": -1, "activeDeadlineSeconds": -1},
            [
                "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
                "spec.completions: Invalid value: -2: must be greater than or equal to 0",
                "spec.activeDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
            ],
        ),
        (
            {"completionMode": "Weird"},
            ['spec.completionMode: Unsupported value: "Weird": supported values: "NonIndexed", "Indexed"'],
        ),
        (
            {"completionMode": "Indexed", "completions": None, "parallelism": 2},
            ["spec.completions: Required value: when completion mode is Indexed"],
        ),
        (
            {"backoffLimitPerIndex": 1, "maxFailedIndexes": 1},
            [
                "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
                "spec.maxFailedIndexes: Invalid value: 1: requires indexed completion mode",
            ],
        ),
        (
            {"maxFailedIndexes": 1, "completionMode": "Indexed", "completions": 2},
            ["spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"],
        ),
        (
            {"podReplacementPolicy": "Sometimes"},
            [
                'spec.podReplacementPolicy: Unsupported value: "Sometimes": supported values: "Failed", '
                '"TerminatingOrFailed"'
            ],
        ),
        (
            {"manualSelector": True, "selector": {"matchLabels": {"a": "b"}}},
            [
                "spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`"
            ],
        ),
    ],
    ids=[
        "negative",
        "mode",
        "indexed-completions",
        "per-index",
        "max-failed",
        "replacement",
        "manual-selector",
    ],
)
async def test_job_spec_rules(kube: Conn, spec: dict[str, Any], errors: list[str]) -> None:
    body = job("j", **spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    reply = await kube.post(kube.jobs, body)
    assert reply.status == 422
    assert reply.body["message"] == invalid_message("Job.batch", "j", *errors)


@pytest.mark.parametrize(
    ("restart", "errors"),
    [
        (None, ['spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"']),
        ("Always", ['spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"']),
        (
            "Sometimes",
            [
                'spec.template.spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
                '"OnFailure", "Never"',
                'spec.template.spec.restartPolicy: Unsupported value: "Sometimes": supported values: "OnFailure", '
                '"Never"',
            ],
        ),
    ],
)
async def test_job_pods_never_restart_always(kube: Conn, restart: str | None, errors: list[str]) -> None:
    reply = await kube.post(kube.jobs, job("j", restart=restart))
    assert reply.status == 422
    assert reply.body["message"] == invalid_message("Job.batch", "j", *errors)


async def test_job_defaults(kube: Conn) -> None:
    created = await kube.created(kube.jobs, job("j", podFailurePolicy=ignore_disruptions()))
    spec, uid = created["spec"], created["metadata"]["uid"]
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}
    ]
    assert {
        k: spec[k] for k in ("completions", "parallelism", "backoffLimit", "completionMode", "suspend")
    } == {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "suspend": False,
    }
    assert (spec["manualSelector"], spec["podReplacementPolicy"]) == (False, "Failed")
    generated = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "j",
        "controller-uid": uid,
        "job-name": "j",
    }
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == generated
    assert created["metadata"]["labels"] == generated  # SetDefaults_Job: the template's labels
    assert created["status"] == {}


async def test_a_running_jobs_template_and_policies_are_immutable(kube: Conn) -> None:
    await kube.created(kube.jobs, job("j"))
    image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": f"{PAUSE}-2"}]}}}}
    reply = await kube.patch(f"{kube.jobs}/j", image, STRATEGIC)
    assert reply.status == 422
    message = reply.body["message"]
    # The real value is Go's internal struct; the emulator's is JSON. The rest is the same.
    assert message.startswith('Job.batch "j" is invalid: spec.template: Invalid value: {'), message
    assert message.endswith("}: field is immutable"), message
    assert [(reason, field) for reason, field, _ in reply.causes] == [("FieldValueInvalid", "spec.template")]
    labels = await kube.patch(
        f"{kube.jobs}/j", {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}, STRATEGIC
    )
    assert [(reason, field) for reason, field, _ in labels.causes] == [("FieldValueInvalid", "spec.template")]
    completions = await kube.patch(f"{kube.jobs}/j", {"spec": {"completions": 3}})
    assert completions.body["message"] == invalid_message(
        "Job.batch", "j", "spec.completions: Invalid value: 3: field is immutable"
    )
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}]}
    added = await kube.patch(f"{kube.jobs}/j", {"spec": {"podFailurePolicy": policy}})
    # The replacement policy defaulted without a failure policy no longer fits: reported by ValidateJob
    # and again by ValidateJobSpecUpdate (listed once in the message, and since v1.37 once in the causes).
    replacement = ("FieldValueNotSupported", "spec.podReplacementPolicy")
    repeat = [] if kube.minor >= 37 else [replacement]
    assert [(reason, field) for reason, field, _ in added.causes] == [
        replacement,
        *repeat,
        ("FieldValueInvalid", "spec.podFailurePolicy"),
    ]
    allowed = await kube.patch(f"{kube.jobs}/j", {"spec": {"parallelism": 3, "suspend": True}})
    assert allowed.status == 200, allowed.body


async def test_a_suspended_job_that_never_ran_may_change_scheduling_and_resources(kube: Conn) -> None:
    await kube.created(kube.jobs, job("j", suspend=True))
    change: dict[str, Any] = {
        "metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "schedulingGates": [{"name": "example.com/wait"}],
            "tolerations": [{"key": "t", "operator": "Exists"}],
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    # v1.34 had no MutablePodResourcesForSuspendedJobs: only the scheduling directives and the template's
    # labels and annotations could change, the rest of the template was immutable as a whole.
    before = kube.minor <= 34
    if before:
        whole = await kube.patch(f"{kube.jobs}/j", {"spec": {"template": change}}, STRATEGIC)
        assert [(reason, field) for reason, field, _ in whole.causes] == [
            ("FieldValueInvalid", "spec.template")
        ]
        del change["spec"]["containers"]
    reply = await kube.patch(f"{kube.jobs}/j", {"spec": {"template": change}}, STRATEGIC)
    assert reply.status == 200, reply.body
    pod_spec = reply.body["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"disk": "ssd"}
    if not before:
        assert pod_spec["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": f"{PAUSE}-2"}]}}}}
    refused = await kube.patch(f"{kube.jobs}/j", image, STRATEGIC)
    assert refused.status == 422
    where = "spec.template" if before else "spec.template.spec"
    assert refused.body["message"].startswith(f'Job.batch "j" is invalid: {where}: Invalid value: {{')
    assert [(reason, field) for reason, field, _ in refused.causes] == [("FieldValueInvalid", where)]
