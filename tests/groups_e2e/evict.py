"""Helpers of the evict-mode end-to-end tests: a scenario's staggering policy changed, an object created
with the API server's admission warnings read back, the controller's Events on pods, and the checks every
evict-mode run shares (each held pod evicted once, each replacement let through against its owner's
reservation, never held again)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import aiohttp
import yaml

from sim.cluster.backend import ApiBackend
from sim.cluster.measure.grouprun import GroupRun
from sim.cluster.measure.groupwatch import PodTrace
from sim.cluster.scenario import Scenario
from stagger.kube import Resource, RestClient
from stagger.names import Names
from stagger.objects import Obj
from stagger.timestamps import parse_rfc3339

NAMES = Names()
EVENTS = Resource("", "v1", "events", "Event")


def with_policy(scenario: Scenario, **fields: Any) -> Scenario:
    """The scenario with these fields set on every staggering policy (`mode="evict"`, `hold="stub"`)."""
    policies = yaml.safe_load(scenario.stagger.policies)
    for policy in policies["staggeringPolicies"]:
        policy.update(fields)
    text = yaml.safe_dump(policies, sort_keys=False)
    return replace(scenario, stagger=replace(scenario.stagger, policies=text))


async def create_with_warnings(
    api: ApiBackend, session: aiohttp.ClientSession, resource: Resource, body: Obj, *, namespace: str
) -> tuple[Obj, list[str]]:
    """Create `body` and return it with the warnings admission sent back (the `Warning` headers:
    `299 - "text"`), which stagger's webhooks use to say why a pod or Job is not held."""
    config = api.cluster_config()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    url = config.server.rstrip("/") + resource.path(namespace=namespace)
    async with session.post(
        url,
        data=json.dumps(body),
        headers=headers,
        ssl=config.ssl_context(),
        timeout=aiohttp.ClientTimeout(total=30),
    ) as response:
        text = await response.text()
        assert response.status == 201, f"{response.status}: {text[:500]}"
        warnings = [_warning_text(value) for value in response.headers.getall("Warning", [])]
        created: Obj = json.loads(text)
    return created, warnings


def _warning_text(header: str) -> str:
    # 299 - "text" (RFC 7234; the API server escapes quotes and backslashes in the text)
    _, _, rest = header.partition(" - ")
    rest = rest.strip()
    if rest.startswith('"') and rest.endswith('"'):
        rest = rest[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return rest


async def events_by_pod(client: RestClient, namespaces: Iterable[str], *, reason: str) -> Counter[str]:
    """How many times an Event of `reason` was recorded on each pod (by uid), series counts included."""
    counts: Counter[str] = Counter()
    for namespace in namespaces:
        listed = await client.list(EVENTS, namespace=namespace)
        for event in listed.get("items") or []:
            if event.get("reason") != reason:
                continue
            uid = str((event.get("involvedObject") or {}).get("uid") or "")
            series = event.get("series") or {}
            counts[uid] += max(int(event.get("count") or 1), int(series.get("count") or 1))
    return counts


def seconds(text: str | None) -> float:
    value = parse_rfc3339(text or "")
    assert value is not None, f"not a timestamp: {text!r}"
    return value


def replacements(run: GroupRun) -> list[PodTrace]:
    """The pods let through against their owner's reservation: a ticket and the chain's held-since."""
    return [trace for trace in run.admitted() if trace.held_since is not None]


def check_every_hold_released_once(run: GroupRun) -> None:
    """Every pod held at admission was evicted (deleted, the DisruptionTarget condition on it), and each
    eviction's reservation went to one replacement of its owner: let through at admission against it, or,
    when the replacement came before the reservation and was held, released against it (grant basis
    `ownerReservation`: that replacement's own eviction then makes the reservation for the next). So
    holds = evictions = replacements let through + replacements released, by the pods and by the
    controller's counters."""
    held = run.held()
    for trace in held:
        assert trace.deleted_at is not None, f"held and never evicted: {trace}"
        assert trace.ticket is None and trace.granted_at is None, f"held and started: {trace}"
        # A hold of its own, not a chain's hold carried over from an evicted pod's reservation.
        assert trace.held_since is not None and seconds(trace.held_since) >= seconds(trace.created) - 1, trace
    replaced = replacements(run)
    held_by_owner = Counter(trace.owner for trace in held)
    replaced_by_owner = Counter(trace.owner for trace in replaced)
    evicted = run.metric("stagger_controller_evictions_total", result="evicted")
    holds = run.metric("stagger_controller_evict_admissions_total", outcome="hold")
    reserved = run.metric("stagger_controller_evict_admissions_total", basis="reserved")
    released = run.metric("stagger_controller_grants_total", basis="ownerReservation")
    counts = (
        f"{len(held)} pods held, {evicted:g} evicted, {reserved:g} let through against their owner's "
        f"reservation ({len(replaced)} carrying a chain's held-since), {released:g} held replacements "
        f"released against it, {holds:g} holds counted: each eviction must leave its owner a reservation for "
        "the replacement (the controller logs 'reservation none' when it did not)"
    )
    # By owner: every hold is answered by a replacement let through, or by one released while held (which
    # is itself a hold of that owner).
    assert all(replaced_by_owner[owner] <= count for owner, count in held_by_owner.items()), counts
    assert sum(held_by_owner.values()) == len(replaced) + released, (
        f"{counts}; by owner {held_by_owner} vs {replaced_by_owner}"
    )
    assert evicted == holds == reserved + released == len(held), counts
    refused = {
        result: run.metric("stagger_controller_evictions_total", result=result)
        for result in ("throttled", "gone", "error")
    }
    assert not any(refused.values()), refused


def has_its_hold(trace: PodTrace, hold: str) -> bool:
    """The pod as admission held it: the nodeSelector no node has, or the blocking stub init container
    first (and then scheduled on a node, as the stub keeps its place)."""
    if hold == "nodeSelector":
        return trace.node_selector.get(NAMES.hold_node_label) == "true" and not trace.node
    return trace.init_containers[:1] == ("stagger-hold",) and bool(trace.node)


def never_held(trace: PodTrace) -> bool:
    """Neither held at admission nor evicted: no hold annotation, no hold nodeSelector or stub."""
    return (
        trace.hold is None
        and NAMES.hold_node_label not in trace.node_selector
        and "stagger-hold" not in trace.init_containers
        and not trace.disrupted
    )
