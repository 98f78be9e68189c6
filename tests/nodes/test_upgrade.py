"""Upgrades of the session release on real nodes while a herd waits (issue 41): a 12-replica lock-mode
Deployment in the session's `mode-lock` group (exponential 1/3/3), 2 starts at a time per node, upgraded
once its first pod has started and the others are held:

- `helm upgrade` to a new image tag (tests/nodes/policies.py UPGRADE_IMAGE, the same image under a second
  name) and a stricter pacer for the group (exponential 1/2/12): the controller's Deployment and lockd's
  DaemonSet roll to the new image mid-herd;
- a lockd-only upgrade (a value of lockd's pods changed): its DaemonSet alone rolls, mid-herd.

Either way every pod ends Ready with no restart; none started without its slot (no fail-open: the init
client's termination message, lockd's `failed-open` annotation, the controller's `started-without-slot`
mark and Warning Event, docs/contracts.md "fail-open causes"); no node had more than its limit starting at
any sample; the group never had more pods started than the pacer allows for its Ready ones (the old
pacer's allowance, which bounds the stricter new one's too); every node's lockd was replaced while pods
still waited, and lockd's DaemonSet rolled one node at a time (in every sample of the lockd pods at most one
node without a Ready lockd). After the image upgrade the lockd and controller pods run the new image, the
controller injects it and reads the new pacer. The release is set back after each test.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kubectl_stagger.pods import proxy_path
from sim.realcluster.cluster import RealCluster
from stagger import pacers
from stagger.contracts.failopen import read_outcome
from stagger.names import Names
from stagger.policy import parse_policy_text
from tests.nodes.kube import Herd, Kube, Release, init_status, is_ready, restarts, wait_for, workload
from tests.nodes.policies import MODE_LABEL, NODE_LIMIT, POLICIES, UPGRADE_IMAGE
from webhook.failopens import EVENT_REASON, fail_open_of

logger = logging.getLogger(__name__)

REPLICAS = 12
INIT_CONTAINER = "stagger-wait"
GROUP_POLICY = "mode-lock"
# Sized so that pods still wait once every lockd has been replaced, and the last one starts well within the
# session's node maxWait (45 s, counted from each init client's start; past it a pod fails open by design):
# here the same herd took 22 s without an upgrade and 25-31 s through one, its first 3 pods started by then.
CPU_SECONDS = 1.5

# The upgraded policy: the lock-mode group paced 1, then 2 x the Ready ones, until all 12 are Ready. At every
# count of Ready pods it allows no more than the session's 1/3/3 does, so the old allowance bounds the whole
# herd, whichever pacer granted each pod.
UPGRADED_POLICIES: dict[str, Any] = copy.deepcopy(POLICIES)
for _policy in UPGRADED_POLICIES["staggeringPolicies"]:
    if _policy["name"] == GROUP_POLICY:
        _policy["pacer"] = {"exponential": {"minInitial": 1, "multiplier": 2, "maxStagger": REPLICAS}}
OLD_PACER, NEW_PACER = (
    next(p.pacer for p in parse_policy_text(json.dumps(file)).staggering_policies if p.name == GROUP_POLICY)
    for file in (POLICIES, UPGRADED_POLICIES)
)


def allowance(ready: int) -> int:
    """Pods of the group that may have started with `ready` Ready, under the session's pacer."""
    limit = pacers.allowance(OLD_PACER, ready=ready)
    return 1 << 30 if limit is None else limit


@pytest.fixture
def restored(stagger: Release, real_cluster: RealCluster) -> Iterator[Release]:
    """The session release, set back to its image and values after the test (which upgrades it)."""
    image, values = stagger.image, copy.deepcopy(stagger.values)
    try:
        yield stagger
    finally:
        stagger.image = image
        stagger.upgrade(values)
        stagger.wait_ready(nodes=len(real_cluster.nodes), timeout=180)


def _lockd_uids(release: Release) -> dict[str, str]:
    """Each node's lockd pod uid (pods being deleted left out)."""
    return {
        p["spec"]["nodeName"]: p["metadata"]["uid"]
        for p in release.kube.pods(release.namespace, release.selector("lockd"))
        if not p["metadata"].get("deletionTimestamp")
    }


def _live_uids(release: Release, component: str) -> set[str]:
    """The uids of the component's pods, those being deleted (a roll's old ones, going) left out."""
    return {
        p["metadata"]["uid"]
        for p in release.kube.pods(release.namespace, release.selector(component))
        if not p["metadata"].get("deletionTimestamp")
    }


def _herd_through(
    upgrade: Callable[[], None], *, release: Release, kube: Kube, namespace: str, nodes: int
) -> tuple[Herd, Herd]:
    """The herd started, `upgrade` run once its first pod has started and others are held, and the herd
    watched until every pod is Ready; (the herd, the lockd pods watched the same way)."""
    before = _lockd_uids(release)
    began = time.monotonic()
    with (
        Herd(kube, namespace, "app=web") as herd,
        Herd(kube, release.namespace, release.selector("lockd")) as lockds,
    ):
        kube.apply(
            workload(
                "web", namespace, replicas=REPLICAS, cpu_seconds=CPU_SECONDS, labels={MODE_LABEL: "lock"}
            )
        )

        def first_started() -> bool | None:
            last = herd.samples[-1] if herd.samples else None
            return True if last is not None and last.started >= 1 and herd.held else None

        wait_for("the herd's first pod started and others held", first_started, timeout=90)
        logger.info("upgrading at %.1fs: %s", time.monotonic() - began, herd.samples[-1])
        upgrade()
        logger.info("upgraded at %.1fs: %s", time.monotonic() - began, herd.samples[-1])

        def replaced() -> bool | None:
            now = _lockd_uids(release)
            fresh = len(now) == nodes and not set(now.values()) & set(before.values())
            last = lockds.samples[-1] if lockds.samples else None
            return True if fresh and last is not None and last.ready == nodes else None

        wait_for("a new lockd Ready on every node", replaced, timeout=180)
        # Pods not started yet waited through every node's lockd roll: the upgrade was under load.
        waiting = REPLICAS - herd.samples[-1].started
        logger.info(
            "%d of %d pods still waiting once every lockd was replaced, at %.1fs",
            waiting, REPLICAS, time.monotonic() - began,
        )  # fmt: skip
        assert waiting > 0, f"the herd started whole before the upgrade ended: {herd.samples[-1]}"
        herd.wait_ready(REPLICAS, timeout=300)
    logger.info("all Ready at %.1fs; %s", time.monotonic() - began, _timeline(herd))
    return herd, lockds


def _timeline(herd: Herd) -> str:
    """(seconds, started, Ready) at each change of either, for a failure's or the log's reader."""
    points, last = [], None
    for sample in herd.samples:
        if (sample.started, sample.ready) != last:
            last = (sample.started, sample.ready)
            points.append(f"{sample.at:.1f}s {sample.started}/{sample.ready}")
    return ", ".join(points)


def _fail_opens(pods: list[dict[str, Any]], *, prefix: str) -> dict[str, str]:
    """The pods that started without their slot, and why: as the controller finds them (the init client's
    outcome, lockd's `failed-open`), or marked by it (`started-without-slot`)."""
    names = Names(prefix=prefix)
    found = {}
    for pod in pods:
        annotations = pod["metadata"].get("annotations") or {}
        marks = [
            annotations.get(names.started_without_slot_annotation),
            annotations.get(names.failed_open_annotation),
        ]
        unmarked = fail_open_of(pod, names=names, init_container=INIT_CONTAINER)
        if unmarked is not None:
            marks.append(f"{unmarked.cause}: {unmarked.reason}")
        elif any(marks):  # the init client's own line on why, and when its pod was created
            terminated = init_status(pod, INIT_CONTAINER).get("state", {}).get("terminated") or {}
            outcome = read_outcome(terminated.get("message"))
            reason = outcome.get("reason", "") if outcome is not None else ""
            marks.append(f"{reason} (created {pod['metadata']['creationTimestamp']})")
        if any(marks):
            found[pod["metadata"]["name"]] = "; ".join(m for m in marks if m)
    return found


def _check_guarantees(herd: Herd, lockds: Herd, *, release: Release, kube: Kube, nodes: int) -> None:
    pods = kube.pods(herd.namespace, "app=web")
    assert len(pods) == REPLICAS and all(is_ready(p) for p in pods), [p["status"] for p in pods]
    assert all(restarts(p) == 0 for p in pods), {p["metadata"]["name"]: restarts(p) for p in pods}
    assert herd.held, "no pod was held"
    failed_open = _fail_opens(pods, prefix=release.prefix)
    assert not failed_open, f"{failed_open}\n{release.group_diagnostics()}"
    events = kube.get(f"/api/v1/namespaces/{herd.namespace}/events")["items"]
    warned = [e["message"] for e in events if e.get("reason") == EVENT_REASON]
    assert not warned, warned
    assert not herd.over_node_limit(NODE_LIMIT), herd.over_node_limit(NODE_LIMIT)[:5]
    over = [s for s in herd.samples if s.started > allowance(s.ready)]
    assert not over, f"{over[:5]}\n{release.group_diagnostics()}"
    # One node at a time: never both (every) node's lockd unready; and the roll was seen (one was).
    fewest = min(s.ready for s in lockds.samples)
    assert fewest == nodes - 1, [(s.at, s.ready) for s in lockds.samples]


def _controller_status(release: Release) -> dict[str, Any]:
    """The controller leader's /status, through the API server's pod proxy."""
    selector = f"{release.selector('controller')},{release.prefix}/leader=1"
    leader = next(p for p in release.kube.pods(release.namespace, selector) if is_ready(p))
    path = proxy_path(
        namespace=release.namespace, name=leader["metadata"]["name"], scheme="https", port=9443, path="status"
    )
    return release.kube.get(path)


def test_an_upgrade_to_a_new_image_and_pacer_mid_herd(
    restored: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    nodes = len(real_cluster.nodes)
    values = {**copy.deepcopy(restored.values), "policies": UPGRADED_POLICIES}
    controllers = _live_uids(restored, "controller")

    def upgrade() -> None:
        restored.image = UPGRADE_IMAGE
        restored.upgrade(values)

    namespace = kube.namespace("upgrade-image")
    try:
        herd, lockds = _herd_through(upgrade, release=restored, kube=kube, namespace=namespace, nodes=nodes)
        _check_guarantees(herd, lockds, release=restored, kube=kube, nodes=nodes)
    finally:
        kube.delete_namespace(namespace)
    for component in ("lockd", "controller"):
        for pod in kube.pods(restored.namespace, restored.selector(component)):
            if not pod["metadata"].get("deletionTimestamp"):
                assert pod["spec"]["containers"][0]["image"] == UPGRADE_IMAGE, pod["spec"]["containers"][0]
    now = _live_uids(restored, "controller")
    assert not now & controllers, "the controller's Deployment did not roll"
    status = _controller_status(restored)
    assert status["controller"]["image"] == UPGRADE_IMAGE, status["controller"]
    rows = {row["name"]: row for row in status["policy"]["staggeringPolicies"]}
    assert rows[GROUP_POLICY]["pacer"] == pacers.name(NEW_PACER), rows[GROUP_POLICY]


def test_a_lockd_only_upgrade_rolls_one_node_at_a_time_mid_herd(
    restored: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    nodes = len(real_cluster.nodes)
    values = copy.deepcopy(restored.values)
    values.setdefault("lockd", {})["podAnnotations"] = {"stagger-test/upgrade": "lockd-only"}
    controllers = _live_uids(restored, "controller")
    namespace = kube.namespace("upgrade-lockd")
    try:
        herd, lockds = _herd_through(
            lambda: restored.upgrade(values), release=restored, kube=kube, namespace=namespace, nodes=nodes
        )
        _check_guarantees(herd, lockds, release=restored, kube=kube, nodes=nodes)
    finally:
        kube.delete_namespace(namespace)
    for pod in kube.pods(restored.namespace, restored.selector("lockd")):
        if not pod["metadata"].get("deletionTimestamp"):
            assert pod["metadata"]["annotations"].get("stagger-test/upgrade") == "lockd-only", pod["metadata"]
    # Only lockd's value changed: the controller's replicas are the same pods.
    now = _live_uids(restored, "controller")
    assert now == controllers, (controllers, now)
