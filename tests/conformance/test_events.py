"""Events through both APIs: pkg/apis/core/validation/events.go (v1.36) ValidateEventCreate /
ValidateEventUpdate / legacyValidateEvent, on the internal core Event (so the errors name kind "Event"
without a group, and use core field names), and the event strategy's create-on-update."""

from __future__ import annotations

from typing import Any

from tests.conformance.support import Conn, invalid_message

STAMP = "2024-01-01T00:00:00.000000Z"
QUALIFIED_NAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def regarding(kube: Conn, **extra: str) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": kube.ns, **extra}


def new_event(kube: Conn, name: str, **fields: Any) -> dict[str, Any]:
    """A valid events.k8s.io/v1 Event, with `fields` changed (None removes one)."""
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": STAMP,
        "regarding": regarding(kube),
        "reason": "Staggered",
        "action": "Held",
        "reportingController": "stagger.dev/webhook",
        "reportingInstance": "webhook-0",
        "type": "Normal",
        "note": "waiting for a slot",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


async def test_an_events_k8s_io_event_needs_an_event_time(kube: Conn) -> None:
    reply = await kube.post(kube.new_events, new_event(kube, "e", eventTime=None))
    assert reply.status == 422
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'Event "e" is invalid: eventTime: Required value',
        "reason": "Invalid",
        "details": {
            "name": "e",
            "kind": "Event",
            "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"}],
        },
        "code": 422,
    }


async def test_an_event_with_event_time_needs_its_reporter_action_and_reason(kube: Conn) -> None:
    bare = {"metadata": {"name": "e"}, "eventTime": STAMP, "regarding": regarding(kube)}
    reply = await kube.post(kube.new_events, bare)
    assert reply.status == 422
    assert reply.causes == [
        ("FieldValueRequired", "reportingController", "Required value"),
        ("FieldValueInvalid", "reportingController", 'Invalid value: "": name part must be non-empty'),
        ("FieldValueInvalid", "reportingController", f'Invalid value: "": {QUALIFIED_NAME}'),
        ("FieldValueRequired", "reportingInstance", "Required value"),
        ("FieldValueRequired", "action", "Required value"),
        ("FieldValueRequired", "reason", "Required value"),
        ("FieldValueInvalid", "type", 'Invalid value: "": has invalid value: '),
    ]


async def test_core_events_with_event_time_follow_the_same_rules_under_their_own_names(kube: Conn) -> None:
    body = {
        "metadata": {"name": "c"},
        "eventTime": STAMP,
        "involvedObject": regarding(kube),
        "reason": "R",
        "message": "m",
        "type": "Whatever",  # core/v1 does not check the type
    }
    reply = await kube.post(kube.events, body)
    assert reply.status == 422
    assert reply.body["message"] == invalid_message(
        "Event",
        "c",
        "reportingComponent: Required value",
        'reportingComponent: Invalid value: "": name part must be non-empty',
        f'reportingComponent: Invalid value: "": {QUALIFIED_NAME}',
        "reportingInstance: Required value",
        "action: Required value",
    )
    fixed = {**body, "reportingComponent": "stagger", "reportingInstance": "i", "action": "Held"}
    assert (await kube.post(kube.events, fixed)).status == 201


async def test_legacy_core_events_need_a_matching_namespace_only(kube: Conn) -> None:
    mismatched = {
        "metadata": {"name": "c"},
        "involvedObject": regarding(kube, namespace="other"),
        "reason": "R",
    }
    reply = await kube.post(kube.events, mismatched)
    assert reply.status == 422
    assert reply.body["message"] == invalid_message(
        "Event", "c", 'involvedObject.namespace: Invalid value: "other": does not match event.namespace'
    )
    assert (
        await kube.post(kube.events, {"metadata": {"name": "bare"}, "involvedObject": regarding(kube)})
    ).status == 201


async def test_the_strict_rules_of_events_k8s_io(kube: Conn) -> None:
    body = new_event(
        kube,
        "e",
        regarding=regarding(kube, namespace=""),
        reason="R" * 130,
        action="A" * 130,
        reportingController="bad ctl!",
        reportingInstance="i" * 130,
        type="Odd",
        note="n" * 1100,
        deprecatedCount=3,
        deprecatedSource={"component": "x"},
        deprecatedFirstTimestamp="2024-01-01T00:00:00Z",
        series={"count": 1, "lastObservedTime": STAMP},
    )
    reply = await kube.post(kube.new_events, body)
    assert reply.status == 422
    assert [(reason, field) for reason, field, _ in reply.causes] == [
        ("FieldValueInvalid", "involvedObject.namespace"),
        ("FieldValueInvalid", "reportingController"),
        ("FieldValueInvalid", "reportingInstance"),
        ("FieldValueInvalid", "action"),
        ("FieldValueInvalid", "reason"),
        ("FieldValueInvalid", "message"),
        ("FieldValueInvalid", "series.count"),
        ("FieldValueInvalid", "type"),
        ("FieldValueInvalid", "firstTimestamp"),
        ("FieldValueInvalid", "count"),
        ("FieldValueInvalid", "source"),
    ]
    assert reply.causes[2][2] == 'Invalid value: "": can have at most 128 characters'
    assert reply.causes[5][2] == 'Invalid value: "": can have at most 1024 characters'
    assert reply.causes[7][2] == 'Invalid value: "": has invalid value: Odd'


async def test_events_k8s_io_checks_the_name_and_series(kube: Conn) -> None:
    reply = await kube.post(kube.new_events, new_event(kube, "Bad_Name", series={"count": 3}))
    assert reply.status == 422
    assert [(reason, field) for reason, field, _ in reply.causes] == [
        ("FieldValueInvalid", "metadata.name"),
        ("FieldValueRequired", "series.lastObservedTime"),
    ]


async def test_events_k8s_io_fields_are_immutable_core_ones_are_not(kube: Conn) -> None:
    await kube.created(kube.new_events, new_event(kube, "e"))
    reply = await kube.patch(f"{kube.new_events}/e", {"reason": "Other", "note": "changed"})
    assert reply.status == 422
    # ValidateEventUpdate checks reason twice. The message lists each distinct error once; before v1.37 the
    # causes kept the repeat, since v1.37 the declarative validation step filters it out of them too.
    assert reply.body["message"] == invalid_message(
        "Event",
        "e",
        'reason: Invalid value: "Other": field is immutable',
        'message: Invalid value: "changed": field is immutable',
    )
    repeat = [] if kube.minor >= 37 else ["reason"]
    assert [field for _, field, _ in reply.causes] == ["reason", "message", *repeat]
    legacy = await kube.patch(f"{kube.events}/e", {"reason": "Other", "count": 2})
    assert legacy.status == 200, legacy.body
    assert (legacy.body["reason"], legacy.body["count"]) == ("Other", 2)


async def test_put_creates_a_missing_event(kube: Conn) -> None:
    body = {"metadata": {"name": "c9"}, "involvedObject": regarding(kube), "reason": "R"}
    reply = await kube.put(f"{kube.events}/c9", body)
    assert reply.status == 201, reply.body
    again = await kube.put(f"{kube.events}/c9", {**body, "message": "m"})
    assert again.status == 200
    assert again.body["message"] == "m"


async def test_a_missing_events_k8s_io_event_is_named_by_its_resource(kube: Conn) -> None:
    reply = await kube.get(f"{kube.new_events}/none")
    assert reply.status == 404
    assert reply.body["message"] == 'events.events.k8s.io "none" not found'
    assert reply.body["details"] == {"name": "none", "group": "events.k8s.io", "kind": "events"}
