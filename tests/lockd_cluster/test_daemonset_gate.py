"""waitForDaemonSets in cluster mode, over HTTP against the API emulator: lockd watches the cluster's
DaemonSets (only while its node policy waits for them) and waits for every DaemonSet that should run on
its node, with no pod there yet or with one not Ready; a DaemonSet whose nodeSelector or taints keep it
off the node is not waited for; a missing pod is waited for at most --daemonset-wait, then counted.
And countAllStarting counts a crash-looping pod."""

from __future__ import annotations

from typing import Any

from lockd.appstate import view_of
from sim.emulator.server import ApiServer
from stagger.kube import DAEMONSETS, NODES, PODS, RestClient
from tests.lockd_cluster.conftest import NODE, ClusterLockd, make_node, make_pod, patch_status, set_ready
from tests.metrics import by_label
from tests.policies import limit_policy
from tests.waiting import eventually

GATE = limit_policy(5, extra="  waitForDaemonSets: true\n")


async def make_daemonset(
    kube: RestClient, name: str, *, namespace: str = "kube-system", **template_spec: Any
) -> dict[str, Any]:
    labels = {"app": name}
    return await kube.create(
        DAEMONSETS,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": name, "image": f"example/{name}:1"}], **template_spec},
                },
            },
        },
        namespace=namespace,
    )


async def make_daemon_pod(kube: RestClient, daemonset: dict[str, Any], name: str) -> dict[str, Any]:
    """The DaemonSet's pod on this node, as its controller makes it (owned by the DaemonSet's uid)."""
    meta = daemonset["metadata"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "agent", "image": "example/agent:1"}]},
    }
    return await kube.create(PODS, pod, namespace=meta["namespace"])


async def reason(lockd: ClusterLockd, pod: dict[str, Any]) -> str:
    answer = await lockd.lock(pod)
    body = await answer.json()
    assert answer.status == 423, body
    return str(body["reason"])


async def test_waits_for_a_daemonset_with_no_pod_here_then_for_its_pod_to_be_ready(start_lockd, kube) -> None:
    await make_node(kube, labels={"role": "worker"})
    agent = await make_daemonset(kube, "agent")
    await make_daemonset(kube, "gpu-driver", nodeSelector={"accelerator": "gpu"})
    await make_daemonset(
        kube, "edge-proxy", namespace="default", tolerations=[{"key": "edge", "operator": "Exists"}]
    )
    app = await make_pod(kube, "app")
    lockd = await start_lockd(GATE)

    async def names_missing_agent() -> bool:
        return "kube-system/agent (no pod on this node yet)" in await reason(lockd, app)

    await eventually(names_missing_agent, what="the 423 to name the DaemonSet with no pod here")
    said = await reason(lockd, app)
    # Selected DaemonSets with no pod here are both named; the one whose nodeSelector excludes the node is not.
    assert said == (
        "waiting for this node's DaemonSets: default/edge-proxy (no pod on this node yet), "
        "kube-system/agent (no pod on this node yet) (waitForDaemonSets)"
    )
    assert "gpu-driver" not in said
    # /status says the same for the waiter.
    assert (await lockd.status())["queue"][0]["reason"] == said

    # Its pod comes, not Ready yet: now the pod is waited for.
    agent_pod = await make_daemon_pod(kube, agent, "agent-x")
    edge = await kube.get(DAEMONSETS, name="edge-proxy", namespace="default")
    edge_pod = await make_daemon_pod(kube, edge, "edge-proxy-x")

    async def names_unready_agent() -> bool:
        return "kube-system/agent (pod not Ready)" in await reason(lockd, app)

    await eventually(names_unready_agent, what="the 423 to say the DaemonSet's pod is not Ready")
    await set_ready(kube, agent_pod)
    await set_ready(kube, edge_pod)
    assert (await lockd.lock(app, wait="10")).status == 200


async def test_a_daemonset_the_node_does_not_take_is_not_waited_for(start_lockd, kube) -> None:
    """nodeSelector, required node affinity and an untolerated taint each keep a DaemonSet off the node;
    the Node changing (a taint removed, a label added) brings it back, and lockd follows the Node."""
    await make_node(kube)
    await kube.patch(
        NODES,
        name=NODE,
        patch={"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}},
    )
    await make_daemonset(kube, "gpu-driver", nodeSelector={"accelerator": "gpu"})
    await make_daemonset(
        kube,
        "zonal",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    )
    await make_daemonset(kube, "logs")  # tolerates only what the DaemonSet controller adds
    app = await make_pod(kube, "app")
    lockd = await start_lockd(GATE)

    async def listed() -> bool:
        view = view_of(lockd.app)
        informer = view.daemonsets.informer if view is not None else None
        return informer is not None and len(informer.store) == 3

    await eventually(listed, what="lockd to list the DaemonSets")
    assert (await lockd.lock(app)).status == 200

    # The taint goes: the DaemonSet without a toleration for it should run here now.
    second = await make_pod(kube, "second")
    await kube.patch(NODES, name=NODE, patch={"spec": {"taints": None}})

    async def names_logs() -> bool:
        return "kube-system/logs (no pod on this node yet)" in await reason(lockd, second)

    await eventually(names_logs, what="lockd to follow the Node's taints")
    # A label selects the zonal one too.
    await kube.patch(NODES, name=NODE, patch={"metadata": {"labels": {"zone": "a"}}})

    async def names_zonal() -> bool:
        return "kube-system/zonal (no pod on this node yet)" in await reason(lockd, second)

    await eventually(names_zonal, what="lockd to follow the Node's labels")
    assert "gpu-driver" not in await reason(lockd, second)


async def test_the_bound_grants_after_it_and_counts_it(start_lockd, kube) -> None:
    await make_node(kube)
    await make_daemonset(kube, "never-made")
    app = await make_pod(kube, "app")
    lockd = await start_lockd(GATE, daemonset_wait=1.5)

    async def named() -> bool:
        return "kube-system/never-made (no pod on this node yet)" in await reason(lockd, app)

    await eventually(named, what="the 423 to name the DaemonSet")
    # The long poll is answered once --daemonset-wait has passed since lockd first saw the pod missing.
    granted = await lockd.lock(app, wait="10")
    assert granted.status == 200, await granted.json()
    page = await (await lockd.client.get("/metrics")).text()
    assert by_label(page, "stagger_lockd_daemonset_waits_given_up_total", "why") == {"podMissing": 1.0}
    # Given up once: the next pod does not wait for it again.
    other = await make_pod(kube, "other")
    assert (await lockd.lock(other)).status == 200
    page = await (await lockd.client.get("/metrics")).text()
    assert by_label(page, "stagger_lockd_daemonset_waits_given_up_total", "why") == {"podMissing": 1.0}


async def test_lockds_own_daemonset_and_daemonsets_being_deleted_are_not_waited_for(
    start_lockd, kube
) -> None:
    await make_node(kube)
    own = await make_daemonset(kube, "lockd", namespace="default")
    await make_daemon_pod(kube, own, "lockd-x")  # never Ready: it is lockd itself
    going = await make_daemonset(kube, "going")
    going_pod = await make_daemon_pod(kube, going, "going-x")
    # Deleting with a finalizer keeps the DaemonSet (with its deletionTimestamp) and its pod.
    await kube.patch(
        DAEMONSETS, name="going", namespace="kube-system", patch={"metadata": {"finalizers": ["x/y"]}}
    )
    await kube.delete(DAEMONSETS, name="going", namespace="kube-system")
    app = await make_pod(kube, "app")
    lockd = await start_lockd(GATE, own_pod=("default", "lockd-x"))

    async def listed() -> bool:
        view = view_of(lockd.app)
        informer = view.daemonsets.informer if view is not None else None
        return informer is not None and informer.synced.is_set()

    await eventually(listed, what="lockd to list the DaemonSets")
    deleting = (await kube.get(DAEMONSETS, name="going", namespace="kube-system"))["metadata"]
    assert deleting.get("deletionTimestamp") and (
        await kube.get(PODS, name=going_pod["metadata"]["name"], namespace="kube-system")
    )
    assert (await lockd.lock(app)).status == 200


async def test_daemonsets_are_watched_only_while_the_node_policy_waits_for_them(
    start_lockd, kube, api: ApiServer
) -> None:
    await make_node(kube)
    await make_daemonset(kube, "agent")
    app = await make_pod(kube, "app")
    lockd = await start_lockd(limit_policy(5))
    assert (await lockd.lock(app)).status == 200

    def daemonset_requests() -> int:
        return sum(count for (_, resource), count in api.request_counts.items() if resource == "daemonsets")

    view = view_of(lockd.app)
    assert view is not None and view.daemonsets.informer is None
    assert daemonset_requests() == 1  # the test's own create

    # A reload that waits for DaemonSets starts the watch ...
    lockd.policy_path.write_text(GATE)

    async def reloaded() -> bool:
        return view.daemonsets.wanted

    await eventually(reloaded, what="the reloaded policy")
    second = await make_pod(kube, "second")

    async def gated() -> bool:
        return "kube-system/agent (no pod on this node yet)" in await reason(lockd, second)

    await eventually(gated, what="the reloaded policy to wait for the DaemonSet")
    assert daemonset_requests() >= 3  # list and watch

    # ... and one that no longer does stops it.
    lockd.policy_path.write_text(limit_policy(5))

    async def stopped() -> bool:
        return view.daemonsets.informer is None and (await lockd.lock(second)).status == 200

    await eventually(stopped, what="the DaemonSet watch to stop")

    async def two_watches() -> bool:
        return api.watch_count == 2

    await eventually(two_watches, what="only the pods and Node watches to stay open")


CRASH_LOOP = {
    "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container app"}
}


RECOVERING = {
    "name": "app",
    "ready": False,
    "restartCount": 4,
    "image": "example/app:1",
    "imageID": "example/app@sha256:1",
    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
}


async def crash_loop(kube: RestClient, pod: dict[str, Any]) -> None:
    """The pod ran (it was Ready, its slot is over) and its container now crash-loops."""
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{**RECOVERING, "state": CRASH_LOOP}],
    }
    await patch_status(kube, pod, status=status)


async def test_count_all_starting_counts_a_crash_looping_pod(start_lockd, kube) -> None:
    await make_node(kube)
    first = await make_pod(kube, "first")
    waiting = await make_pod(kube, "waiting")
    lockd = await start_lockd(limit_policy(1, extra="  countAllStarting: true\n"))
    assert (await lockd.lock(first)).status == 200
    await set_ready(kube, first)

    async def slot_over() -> bool:
        return (await lockd.status())["slots"] == []

    await eventually(slot_over, what="the first pod's slot to end at Ready")
    await crash_loop(kube, first)

    async def counted() -> bool:
        answer = await lockd.lock(waiting)
        return answer.status == 423 and "CrashLoopBackOff" in (await answer.json())["reason"]

    await eventually(counted, what="the crash-looping pod to count")
    assert await reason(lockd, waiting) == (
        "1 of 1 slots in use: 0 granted + 1 other pods starting (in CrashLoopBackOff: default/first) "
        "(maxConcurrent, countAllStarting)"
    )
    # Running and ready again: no longer starting.
    running = {"running": {"startedAt": "2026-11-21T10:00:00Z"}}
    await kube.patch(
        PODS,
        name="first",
        namespace="default",
        subresource="status",
        patch={
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{**RECOVERING, "ready": True, "state": running}],
            }
        },
    )
    assert (await lockd.lock(waiting, wait="10")).status == 200
