"""The real controller's stand-in set-up (`sim.cluster.launchers.controllerproc`), without starting it: the
MutatingWebhookConfiguration (pods, and Jobs for evict mode) and each replica's command line
(`--leader-url` to the leader's proxy with several replicas, verified with the run's CA)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.cluster.launchers import controllerproc
from sim.cluster.launchers.controllerproc import ControllerProcess, ControllerSpec
from stagger.kube import ApiError
from stagger.names import Names


def spec(tmp_path: Path, *, replicas: int = 1) -> ControllerSpec:
    return ControllerSpec(
        work_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        policies=tmp_path / "policies.yaml",
        lockd_port=9400,
        image="stagger:test",
        names=Names(prefix="example.com"),
        replicas=replicas,
    )


def test_the_webhook_configuration_sends_enabled_pods_and_jobs(tmp_path: Path) -> None:
    controller = ControllerProcess(spec(tmp_path))
    controller.replicas[0].port = 8443
    config = controller.webhook_configuration()
    pods, jobs = config["webhooks"]
    assert pods["name"] == "pods.stagger.sim" and jobs["name"] == "jobs.stagger.sim"
    assert pods["clientConfig"]["url"] == "https://127.0.0.1:8443/mutate/pods"
    assert jobs["clientConfig"]["url"] == "https://127.0.0.1:8443/mutate/jobs"
    assert jobs["rules"] == [
        {
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["jobs"],
            "scope": "Namespaced",
        }
    ]
    assert pods["rules"][0]["apiGroups"] == [""] and pods["rules"][0]["resources"] == ["pods"]
    same = ("objectSelector", "failurePolicy", "timeoutSeconds", "sideEffects", "reinvocationPolicy")
    assert (
        {k: jobs[k] for k in same}
        == {k: pods[k] for k in same}
        == {
            "objectSelector": {"matchLabels": {"example.com/enable": "1"}},
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "sideEffects": "None",
            "reinvocationPolicy": "IfNeeded",
        }
    )
    assert jobs["clientConfig"]["caBundle"] == pods["clientConfig"]["caBundle"]


def test_one_replica_is_its_own_leader(tmp_path: Path) -> None:
    [replica] = ControllerProcess(spec(tmp_path)).replicas
    assert "--no-leader-elect" in replica.argv and "--leader-url" not in replica.argv


class _NoLease:
    async def get(self, *_args: Any, **_kwargs: Any) -> Any:
        raise ApiError(status=404, reason="NotFound", message="", body={})


async def test_replicas_forward_to_the_leaders_proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    async def fake_start(self: Any, *, within: float) -> None:
        started.append(list(self.argv))

    async def ready_at_once(self: Any, *, within: float) -> None:
        return None

    monkeypatch.setattr(controllerproc._Replica, "start", fake_start)
    monkeypatch.setattr(controllerproc._Replica, "wait_ready", ready_at_once)  # nothing was started
    controller = ControllerProcess(spec(tmp_path, replicas=2))
    try:
        await controller.start(client=_NoLease(), within=1)  # type: ignore[arg-type]
        assert len(started) == 2
        leader_url = controller.url
        assert leader_url.startswith("https://127.0.0.1:") and leader_url != "https://127.0.0.1:0"
        for i, argv in enumerate(started):
            assert argv[argv.index("--identity") + 1] == f"sim-controller-{i}"
            assert argv[argv.index("--leader-url") + 1] == leader_url
            assert argv[argv.index("--leader-ca-file") + 1] == str(controller.ca_file)
    finally:
        await controller.stop(grace=1)
