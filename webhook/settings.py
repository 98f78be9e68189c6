"""The controller's settings: one frozen dataclass, parsed once from flags and `STAGGER_...` environment
variables.

Every option is one row of `OPTIONS` (see `stagger.options`): its flag, its variables, its help and how
its text is read. Checks that involve several options (TLS needs both files unless --insecure-http) come
after the table.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stagger import options
from stagger.groupbook import CLAIM_CONFIRM_SECONDS
from stagger.names import DEFAULT_PREFIX, DEFAULT_TOKEN_AUDIENCE
from stagger.objectnames import (
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN_MAX,
    is_dns1123_label,
    is_dns1123_subdomain,
)
from stagger.options import (
    Option,
    SettingsError,
    boolean,
    file_path,
    grouped,
    host_port,
    http_url,
    seconds,
    text,
    whole,
)
from stagger.policywatch import PolicySettings

__all__ = ["COMMAND", "DEFAULT_MAX_BODY", "OPTIONS", "Settings", "SettingsError", "parse_settings"]

# kube-apiserver accepts request bodies of at most 3 MiB, so a pod in an AdmissionReview (once, on CREATE)
# is no larger than that.
DEFAULT_MAX_BODY = 3 * 1024 * 1024
DEFAULT_TLS_READ_BUFFER = 16 * 1024
# Bodies being received at once, all callers together (a quarter of it per caller address): the API
# server's reviews of a burst of pods (tens of KiB each) fit many times over, while slow 3 MiB bodies from a
# hostile pod cannot add up past the controller's memory limit.
DEFAULT_BODY_BUDGET = 64 * 1024 * 1024


def default_identity() -> str:
    """The leader election identity without --identity or POD_NAME: this host's name plus a random
    suffix, so two processes on one host never share an identity (client-go's examples do the same)."""
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


def _object_name(text: str, name: str, *, subdomain: bool) -> str:
    valid, longest = (
        (is_dns1123_subdomain(text), DNS1123_SUBDOMAIN_MAX)
        if subdomain
        else (is_dns1123_label(text), DNS1123_LABEL_MAX)
    )
    if not valid:
        allowed = "letters, digits, '-' or '.'" if subdomain else "letters, digits or '-'"
        raise SettingsError(
            f"{name}: must be at most {longest} lowercase {allowed}, starting and ending with a letter or digit "
            f"(got {text!r})"
        )
    return text


def _dns_subdomain(text: str, name: str) -> str:
    """A Lease or pod name."""
    return _object_name(text, name, subdomain=True)


def _dns_label(text: str, name: str) -> str:
    """A namespace."""
    return _object_name(text, name, subdomain=False)


# webhook.admission.optin.DEFAULT_SCHEDULER (the settings are a layer below admission: not imported).
DEFAULT_SCHEDULER = "default-scheduler"


def _scheduler_names(text: str, name: str) -> tuple[str, ...]:
    """Comma-separated scheduler names (each a DNS-1123 subdomain, as the API server validates a pod's
    schedulerName), without repeats; never the default scheduler, which would opt in every pod."""
    found: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        _object_name(item, name, subdomain=True)
        if item == DEFAULT_SCHEDULER:
            raise SettingsError(
                f"{name}: must not name {DEFAULT_SCHEDULER} (the pods it opts in are given it: every pod "
                "of the cluster would be opted in)"
            )
        if item not in found:
            found.append(item)
    return tuple(found)


@dataclass(frozen=True)
class InjectionSettings:
    """What admission injects into a pod: the init client's image, and the port of lockd it calls."""

    image: str  # the stagger image the injected init client runs from
    lockd_port: int = 9400
    # The pod's service-account token projected into the init client, for lockd to check who asks.
    token_audience: str = DEFAULT_TOKEN_AUDIENCE
    pod_token: bool = True
    # Pods naming one of these schedulers are opted in at POST /mutate/pods/scheduler and given the
    # default scheduler (webhook.admission.optin).
    scheduler_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerSettings:
    """The TLS listener and the plain-HTTP probe listener: where, and what they take from a client."""

    host: str = "0.0.0.0"
    port: int = 9443
    probe_host: str = "0.0.0.0"
    probe_port: int = 9090
    shutdown_timeout: float = 5.0
    # A connection must send a whole request within this, and an idle keep-alive connection is closed
    # after it.
    header_timeout: float = 10.0
    max_body: int = DEFAULT_MAX_BODY
    body_budget: int = DEFAULT_BODY_BUDGET
    # Every node's lockd keeps one long poll open to the controller: room for 5,000 nodes and more.
    max_connections: int = 8192
    # Per TLS connection (asyncio's own is 256 KiB): one TLS record, so 5,000 nodes' long polls fit.
    tls_read_buffer: int = DEFAULT_TLS_READ_BUFFER


@dataclass(frozen=True)
class ServingSettings:
    """What the TLS listener serves with: its certificate pair (or plain HTTP), and the token the group
    grant API asks of lockd."""

    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure_http: bool = False
    token_file: Path | None = None


@dataclass(frozen=True)
class ClusterSettings:
    """The API server, and the controller's own pod (downward API), labelled `<prefix>/leader: "1"` while
    it leads (None: no label)."""

    kubeconfig: Path | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None


@dataclass(frozen=True)
class LeaderSettings:
    """Leader election (webhook.leader): a coordination.k8s.io/v1 Lease with client-go's default timings."""

    leader_elect: bool = True
    lease_name: str = "stagger-controller"
    lease_namespace: str = "default"  # POD_NAMESPACE when set
    # POD_NAME when set; otherwise random per process, so it is left out of comparisons.
    identity: str = field(default_factory=default_identity, compare=False)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True)
class GroupSettings:
    """The group part: the grants drained at shutdown, and evict mode's admission and evictions."""

    grant_drain: float = 5.0
    # Evict mode: a replica that does not lead asks the leader (through the leader Service) at admission.
    leader_url: str | None = None
    leader_ca_file: Path | None = None
    admit_timeout: float = 0.5
    # Evict mode: how long an owner's reservation lasts is groupbook.RESERVATION_SECONDS; how long to wait
    # before evicting a pod again after the API server refused (429 without Retry-After, 5xx).
    eviction_backoff: float = 5.0
    # Evict mode: a place admission claims for a pod lapses this long after unless the pod shows in the
    # pod watch (the review may name a pod never created: admission takes no credentials).
    claim_confirm_timeout: float = CLAIM_CONFIRM_SECONDS


@dataclass(frozen=True)
class Settings:
    """The controller's settings, grouped by part (as kopf groups its own). Each option's `dest` is its
    field's name, unique across the groups: `stagger.options.grouped` builds this from flat values, and
    `stagger.options.regrouped` changes some."""

    inject: InjectionSettings
    prefix: str = DEFAULT_PREFIX
    log_level: str = "info"
    server: ServerSettings = ServerSettings()
    serving: ServingSettings = ServingSettings()
    policy: PolicySettings = field(default_factory=PolicySettings)
    cluster: ClusterSettings = ClusterSettings()
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    groups: GroupSettings = GroupSettings()

    @property
    def tls(self) -> bool:
        return not self.serving.insecure_http


OPTIONS: tuple[Option, ...] = (
    Option("--listen", ("STAGGER_LISTEN",), "listen",
           "address of the TLS listener: admission (POST /mutate/pods) and /status (default 0.0.0.0:9443)",
           host_port, "HOST:PORT"),
    Option("--tls-cert", ("STAGGER_TLS_CERT",), "tls_cert",
           "serving certificate chain (PEM), re-read when it changes; required unless --insecure-http",
           file_path, "FILE"),
    Option("--tls-key", ("STAGGER_TLS_KEY",), "tls_key",
           "private key of --tls-cert (PEM), re-read when it changes; required unless --insecure-http",
           file_path, "FILE"),
    Option("--insecure-http", ("STAGGER_INSECURE_HTTP",), "insecure_http",
           "serve plain HTTP instead of TLS, for local experiments only: the API server calls webhooks "
           "over HTTPS only", boolean),
    Option("--policies", ("STAGGER_POLICIES",), "policies",
           "policy file (YAML), reloaded when it changes; default: no staggering policies (enabled pods "
           "get the init client, and lockd's node throttles alone pace them)", file_path, "FILE"),
    Option("--token-file", ("STAGGER_TOKEN_FILE",), "token_file",
           "file holding the bearer token lockd sends to the group grant API (re-read when it changes)",
           file_path, "FILE"),
    Option("--image", ("STAGGER_IMAGE",), "image",
           "required: the stagger image the injected init client runs from (lockd's, already on every node)",
           text, "IMAGE"),
    Option("--lockd-port", ("STAGGER_LOCKD_PORT",), "lockd_port",
           "lockd's host port, which the init client calls on its node's IP (default 9400)",
           whole(1, maximum=65535), "PORT"),
    Option("--kubeconfig", ("STAGGER_KUBECONFIG", "KUBECONFIG"), "kubeconfig",
           "kubeconfig to reach the API server (default: in-cluster service account; admission needs none)",
           file_path, "FILE"),
    Option("--probe-listen", ("STAGGER_PROBE_LISTEN",), "probe_listen",
           "address of the plain HTTP listener: /healthz, /readyz, /metrics (default 0.0.0.0:9090)",
           host_port, "HOST:PORT"),
    options.PREFIX,
    options.TOKEN_AUDIENCE,
    Option("--scheduler-names", ("STAGGER_SCHEDULER_NAMES",), "scheduler_names",
           "comma-separated scheduler names: a pod naming one is opted in at POST /mutate/pods/scheduler and "
           f"given {DEFAULT_SCHEDULER} instead (default: none)", _scheduler_names, "NAMES"),
    Option("--no-pod-token", ("STAGGER_NO_POD_TOKEN",), "no_pod_token",
           "do not project the pod's service-account token into the init client (lockd then checks who asks "
           "by name and uid only, or refuses under --require-pod-token)", boolean),
    Option("--reload-interval", ("STAGGER_RELOAD_INTERVAL",), "reload_interval",
           "how often the policy, certificate and token files are checked for changes (default 5s)",
           seconds(), "DURATION"),
    Option("--grant-drain", ("STAGGER_GRANT_DRAIN",), "grant_drain",
           "on shutdown the leader stops granting, then waits up to this long for its grants to show on their "
           "pods before it gives up the Lease (default 5s; the pod's termination grace period must cover it "
           "and --shutdown-timeout)", seconds(), "DURATION"),
    Option("--shutdown-timeout", ("STAGGER_SHUTDOWN_TIMEOUT",), "shutdown_timeout",
           "time allowed to finish requests on SIGTERM (default 5s; the pod's termination grace period "
           "must be longer)", seconds(), "DURATION"),
    options.HEADER_TIMEOUT,
    Option("--max-body", ("STAGGER_MAX_BODY",), "max_body",
           f"largest request body in bytes; larger gets 413 (default {DEFAULT_MAX_BODY}: the API server "
           "sends objects of at most about 3 MiB)", whole(1024), "BYTES"),
    Option("--body-budget", ("STAGGER_BODY_BUDGET",), "body_budget",
           f"bytes of request bodies being received at once, a quarter of it per caller address; beyond, 503 "
           f"with Retry-After before the body is read (default {DEFAULT_BODY_BUDGET})", whole(1024), "BYTES"),
    Option("--max-connections", ("STAGGER_MAX_CONNECTIONS",), "max_connections",
           "connections open at once on the admission and group API port; beyond, the oldest idle one is "
           "closed for a new one, or the new one refused when all are busy (default 8192: each node's lockd "
           "keeps one open)", whole(16), "N"),
    Option("--tls-read-buffer", ("STAGGER_TLS_READ_BUFFER",), "tls_read_buffer",
           f"bytes each TLS connection reads with (default {DEFAULT_TLS_READ_BUFFER}, one TLS record; asyncio's "
           "own is 262144, which costs 256 KiB for every node's open long poll)", whole(1024, maximum=1 << 20),
           "BYTES"),
    options.LOG_LEVEL,
    Option("--no-leader-elect", ("STAGGER_NO_LEADER_ELECT",), "no_leader_elect",
           "run as the only replica: always the leader, no Lease (for one replica; two would both grant)",
           boolean),
    Option("--lease-name", ("STAGGER_LEASE_NAME",), "lease_name",
           "the Lease the controller replicas elect their leader with (default stagger-controller)",
           _dns_subdomain, "NAME"),
    Option("--lease-namespace", ("STAGGER_LEASE_NAMESPACE", "POD_NAMESPACE"), "lease_namespace",
           "namespace of --lease-name (default: the pod's own namespace, else default)",
           _dns_label, "NAMESPACE"),
    Option("--identity", ("STAGGER_IDENTITY", "POD_NAME"), "identity",
           "this replica's holder identity in the Lease (default: the pod's name, else the host name plus "
           "a random suffix)", text, "ID"),
    Option("--lease-duration", ("STAGGER_LEASE_DURATION",), "lease_duration",
           "how long followers wait after the leader's last renewal before taking over (default 15s)",
           seconds(), "DURATION"),
    Option("--renew-deadline", ("STAGGER_RENEW_DEADLINE",), "renew_deadline",
           "the leader steps down when it has not renewed for this long; shorter than --lease-duration "
           "(default 10s)", seconds(), "DURATION"),
    Option("--retry-period", ("STAGGER_RETRY_PERIOD",), "retry_period",
           "how often the Lease is renewed or tried; shorter than --renew-deadline (default 2s)",
           seconds(), "DURATION"),
    Option("--pod-name", ("STAGGER_POD_NAME", "POD_NAME"), "pod_name",
           "this replica's own pod, labelled <prefix>/leader=1 while it leads so that a Service reaches "
           "the leader (default: no label)", _dns_subdomain, "NAME"),
    Option("--pod-namespace", ("STAGGER_POD_NAMESPACE", "POD_NAMESPACE"), "pod_namespace",
           "namespace of --pod-name", _dns_label, "NAMESPACE"),
    Option("--leader-url", ("STAGGER_LEADER_URL",), "leader_url",
           "evict mode: where a replica that does not lead asks the leader whether to hold a pod at "
           "admission (the chart's leader Service); without it such a replica holds every evict-mode pod "
           "(safe: the leader evicts held pods as their pacers allow)", http_url, "URL"),
    Option("--leader-ca-file", ("STAGGER_LEADER_CA_FILE",), "leader_ca_file",
           "CA bundle (PEM) to verify --leader-url with (default: the system's)", file_path, "FILE"),
    Option("--admit-timeout", ("STAGGER_ADMIT_TIMEOUT",), "admit_timeout",
           "evict mode: how long admission waits for the leader's answer (on the leader: for its counts "
           "to be rebuilt from the API, after a start or an election) before holding the pod "
           "(default 0.5s; keep it well under the webhook's timeoutSeconds)", seconds(at_most=10.0), "DURATION"),
    Option("--eviction-backoff", ("STAGGER_EVICTION_BACKOFF",), "eviction_backoff",
           "evict mode: wait at least this long before evicting a pod again after the API server refused "
           "(429 without Retry-After, 5xx, no answer); doubled each time, up to 1m (default 5s)",
           seconds(at_most=60.0), "DURATION"),
    Option("--claim-confirm-timeout", ("STAGGER_CLAIM_CONFIRM_TIMEOUT",), "claim_confirm_timeout",
           "evict mode: a place admission claims for a pod it lets through lapses (counted in "
           "stagger_controller_claims_lapsed_total) unless the pod shows in the controller's pod watch "
           f"within this long; a review for a pod never created then holds no place for long (default "
           f"{CLAIM_CONFIRM_SECONDS:g}s; longer than the API server takes to persist a pod and the watch to "
           "bring it)", seconds(at_most=60.0), "DURATION"),
)  # fmt: skip


COMMAND = options.Command(
    prog="python -m webhook",
    description=(
        "stagger's controller: the mutating admission webhook that opts pods into staggering (injects "
        "the init client, labels their group, holds them). Every flag can also be set by the "
        "environment variable shown."
    ),
    options=OPTIONS,
    epilog=(
        "example: python -m webhook --tls-cert tls.crt --tls-key tls.key --policies policies.yaml "
        "--image ghcr.io/example/stagger:0.1.0"
    ),
)


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Flags win over environment variables, which win over the defaults."""
    values = COMMAND.read(argv, environ)
    options.split_host_port(values, "listen", host="host", port="port")
    options.split_host_port(values, "probe_listen", host="probe_host", port="probe_port")
    values["pod_token"] = not values.pop("no_pod_token", False)
    if not values.get("image"):
        raise SettingsError("--image: required (the stagger image the injected init client runs from)")
    given = [flag for flag, dest in _TLS_FILES if values.get(dest) is not None]
    if values.get("insecure_http"):
        if given:
            raise SettingsError(f"--insecure-http: cannot be combined with {' and '.join(given)}")
    elif len(given) < len(_TLS_FILES):
        missing = [flag for flag, _ in _TLS_FILES if flag not in given]
        raise SettingsError(
            f"{' and '.join(missing)}: required to serve TLS (the API server calls webhooks over HTTPS "
            "only); for a local experiment without TLS, pass --insecure-http"
        )
    values["leader_elect"] = not values.pop("no_leader_elect", False)
    settings = grouped(Settings, values)
    _check_leader(settings)
    server = settings.server
    if (server.host, server.port) == (server.probe_host, server.probe_port) and server.port != 0:
        raise SettingsError(f"--probe-listen: must differ from --listen (both {server.host}:{server.port})")
    return settings


_TLS_FILES = (("--tls-cert", "tls_cert"), ("--tls-key", "tls_key"))


def _check_leader(settings: Settings) -> None:
    """The leader must give up before its lease can expire for the others, and must be able to retry
    before it gives up (client-go's NewLeaderElector checks the same, with room for its 1.2 jitter on
    the retry period; webhook.leader does not jitter). The labelled pod needs both its name and namespace."""
    leader, pod = settings.leader, settings.cluster
    if leader.renew_deadline >= leader.lease_duration:
        raise SettingsError(
            f"--renew-deadline: must be shorter than --lease-duration ({leader.renew_deadline:g}s >= "
            f"{leader.lease_duration:g}s), or a leader that cannot renew would still lead when another "
            "replica takes over"
        )
    if leader.retry_period >= leader.renew_deadline:
        raise SettingsError(
            f"--retry-period: must be shorter than --renew-deadline ({leader.retry_period:g}s >= "
            f"{leader.renew_deadline:g}s)"
        )
    if (pod.pod_name is None) != (pod.pod_namespace is None):
        given, missing = ("--pod-name", "--pod-namespace")
        if pod.pod_name is None:
            given, missing = missing, given
        raise SettingsError(f"{missing}: required with {given} (the pod labelled while it leads)")
