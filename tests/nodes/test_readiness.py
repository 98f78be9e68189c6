"""A slot ends when its pod is ready, not when the kubelet next probes it (issue 38), on a real node that starts
one pod at a time (node policy `one-slot`): 4 pods of the test bed's workload, 1 CPU-second each, with
their readiness probe's period at Kubernetes' default (10 s), at 1 s and at 30 s.

lockd runs each held pod's httpGet probe itself every 500 ms and ends the slot when it passes, then writes
`probed-ready-at` on the pod, which makes the kubelet probe at once: with the default period the 4 pods are
all Ready within 1.3x the time they take with `periodSeconds: 1` (before: 50 s against 14 s, 3.6x). A pod
with an `exec` probe, or with none, still ends its slot at its Ready condition (no `probed-ready-at`). The
figures are printed (`pytest -s`) for the report.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.nodes.kube import PREFIX, Herd, Kube, workload

PODS = 4
PROBED = f"{PREFIX}/probed-ready-at"
EXEC_PROBE = {"exec": {"command": ["/workload", "--check", "http://127.0.0.1:8080/readyz"]}}


def herd(
    kube: Kube, node: str, *, name: str, probe: dict[str, Any] | None, pods: int = PODS
) -> tuple[float, Herd]:
    """`pods` pods of the workload on `node` with `probe` as their readiness probe (None: none): the seconds
    from their Deployment's creation to all Ready, and what the watch saw."""
    namespace = kube.namespace(f"ready-{name}")
    deployment = workload(name, namespace, replicas=pods, cpu_seconds=1.0)
    spec = deployment["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    container = spec["containers"][0]
    container.pop("readinessProbe")
    if probe is not None:
        container["readinessProbe"] = probe
    try:
        with Herd(kube, namespace, f"app={name}") as watched:
            kube.apply(deployment)
            watched.wait_ready(pods, timeout=240)
        return next(s.at for s in watched.samples if s.ready >= pods), watched
    finally:
        kube.delete_namespace(namespace)


def http_probe(period: int | None) -> dict[str, Any]:
    probe: dict[str, Any] = {"httpGet": {"path": "/readyz", "port": 8080}}
    if period is not None:
        probe["periodSeconds"] = period
    return probe


def test_with_the_default_period_the_pods_are_ready_within_1_3x_of_a_1s_period(
    one_slot_node: tuple[str, str], kube: Kube
) -> None:
    node, _ = one_slot_node
    took: dict[str, float] = {}
    for label, period in (("period-1s", 1), ("period-default", None), ("period-30s", 30)):
        took[label], watched = herd(kube, node, name=label, probe=http_probe(period))
        assert watched.max_starting_per_node() <= 1, [s for s in watched.samples if s.starting_per_node]
        # Each slot ended by lockd's probe (the kubelet's Ready came after it).
        assert all(PROBED in (p["metadata"].get("annotations") or {}) for p in watched.pods.values())
    print(
        f"\n{PODS} pods of 1 CPU-second, one at a time, all Ready after: "
        + ", ".join(f"{label} {seconds:.1f} s" for label, seconds in took.items())
    )
    assert took["period-default"] <= 1.3 * took["period-1s"], took
    assert took["period-30s"] <= 1.3 * took["period-1s"], took


@pytest.mark.parametrize(
    "probe",
    [pytest.param(EXEC_PROBE, id="exec-probe"), pytest.param(None, id="no-probe")],
)
def test_pods_lockd_does_not_probe_end_their_slots_at_ready(
    one_slot_node: tuple[str, str], kube: Kube, probe: dict[str, Any] | None
) -> None:
    node, _ = one_slot_node
    name = "exec" if probe is not None else "none"
    _, watched = herd(kube, node, name=name, probe=probe, pods=2)
    assert watched.max_starting_per_node() <= 1, [s for s in watched.samples if s.starting_per_node]
    for pod in watched.pods.values():
        annotations = pod["metadata"].get("annotations") or {}
        assert f"{PREFIX}/node-slot" in annotations and PROBED not in annotations, annotations
