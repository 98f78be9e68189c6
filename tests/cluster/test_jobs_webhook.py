"""The controller's Jobs webhook as the simulated cluster registers it (`ControllerProcess.
webhook_configuration`): an enabled Job in an evict-mode policy is created with the DisruptionTarget Ignore
rule (`POST /mutate/jobs`), a Job without the enable label is left alone. On the emulator and on the real
control plane, whose kube-apiserver calls the controller over HTTPS (`backend`)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.cluster.scenario import StaggerConfig
from sim.cluster.simcluster import SimCluster
from stagger.kube import JOBS
from stagger.names import Names
from tests.backends import Backend
from tests.cluster.helpers import cluster_settings

pytestmark = pytest.mark.e2e

POLICIES = """\
staggeringPolicies:
- name: batch
  labelSelector: {matchLabels: {app: batch}}
  pacer: {linear: {step: 1, maxStagger: 4}}
  mode: evict
nodePolicies:
- name: all
  throttleConfig:
    maxConcurrent: {value: 4}
"""
ENABLE = Names().enable_label
IGNORE_RULE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def job(name: str, namespace: str, *, enabled: bool) -> dict[str, Any]:
    labels = {"app": "batch", **({ENABLE: "1"} if enabled else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,  # admission is what is tested: no pod needed
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "work:1"}]},
            },
        },
    }


async def test_an_enabled_job_gets_the_disruption_ignore_rule_and_others_are_left_alone(
    backend: Backend,
) -> None:
    ns = backend.namespace
    async with SimCluster(
        api=backend.api,
        settings=cluster_settings(
            nodes=1,
            cores=2,
            time_scale=10,
            stagger=StaggerConfig(enabled=True, host_port=0, policies=POLICIES, controller=True),
        ),
    ) as cluster:
        created = await cluster.client.create(JOBS, job("held", ns, enabled=True), namespace=ns)
        spec = created["spec"]
        assert (spec.get("podFailurePolicy") or {}).get("rules") == [IGNORE_RULE], (
            spec,
            cluster.controller.log_tail() if cluster.controller else "",
        )
        assert spec["podReplacementPolicy"] == "Failed"
        assert spec["template"]["metadata"]["annotations"][Names().evictable_annotation] == "1"

        plain = await cluster.client.create(JOBS, job("plain", ns, enabled=False), namespace=ns)
        assert "podFailurePolicy" not in plain["spec"]
        assert plain["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"
