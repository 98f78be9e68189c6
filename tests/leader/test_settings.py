"""The controller's leader election options (webhook.settings): client-go's default timings, the Lease name,
the namespace and identity from the downward API variables (POD_NAMESPACE, POD_NAME) unless set, an
identity of host name plus random suffix otherwise, the pod to label, and each bad value or combination
as one error naming its flag."""

from __future__ import annotations

import socket

import pytest

from stagger.options import grouped
from webhook.leader import Timings
from webhook.settings import Settings, SettingsError, parse_settings

REQUIRED = ["--image", "stagger:1", "--insecure-http"]


def test_defaults_are_client_gos() -> None:
    settings = parse_settings(REQUIRED, {})
    assert settings.leader.lease_name == "stagger-controller"
    assert settings.leader.lease_namespace == "default"
    assert (settings.leader.lease_duration, settings.leader.renew_deadline, settings.leader.retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert (
        Timings(settings.leader.lease_duration, settings.leader.renew_deadline, settings.leader.retry_period)
        == Timings()
    )
    assert settings.cluster.pod_name is settings.cluster.pod_namespace is None


def test_identity_without_pod_name_is_the_host_name_plus_a_random_suffix() -> None:
    first, second = parse_settings(REQUIRED, {}).leader.identity, parse_settings(REQUIRED, {}).leader.identity
    host = socket.gethostname()
    assert first.startswith(f"{host}_") and second.startswith(f"{host}_") and first != second
    # Random, so not part of a Settings' equality.
    assert grouped(Settings, dict(image="x")) == grouped(Settings, dict(image="x"))


def test_the_downward_api_variables() -> None:
    settings = parse_settings(
        REQUIRED, {"POD_NAME": "stagger-controller-7d9-abcde", "POD_NAMESPACE": "stagger"}
    )
    assert settings.leader.identity == settings.cluster.pod_name == "stagger-controller-7d9-abcde"
    assert settings.leader.lease_namespace == settings.cluster.pod_namespace == "stagger"


def test_flags_and_stagger_variables_win() -> None:
    env = {
        "POD_NAME": "pod-1",
        "POD_NAMESPACE": "ns-1",
        "STAGGER_IDENTITY": "id-2",
        "STAGGER_LEASE_NAMESPACE": "ns-2",
        "STAGGER_LEASE_NAME": "lease-2",
        "STAGGER_LEASE_DURATION": "30s",
        "STAGGER_RENEW_DEADLINE": "20s",
        "STAGGER_RETRY_PERIOD": "4s",
    }
    settings = parse_settings(REQUIRED, env)
    assert (settings.leader.identity, settings.leader.lease_namespace, settings.leader.lease_name) == (
        "id-2",
        "ns-2",
        "lease-2",
    )
    assert (settings.leader.lease_duration, settings.leader.renew_deadline, settings.leader.retry_period) == (
        30.0,
        20.0,
        4.0,
    )
    assert (settings.cluster.pod_name, settings.cluster.pod_namespace) == ("pod-1", "ns-1")
    flags = [
        "--identity", "id-3", "--lease-namespace", "ns-3", "--lease-name", "lease-3",
        "--lease-duration", "1.5s", "--renew-deadline", "1s", "--retry-period", "200ms",
        "--pod-name", "pod-3", "--pod-namespace", "ns-4",
    ]  # fmt: skip
    settings = parse_settings([*REQUIRED, *flags], env)
    assert (settings.leader.identity, settings.leader.lease_namespace, settings.leader.lease_name) == (
        "id-3",
        "ns-3",
        "lease-3",
    )
    assert (settings.leader.lease_duration, settings.leader.renew_deadline, settings.leader.retry_period) == (
        1.5,
        1.0,
        0.2,
    )
    assert (settings.cluster.pod_name, settings.cluster.pod_namespace) == ("pod-3", "ns-4")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(
            ["--renew-deadline", "15s"], {}, "--renew-deadline: must be shorter than --lease-duration (15s >= 15s)",
            id="renew-equals-lease",
        ),
        pytest.param(
            ["--lease-duration", "5s"], {}, "--renew-deadline: must be shorter than --lease-duration (10s >= 5s)",
            id="lease-below-default-renew",
        ),
        pytest.param(
            ["--retry-period", "10s"], {}, "--retry-period: must be shorter than --renew-deadline (10s >= 10s)",
            id="retry-equals-renew",
        ),
        pytest.param(["--retry-period", "0s"], {}, "--retry-period: must be greater than 0s", id="retry-zero"),
        pytest.param(["--lease-duration", "soon"], {}, "--lease-duration: not a duration", id="lease-text"),
        pytest.param(
            [], {"STAGGER_RENEW_DEADLINE": "-1s"}, "STAGGER_RENEW_DEADLINE: not a duration", id="env-negative"
        ),
        pytest.param(["--lease-name", "Stagger"], {}, "--lease-name: must be at most 253 lowercase", id="name"),
        pytest.param(["--lease-namespace", "a.b"], {}, "--lease-namespace: must be at most 63", id="namespace"),
        pytest.param([], {"POD_NAMESPACE": "-x"}, "POD_NAMESPACE: must be at most 63", id="pod-namespace-env"),
        pytest.param(["--pod-name", "p"], {}, "--pod-namespace: required with --pod-name", id="pod-name-alone"),
        pytest.param(
            ["--pod-namespace", "n"], {}, "--pod-name: required with --pod-namespace", id="pod-namespace-alone"
        ),
    ],
)  # fmt: skip
def test_bad_values_name_their_flag(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings([*REQUIRED, *argv], env)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
