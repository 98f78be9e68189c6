"""coordination.k8s.io/v1 Leases: ValidateLeaseSpec (pkg/apis/coordination/validation/validation.go v1.36),
the strategy (pkg/registry/coordination/lease/strategy.go: no unconditional updates, create on update,
strategy/preferredHolder dropped while the CoordinatedLeaderElection gate is off) and MicroTime's
fixed format (k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go: RFC3339Micro)."""

from __future__ import annotations

import pytest

from tests.conformance.support import Conn, invalid_message


def lease(name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


async def test_lease_duration_must_be_positive(kube: Conn) -> None:
    reply = await kube.post(
        kube.leases, lease("l", holderIdentity="me", leaseDurationSeconds=0, leaseTransitions=-1)
    )
    assert reply.status == 422
    assert reply.body["message"] == invalid_message(
        "Lease.coordination.k8s.io",
        "l",
        "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
        "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
    )
    assert reply.body["details"]["kind"] == "Lease"
    assert reply.body["details"]["group"] == "coordination.k8s.io"
    updated = await kube.post(kube.leases, lease("ok", leaseDurationSeconds=5))
    assert updated.status == 201
    changed = await kube.patch(f"{kube.leases}/ok", {"spec": {"leaseDurationSeconds": -3}})
    assert changed.status == 422
    assert changed.causes == [
        ("FieldValueInvalid", "spec.leaseDurationSeconds", "Invalid value: -3: must be greater than 0")
    ]


async def test_unconditional_update_is_refused_naming_the_resource(kube: Conn) -> None:
    await kube.created(kube.leases, lease("l", leaseDurationSeconds=5))
    reply = await kube.put(f"{kube.leases}/l", lease("l", leaseDurationSeconds=6))
    assert reply.status == 422
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update",
        "reason": "Invalid",
        "details": {
            "name": "l",
            "group": "coordination.k8s.io",
            "kind": "leases",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0: must be specified for an update",
                    "field": "metadata.resourceVersion",
                }
            ],
        },
        "code": 422,
    }


async def test_put_creates_a_missing_lease(kube: Conn) -> None:
    reply = await kube.put(
        f"{kube.leases}/fresh", lease("fresh", holderIdentity="me", leaseDurationSeconds=5)
    )
    assert reply.status == 201, reply.body
    assert reply.body["spec"] == {"holderIdentity": "me", "leaseDurationSeconds": 5}
    assert (await kube.ok(f"{kube.leases}/fresh"))["metadata"]["uid"] == reply.body["metadata"]["uid"]


async def test_coordinated_election_fields_are_dropped(kube: Conn) -> None:
    created = await kube.created(
        kube.leases, lease("l", leaseDurationSeconds=5, strategy="Bogus", preferredHolder="x")
    )
    assert created["spec"] == {"leaseDurationSeconds": 5}


@pytest.mark.parametrize(
    ("stamp", "problem"),
    [
        ("2024-01-01T00:00:00Z", 'cannot parse "Z" as ".000000"'),
        ("2024-01-01T00:00:00.123Z", 'cannot parse ".123Z" as ".000000"'),
    ],
)
async def test_micro_times_need_six_fraction_digits(kube: Conn, stamp: str, problem: str) -> None:
    reply = await kube.post(kube.leases, lease("l", renewTime=stamp))
    assert reply.status == 400
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"] == (
        f'Lease in version "v1" cannot be handled as a Lease: parsing time "{stamp}" as '
        f'"2006-01-02T15:04:05.000000Z07:00": {problem}'
    )
    good = await kube.post(kube.leases, lease("good", renewTime="2024-01-01T00:00:00.123456Z"))
    assert good.status == 201
    assert good.body["spec"]["renewTime"] == "2024-01-01T00:00:00.123456Z"
