"""Attack: someone takes one node's lockd token (root on the node reads it from lockd's pod) and uses it to
change a pod on another node, or to change a pod's images (code execution in that pod), or to write
Events that claim to come from another node. RBAC cannot stop it: lockd's ClusterRole must grant
`pods: patch` cluster-wide, since RBAC cannot limit a DaemonSet to its own node.

Bound: the chart's ValidatingAdmissionPolicy (templates/lockd-vap.yaml, `lockd.confineWrites`, on by
default) lets lockd's token patch only pods bound to the node in its token's
`authentication.kubernetes.io/node-name` claim, and change only `<prefix>/` annotations and labels
there; it may create only Events about a pod, reported by stagger-lockd from its own node. A token
without the claim may write nothing. Each refusal is a 403 naming the rule and changes nothing.

Why it holds: the API server puts the claim into a token bound to a pod scheduled on a node
(ServiceAccountTokenPodNodeInfo), from the pod's spec.nodeName, and signs it: the holder cannot change
it. Checked here on the real kube-apiserver (`make control-plane`) with the chart's own objects as Helm
renders them against it, two Node objects, and lockd's token as the TokenRequest API makes it for lockd's
pod on node A; lockd's own grant patch (lockd.clusterwatch.ClusterFinisher) and Events
(stagger.events.EventRecorder) still pass. Not covered: which pod an Event is about (an Event names its
pod, not the pod's node, and a policy cannot read other objects)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest

from lockd import ledger
from lockd.clusterwatch import EVENT_COMPONENT, ClusterFinisher, NodeView
from sim.controlplane.launcher import ControlPlane
from stagger import events, throttles
from stagger.informer import InformerSettings
from stagger.kube import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    SERVICEACCOUNTS,
    ApiError,
    ClusterConfig,
    PatchType,
    Resource,
    RestClient,
    kubeconfig_config,
)
from stagger.names import Names
from tests.chart.helm import PREFIX, Doc, render_release

pytestmark = pytest.mark.controlplane

PAUSE = "registry.k8s.io/pause:3.10"  # never pulled: no kubelet runs
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
# The chart's objects this test applies (the rest need a kubelet or serve nothing here).
APPLIED: dict[str, Resource] = {
    "ServiceAccount": SERVICEACCOUNTS,
    "ClusterRole": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
    ),
    "ClusterRoleBinding": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    "ValidatingAdmissionPolicy": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        namespaced=False,
    ),
    "ValidatingAdmissionPolicyBinding": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        namespaced=False,
    ),
}
POLICY_ACTIVE_WITHIN = 60.0
"""The API server enforces a new policy once its informer has it (about a second)."""


@dataclass(frozen=True)
class World:
    kubeconfig: Path  # the cluster's administrator
    server: str
    ca: str
    namespace: str  # the release's: lockd's ServiceAccount and its pod
    apps: str  # the workload pods'
    node_a: str
    node_b: str
    policy: str
    lockd_token: str  # bound to lockd's pod on node A
    unbound_token: str  # lockd's ServiceAccount, no pod: no node-name claim
    pod_a: dict[str, Any]
    pod_b: dict[str, Any]


@contextlib.asynccontextmanager
async def api(config: ClusterConfig) -> AsyncIterator[RestClient]:
    async with aiohttp.ClientSession() as session:
        yield RestClient(session=session, config=config, request_timeout=30.0)


def lockd_config(world: World, token: str) -> ClusterConfig:
    return ClusterConfig(server=world.server, token=token, ca_data=world.ca)


def workload_pod(name: str, node: str) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "web", f"{PREFIX}/enable": "1", f"{PREFIX}/staggered": "1"},
            "annotations": {"team": "web"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": PAUSE, "imagePullPolicy": "IfNotPresent"}],
        },
    }


async def token_for(admin: RestClient, *, namespace: str, account: str, pod: Doc | None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = SERVICEACCOUNTS.path(namespace=namespace, name=account, subresource="token")
    answer = await admin.request("POST", path, body=body)
    return str(answer["status"]["token"])


async def wait_until(probe: Any, *, within: float, what: str) -> Any:
    """Polls `probe` (a coroutine function) until it returns something true: state the API server brings
    about in its own time, with no event to wait on."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(0.2)


async def policy_checked(admin: RestClient, name: str) -> Doc:
    """The policy once the API server has type-checked it (its status says so)."""
    resource = APPLIED["ValidatingAdmissionPolicy"]

    async def checked() -> Doc | None:
        policy = await admin.get(resource, name=name)
        observed = (policy.get("status") or {}).get("observedGeneration")
        return policy if observed == policy["metadata"]["generation"] else None

    policy: Doc = await wait_until(checked, within=POLICY_ACTIVE_WITHIN, what=f"the type check of {name}")
    return policy


async def set_up(plane: ControlPlane) -> tuple[World, list[tuple[Resource, str | None, str]]]:
    suffix = uuid.uuid4().hex[:6]
    release, namespace, apps = f"lw{suffix}", f"lw-{suffix}", f"lw-apps-{suffix}"
    node_a, node_b = f"lw-{suffix}-a", f"lw-{suffix}-b"
    created: list[tuple[Resource, str | None, str]] = []
    docs = await asyncio.to_thread(
        render_release, release=release, namespace=namespace, kubeconfig=plane.kubeconfig
    )
    async with api(kubeconfig_config(plane.kubeconfig)) as admin:
        for name in (namespace, apps):
            await admin.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
            created.append((NAMESPACES, None, name))
        for node in (node_a, node_b):
            # Tainted so that the session's other tests' pods are never scheduled here.
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node},
                "spec": {"taints": [{"key": "stagger.test/no-kubelet", "effect": "NoSchedule"}]},
            }
            await admin.create(NODES, body)
            created.append((NODES, None, node))
        # lockd's ServiceAccount, ClusterRole and its binding, and the policy with its binding.
        lockds = [
            doc for doc in docs if doc["kind"] in APPLIED and doc["metadata"]["name"].endswith("-lockd")
        ]
        lockds += [doc for doc in docs if doc["kind"].startswith("ValidatingAdmissionPolicy")]
        kinds = [doc["kind"] for doc in lockds]
        assert sorted(kinds) == sorted(APPLIED), f"the chart rendered against the cluster has {kinds}"
        for doc in lockds:
            resource = APPLIED[doc["kind"]]
            target = namespace if resource.namespaced else None
            await admin.create(resource, doc, namespace=target)
            created.append((resource, target, doc["metadata"]["name"]))
        policy = next(doc for doc in lockds if doc["kind"] == "ValidatingAdmissionPolicy")
        account = next(doc for doc in lockds if doc["kind"] == "ServiceAccount")["metadata"]["name"]
        # lockd's pod on node A (as the DaemonSet makes it), and a workload pod on each node.
        lockd_pod = workload_pod("lockd", node_a)
        lockd_pod["spec"]["serviceAccountName"] = account
        lockd_pod = await admin.create(PODS, lockd_pod, namespace=namespace)
        await wait_until(
            lambda: has_default_account(admin, apps), within=60, what=f"the default ServiceAccount of {apps}"
        )
        pod_a = await admin.create(PODS, workload_pod("web-a", node_a), namespace=apps)
        pod_b = await admin.create(PODS, workload_pod("web-b", node_b), namespace=apps)
        checked = await policy_checked(admin, policy["metadata"]["name"])
        world = World(
            kubeconfig=plane.kubeconfig,
            server=plane.server,
            ca=plane.pki.ca.cert.read_text(),
            namespace=namespace,
            apps=apps,
            node_a=node_a,
            node_b=node_b,
            policy=policy["metadata"]["name"],
            lockd_token=await token_for(admin, namespace=namespace, account=account, pod=lockd_pod),
            unbound_token=await token_for(admin, namespace=namespace, account=account, pod=None),
            pod_a=pod_a,
            pod_b=pod_b,
        )
    # A type error in an expression would make every write by lockd fail (failurePolicy Fail).
    assert not (checked.get("status") or {}).get("typeChecking", {}).get("expressionWarnings"), checked[
        "status"
    ]
    await wait_until(lambda: refused_probe(world), within=POLICY_ACTIVE_WITHIN, what="the policy to refuse")
    return world, created


async def has_default_account(admin: RestClient, namespace: str) -> bool:
    """The ServiceAccount controller makes it in a new namespace; a pod cannot be created before."""
    try:
        await admin.get(SERVICEACCOUNTS, name="default", namespace=namespace)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


async def refused_probe(world: World) -> bool:
    """An Event no lockd writes (another reason), with lockd's token: refused once the policy is active.
    Without the policy it is created, and the wait times out."""
    event = events.pod_event(
        pod=events.PodRef(world.apps, "web-a", world.pod_a["metadata"]["uid"]),
        reason="Probe",
        message="is the policy active?",
        component=EVENT_COMPONENT,
        host=world.node_a,
        wall=time.time(),
    )
    async with api(lockd_config(world, world.lockd_token)) as client:
        try:
            await client.create(EVENTS, event, namespace=world.apps)
        except ApiError as err:
            return err.status == 403
    return False


async def tear_down(plane: ControlPlane, created: list[tuple[Resource, str | None, str]]) -> None:
    async with api(kubeconfig_config(plane.kubeconfig)) as admin:
        for resource, namespace, name in reversed(created):
            with contextlib.suppress(ApiError):
                await admin.delete(resource, name=name, namespace=namespace)


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane) -> Iterator[World]:
    created: list[tuple[Resource, str | None, str]] = []
    try:
        built, created = asyncio.run(set_up(control_plane))
        yield built
    finally:
        asyncio.run(tear_down(control_plane, created))


async def test_lockds_token_names_its_node(world: World) -> None:
    async with api(lockd_config(world, world.lockd_token)) as client:
        review = await client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    user = review["status"]["userInfo"]
    assert user["username"].startswith(f"system:serviceaccount:{world.namespace}:")
    assert user["extra"][NODE_NAME_CLAIM] == [world.node_a]


async def test_lockds_own_grant_patch_and_events_pass(world: World) -> None:
    """What lockd writes for a grant on its own node: the patch of lockd.clusterwatch.ClusterFinisher, through
    lockd's own informer of its node's pods, and a StaggerGranted Event through its EventRecorder."""
    names = Names(prefix=PREFIX)
    async with api(lockd_config(world, world.lockd_token)) as client:
        view = NodeView(
            client=client, node=world.node_a, names=names, own_pod=None, informer_settings=InformerSettings()
        )
        informer = asyncio.create_task(view.pods.run())
        try:
            await asyncio.wait_for(view.pods.synced.wait(), timeout=30)
            finisher = ClusterFinisher(client=client, view=view, groups=None, names=names)
            now = time.monotonic()
            uid = world.pod_a["metadata"]["uid"]
            slot = ledger.Slot(world.apps, "web-a", uid, now, time.time(), now + 60, pending=True)
            verdict = await finisher.finish(slot, wall=time.time())
            assert verdict == throttles.ALLOWED, verdict.reason

            recorder = events.EventRecorder(client=client)
            writer = asyncio.create_task(recorder.run())
            recorder.record(
                events.pod_event(
                    pod=events.PodRef(world.apps, "web-a", uid),
                    reason="StaggerGranted",
                    message=f"start-up slot granted on node {world.node_a}",
                    component=EVENT_COMPONENT,
                    host=world.node_a,
                    wall=time.time(),
                )
            )
            await recorder.drain(within=30)
            writer.cancel()
            assert (recorder.written, recorder.dropped) == (1, 0)
        finally:
            informer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await informer
        pod = await client.get(PODS, name="web-a", namespace=world.apps)
    assert names.granted_at_annotation in pod["metadata"]["annotations"]
    assert names.staggered_label not in pod["metadata"]["labels"]
    assert pod["metadata"]["labels"]["app"] == "web"


def grant_patch(wall: float) -> Doc:
    return {"metadata": {"annotations": {f"{PREFIX}/granted-at": f"{wall:.0f}"}}}


def lockd_event(world: World, *, host: str, reason: str = "StaggerGranted", kind: str = "Pod") -> Doc:
    event = events.pod_event(
        pod=events.PodRef(world.apps, "web-a", world.pod_a["metadata"]["uid"]),
        reason=reason,
        message="forged",
        component=EVENT_COMPONENT,
        host=host,
        wall=time.time(),
    )
    event["involvedObject"]["kind"] = kind
    return event


# (what, token: lockd/unbound, pod or None for an Event, body, patch type, the refusal's words)
REFUSED = [
    pytest.param(
        "lockd",
        "web-b",
        grant_patch(1.7e9),
        "merge",
        "which is not bound to that node",
        id="pod-on-another-node",
    ),
    pytest.param(
        "lockd",
        "web-a",
        {"spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}},
        "strategic",
        "may not change a pod's spec",
        id="image-on-own-node",
    ),
    pytest.param(
        "lockd",
        "web-a",
        {"metadata": {"finalizers": ["example.com/never"]}},
        "merge",
        "may not change a pod's spec, owner references or finalizers",
        id="finalizer",
    ),
    pytest.param(
        "lockd",
        "web-a",
        {"metadata": {"labels": {"app": "other"}}},
        "merge",
        f"may change only annotations and labels under {PREFIX}/",
        id="foreign-label",
    ),
    pytest.param(
        "lockd",
        "web-a",
        {"metadata": {"annotations": {"team": None}}},
        "merge",
        f"may change only annotations and labels under {PREFIX}/",
        id="foreign-annotation-removed",
    ),
    pytest.param(
        "unbound", "web-a", grant_patch(1.7e9), "merge", "carries no node-name claim", id="token-without-node"
    ),
    pytest.param("lockd", None, {"host": "b"}, "", "must name its own node", id="event-from-another-node"),
    pytest.param(
        "lockd", None, {"host": "a", "reason": "Killing"}, "", "Stagger* reason", id="event-not-lockds"
    ),
    pytest.param("lockd", None, {"host": "a", "kind": "Node"}, "", "about a pod", id="event-about-a-node"),
    pytest.param("unbound", None, {"host": "a"}, "", "carries no node-name claim", id="event-without-node"),
]


@pytest.mark.parametrize(("token", "pod", "body", "patch_type", "words"), REFUSED)
async def test_writes_beyond_its_node_and_keys_are_refused(
    world: World, token: str, pod: str | None, body: Doc, patch_type: str, words: str
) -> None:
    chosen = world.lockd_token if token == "lockd" else world.unbound_token
    async with (
        api(lockd_config(world, chosen)) as client,
        api(kubeconfig_config(world.kubeconfig)) as reader,
    ):
        before = await reader.list(EVENTS, namespace=world.apps) if pod is None else None
        target = await reader.get(PODS, name=pod, namespace=world.apps) if pod is not None else None
        with pytest.raises(ApiError) as refused:
            if pod is not None:
                await client.patch(
                    PODS, name=pod, namespace=world.apps, patch=body, patch_type=cast(PatchType, patch_type)
                )
            else:
                host = world.node_a if body["host"] == "a" else world.node_b
                event = lockd_event(
                    world,
                    host=host,
                    reason=body.get("reason", "StaggerGranted"),
                    kind=body.get("kind", "Pod"),
                )
                await client.create(EVENTS, event, namespace=world.apps)
        # Nothing changed.
        if target is not None:
            after = await reader.get(PODS, name=pod or "", namespace=world.apps)
            assert after["metadata"]["resourceVersion"] == target["metadata"]["resourceVersion"]
        if before is not None:
            after_list = await reader.list(EVENTS, namespace=world.apps)
            assert len(after_list["items"]) == len(before["items"])
    assert refused.value.status == 403, refused.value
    assert f"ValidatingAdmissionPolicy '{world.policy}'" in refused.value.message
    assert words in refused.value.message
