"""lockd's settings: one frozen dataclass, parsed once from flags and `STAGGER_...` environment variables.

Every option is one row of `OPTIONS`: its flag, its variables, its help and how its text is read. The
help text, the environment lookup and the parsing all come from that row (`stagger.options`), so a new
option is one line.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stagger import options
from stagger.names import DEFAULT_PREFIX, DEFAULT_TOKEN_AUDIENCE
from stagger.options import (
    Option,
    SettingsError,
    boolean,
    file_path,
    grouped,
    host_port,
    http_url,
    key_values,
    one_of,
    seconds,
    text,
    whole,
)
from stagger.policywatch import PolicySettings

__all__ = [
    "COMMAND",
    "MAX_LONG_POLL_LIMIT",
    "OPTIONS",
    "ClusterSettings",
    "GroupSettings",
    "NodeSettings",
    "PolicySettings",
    "QueueSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "TokenSettings",
    "parse_settings",
]

# A long poll longer than this only hides a dead client from lockd and its pod from kubectl for longer.
MAX_LONG_POLL_LIMIT = 300.0


@dataclass(frozen=True)
class ServerSettings:
    """The listener: where, and what it takes from a client."""

    host: str = "127.0.0.1"
    port: int = 8080
    # The probes' own listener (None: none; the probes are on the lock port only): the kubelet's probes
    # there cannot be failed by a flood of the lock port, which every pod of the node can reach.
    probe_host: str | None = None
    probe_port: int = 0
    shutdown_timeout: float = 5.0
    # A connection must send each whole request (head and body) within this, and an idle keep-alive
    # connection is closed after it (a slow client cannot hold a connection open).
    header_timeout: float = 10.0
    # lockd reads no request body (asks and releases are in the query): a few KiB keep what a flood of
    # connections can make it hold at 2048 connections to a few MiB.
    max_body: int = 4096
    # Connections open at once: every pod of the node may reach lockd's host port, so a flood is bounded
    # (about 17 KiB each while idle); far above a node's pods, each waiting with one long poll.
    max_connections: int = 2048
    # pod-startup-lock's init clients served unchanged on a port of their own, on `host` (0: off;
    # lockd.startuplock).
    pod_startup_lock_port: int = 0


@dataclass(frozen=True)
class NodeSettings:
    """The node lockd runs on: its name and labels, its cores and where its load is read."""

    node_name: str = "localhost"
    # The node's IP (the chart: the pod's status.hostIP): a dependency's $(NODE_IP); None: not known.
    node_ip: str | None = None
    # Standalone mode has no Node object to read labels from; these stand in for them.
    node_labels: tuple[tuple[str, str], ...] = ()
    cores: int | None = None
    load_file: Path | None = None
    # Where the machine's /proc is: its CPU times (<proc_root>/stat) and IO pressure (<proc_root>/pressure/io).
    proc_root: Path = Path("/proc")
    sample_interval: float = 1.0
    # How often each dependency of the node policy is checked: its result is reused that long, so a dependency
    # that is down costs one check per interval however many pods ask.
    dependency_interval: float = 5.0


@dataclass(frozen=True)
class QueueSettings:
    """The waiters: how long they may poll and idle, how many, who may ask, and (standalone) where the
    slots are kept across restarts."""

    waiter_idle_timeout: float = 30.0
    max_long_poll: float = 60.0
    max_queue: int = 1000
    allow_anonymous: bool | None = None  # None: allowed standalone, refused in cluster mode
    # The longest a slot asked for on pod-startup-lock's port is held (its `--timeout`, 10 s by default).
    pod_startup_lock_hold: float = 10.0
    state_file: Path | None = None


@dataclass(frozen=True)
class ClusterSettings:
    """Cluster mode: the API server, the names on pods, this lockd's own pod, Events."""

    kubeconfig: Path | None = None
    prefix: str = DEFAULT_PREFIX
    own_pod: tuple[str, str] | None = None
    events: bool = True
    # waitForDaemonSets: how long a DaemonSet that should run on the node but has no pod there holds grants.
    daemonset_wait: float = 120.0
    # probeReadiness (lockd/prober.py): checks of held pods' probes in flight at once on the node, and the
    # longest one may take whatever the probe's timeoutSeconds (a pod's probe that hangs holds no more).
    probe_max_in_flight: int = 32
    probe_max_timeout: float = 5.0
    # pod-pacemaker's PacemakerConfig objects read live as node policies beside the file's
    # (lockd.pacemakerwatch); while their CRD is not installed, looked for again this often.
    pacemaker_configs: bool = False
    pacemaker_recheck: float = 60.0


@dataclass(frozen=True)
class TokenSettings:
    """Cluster mode: who asks, by the pod's projected service-account token (lockd/tokenreview.py)."""

    token_audience: str = DEFAULT_TOKEN_AUDIENCE
    require_pod_token: bool = False  # refuse an ask or release without a pod token
    token_cache: float = 300.0  # how long a review's answer is reused for the same token
    token_review_timeout: float = 5.0
    token_review_burst: int = 20  # reviews allowed at once on the node ...
    token_review_fill: float = 0.1  # ... then one more every this many seconds
    # Each caller address's own budget of new tokens, below the node's: made-up tokens cost their sender.
    # A token the API server accepts is given back, so pods sharing the node's address (hostNetwork)
    # are held back only while more than this many ask at the same moment.
    token_review_caller_burst: int = 10
    token_review_caller_fill: float = 0.5
    token_review_callers: int = 1024  # caller addresses remembered (the least recently seen forgotten)
    token_cache_entries: int = 4096
    # Judge tokens against the API server's published keys (lockd/tokenkeys.py), a TokenReview only for
    # those it cannot judge: one API request less for each pod.
    token_keys: bool = True
    # A token naming a key id not read yet makes lockd read the keys again, at most this often.
    token_keys_reread: float = 30.0


@dataclass(frozen=True)
class GroupSettings:
    """The controller's group pacer service, asked for pods in staggering groups."""

    controller_url: str | None = None
    controller_token_file: Path | None = None
    controller_timeout: float = 5.0
    controller_ca_file: Path | None = None
    group_wait: float = 30.0
    group_recheck: float = 60.0
    group_unavailable_after: float = 30.0
    group_failure_policy: str = "open"


@dataclass(frozen=True)
class Settings:
    """lockd's settings, grouped by part (as kopf groups its own). Each option's `dest` is its field's
    name, unique across the groups: `stagger.options.grouped` builds this from flat values, and
    `stagger.options.regrouped` changes some."""

    standalone: bool = False
    log_level: str = "info"
    server: ServerSettings = ServerSettings()
    node: NodeSettings = NodeSettings()
    queue: QueueSettings = QueueSettings()
    policy: PolicySettings = field(default_factory=PolicySettings)
    cluster: ClusterSettings = ClusterSettings()
    tokens: TokenSettings = TokenSettings()
    groups: GroupSettings = GroupSettings()

    @property
    def anonymous_allowed(self) -> bool:
        allow = self.queue.allow_anonymous
        return self.standalone if allow is None else allow


def ip_address(text: str, name: str) -> str | None:
    """An IPv4 or IPv6 address; empty: not known."""
    if not text.strip():
        return None
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise SettingsError(f"{name}: expected an IP address (got {text!r})") from None


OPTIONS: tuple[Option, ...] = (
    Option("--standalone", ("STAGGER_STANDALONE",), "standalone",
           "run without a cluster: pods are identified by namespace/name only", boolean),
    Option("--listen", ("STAGGER_LISTEN",), "listen", "address to serve on (default 127.0.0.1:8080)",
           host_port, "HOST:PORT"),
    Option("--policies", ("STAGGER_POLICIES",), "policies",
           "policy file (YAML), reloaded when it changes; default: the built-in node policy", file_path, "FILE"),
    Option("--node-name", ("STAGGER_NODE_NAME", "NODE_NAME"), "node_name", "this node's name (default: hostname)",
           text, "NAME"),
    Option("--node-ip", ("STAGGER_NODE_IP",), "node_ip",
           "this node's IP: what $(NODE_IP) in a node policy dependency stands for", ip_address, "IP"),
    Option("--node-labels", ("STAGGER_NODE_LABELS",), "node_labels",
           "labels that choose the node policy in standalone mode", key_values, "K=V,..."),
    Option("--cores", ("STAGGER_CORES",), "cores", "CPU cores for perCore limits (default: what the machine has)",
           whole(1), "N"),
    Option("--load-file", ("STAGGER_LOAD_FILE",), "load_file",
           'testing aid: read load as JSON {"cpuPercent": x, "ioPercent": y, "load1": z} from FILE instead of '
           'the machine (each key optional)',
           file_path, "FILE"),
    Option("--proc-root", ("STAGGER_PROC_ROOT",), "proc_root",
           "where to read the node's CPU times and IO pressure (default /proc; e.g. the host's /proc mounted "
           "at /host/proc when the container's own /proc is virtualised, as with lxcfs)", file_path, "DIR"),
    Option("--sample-interval", ("STAGGER_SAMPLE_INTERVAL",), "sample_interval",
           "how often load is sampled (default 1s)", seconds(), "DURATION"),
    Option("--dependency-interval", ("STAGGER_DEPENDENCY_INTERVAL",), "dependency_interval",
           "how often each dependency of the node policy (an HTTP URL or TCP address that must answer before "
           "any grant) is checked, in the background (default 5s)", seconds(), "DURATION"),
    Option("--waiter-idle-timeout", ("STAGGER_WAITER_IDLE_TIMEOUT",), "waiter_idle_timeout",
           "a waiter that has not asked for this long leaves the queue (default 30s)", seconds(), "DURATION"),
    Option("--max-long-poll", ("STAGGER_MAX_LONG_POLL",), "max_long_poll",
           f"upper bound for the wait= parameter (default 60s, at most {MAX_LONG_POLL_LIMIT:g}s)",
           seconds(at_most=MAX_LONG_POLL_LIMIT), "DURATION"),
    Option("--max-queue", ("STAGGER_MAX_QUEUE",), "max_queue",
           "how many pods may wait on this node; more get 429 (default 1000; a node policy's maxQueue wins)",
           whole(1), "N"),
    Option("--reload-interval", ("STAGGER_RELOAD_INTERVAL",), "reload_interval",
           "how often the policy file is checked for changes (default 5s)", seconds(), "DURATION"),
    Option("--shutdown-timeout", ("STAGGER_SHUTDOWN_TIMEOUT",), "shutdown_timeout",
           "time allowed to finish requests on SIGTERM (default 5s)", seconds(), "DURATION"),
    options.HEADER_TIMEOUT,
    Option("--max-body", ("STAGGER_MAX_BODY",), "max_body",
           "largest request body in bytes; larger gets 413 before it is read (default 4096: lockd reads "
           "none)", whole(0), "BYTES"),
    Option("--probe-listen", ("STAGGER_PROBE_LISTEN",), "probe_listen",
           "address of a listener of its own for /healthz and /readyz (the kubelet's probes), apart from "
           "the lock port's traffic (default: none; the chart sets it)", host_port, "HOST:PORT"),
    Option("--max-connections", ("STAGGER_MAX_CONNECTIONS",), "max_connections",
           "connections open at once; beyond, the oldest idle one is closed for a new one, or the new one "
           "refused when all are busy (default 2048)", whole(16), "N"),
    Option("--allow-anonymous", ("STAGGER_ALLOW_ANONYMOUS",), "allow_anonymous",
           "serve the pod-startup-lock path GET /?duration=S in cluster mode too (anonymous slots, at most "
           "holdTimeout each; on by default standalone only)", boolean),
    Option("--pod-startup-lock-port", ("STAGGER_POD_STARTUP_LOCK_PORT",), "pod_startup_lock_port",
           "also serve pod-startup-lock's init clients, unchanged, on this port of --listen's host: GET / "
           "answers 200 'Lock acquired' or 423 'Locked'; a caller is known by its pod's IP, else it gets an "
           "anonymous slot by its address (default 0: off)", whole(0, maximum=65535), "PORT"),
    Option("--pod-startup-lock-hold", ("STAGGER_POD_STARTUP_LOCK_HOLD",), "pod_startup_lock_hold",
           "the longest a slot asked for on --pod-startup-lock-port is held (?duration=N may shorten it); a "
           "known pod's ends at Ready too (default 10s, pod-startup-lock's --timeout)", seconds(), "DURATION"),
    Option("--state-file", ("STAGGER_STATE_FILE",), "state_file",
           "standalone: keep the slots in FILE (written atomically on each change) so a restart keeps them",
           file_path, "FILE"),
    Option("--kubeconfig", ("STAGGER_KUBECONFIG", "KUBECONFIG"), "kubeconfig",
           "cluster mode: kubeconfig to reach the API server (default: in-cluster service account)", file_path, "FILE"),
    options.PREFIX,
    options.TOKEN_AUDIENCE,
    Option("--require-pod-token", ("STAGGER_REQUIRE_POD_TOKEN",), "require_pod_token",
           "cluster mode: refuse (403) an ask or release that does not carry the pod's service-account token "
           "(pods opted in by hand, older init clients); default: check those by name and uid", boolean),
    Option("--no-token-keys", ("STAGGER_NO_TOKEN_KEYS",), "no_token_keys",
           "cluster mode: a TokenReview for each new pod token, instead of checking it against the API "
           "server's published keys (/openid/v1/jwks; a review then only for a token those cannot judge)",
           boolean),
    Option("--token-keys-reread", ("STAGGER_TOKEN_KEYS_REREAD",), "token_keys_reread",
           "a token signed with a key not read yet (the API server's keys rotated) makes lockd read the "
           "published keys again, at most this often (default 30s; they are also read every hour)",
           seconds(), "DURATION"),
    Option("--token-cache", ("STAGGER_TOKEN_CACHE",), "token_cache",
           "how long the API server's answer about a token is reused (default 5m; never past the token's "
           "expiry)", seconds(), "DURATION"),
    Option("--token-review-caller-burst", ("STAGGER_TOKEN_REVIEW_CALLER_BURST",), "token_review_caller_burst",
           "new tokens one caller address may have reviewed at once; beyond, 503 with Retry-After for a pod "
           "that must show its token (default 10; a token the API server accepts is given back)", whole(1),
           "N"),
    Option("--token-review-caller-fill", ("STAGGER_TOKEN_REVIEW_CALLER_FILL",), "token_review_caller_fill",
           "... then one more every this long (default 0.5s)", seconds(), "DURATION"),
    Option("--token-review-callers", ("STAGGER_TOKEN_REVIEW_CALLERS",), "token_review_callers",
           "caller addresses whose token budgets are remembered; the least recently seen is forgotten for "
           "a new one (default 1024)", whole(1), "N"),
    Option("--controller-url", ("STAGGER_CONTROLLER_URL",), "controller_url",
           "cluster mode: the controller's group pacer service, e.g. https://stagger-controller.stagger:8443",
           http_url, "URL"),
    Option("--controller-token-file", ("STAGGER_CONTROLLER_TOKEN_FILE",), "controller_token_file",
           "bearer token sent to the controller (a mounted service account token)", file_path, "FILE"),
    Option("--controller-timeout", ("STAGGER_CONTROLLER_TIMEOUT",), "controller_timeout",
           "time limit of one group grant request (default 5s)", seconds(), "DURATION"),
    Option("--controller-ca-file", ("STAGGER_CONTROLLER_CA_FILE",), "controller_ca_file",
           "CA certificate (PEM) that signed the controller's serving certificate (default: the system's CAs)",
           file_path, "FILE"),
    Option("--group-wait", ("STAGGER_GROUP_WAIT",), "group_wait",
           "length of the node's long poll to the controller that says which held pods may go (default 30s, "
           "at most 60s)", seconds(), "DURATION"),
    Option("--group-recheck", ("STAGGER_GROUP_RECHECK",), "group_recheck",
           "while that long poll works, a pod its group held asks again after this at the latest (default "
           "60s; the long poll wakes it as soon as its group has room)", seconds(), "DURATION"),
    Option("--group-unavailable-after", ("STAGGER_GROUP_UNAVAILABLE_AFTER",), "group_unavailable_after",
           "how long the controller may be unreachable before --group-failure-policy applies (default 30s)",
           seconds(), "DURATION"),
    Option("--group-failure-policy", ("STAGGER_GROUP_FAILURE_POLICY",), "group_failure_policy",
           "controller unreachable: open = node throttles alone decide (default), closed = grouped pods wait",
           one_of("open", "closed"), "open|closed"),
    Option("--probe-max-in-flight", ("STAGGER_PROBE_MAX_IN_FLIGHT",), "probe_max_in_flight",
           "node policy probeReadiness: checks of held pods' probes in flight at once; more wait for the next "
           "period (default 32)", whole(1), "N"),
    Option("--probe-max-timeout", ("STAGGER_PROBE_MAX_TIMEOUT",), "probe_max_timeout",
           "node policy probeReadiness: the longest one check of a pod's probe may take, whatever its "
           "timeoutSeconds (default 5s)", seconds(at_most=60), "DURATION"),
    Option("--daemonset-wait", ("STAGGER_DAEMONSET_WAIT",), "daemonset_wait",
           "waitForDaemonSets: how long a DaemonSet that should run on this node but has no pod here yet "
           "holds grants; then lockd stops waiting for it, logs it and counts it (default 2m)", seconds(),
           "DURATION"),
    Option("--pacemaker-configs", ("STAGGER_PACEMAKER_CONFIGS",), "pacemaker_configs",
           "cluster mode: also read pod-pacemaker's PacemakerConfig objects (woehrl.net/v1alpha) from the API "
           "server as node policies, live; the policy file's win ties and names", boolean),
    Option("--pacemaker-recheck", ("STAGGER_PACEMAKER_RECHECK",), "pacemaker_recheck",
           "--pacemaker-configs: while the PacemakerConfig CRD is not installed, look for it again this often "
           "(default 60s)", seconds(), "DURATION"),
    Option("--no-events", ("STAGGER_NO_EVENTS",), "no_events", "do not write Events on pods", boolean),
    options.LOG_LEVEL,
)  # fmt: skip


COMMAND = options.Command(
    prog="python -m lockd",
    description=(
        "stagger's per-node lock daemon: grants pod start-up slots by node load, concurrency and rate "
        "limits. 200 = go, 423 = wait. Every flag can also be set by the environment variable shown."
    ),
    options=OPTIONS,
    epilog="example: python -m lockd --standalone --listen 127.0.0.1:8080",
)


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Flags win over environment variables, which win over the defaults."""
    values = COMMAND.read(argv, environ)
    options.split_host_port(values, "listen", host="host", port="port")
    options.split_host_port(values, "probe_listen", host="probe_host", port="probe_port")
    values["events"] = not values.pop("no_events", False)
    values["token_keys"] = not values.pop("no_token_keys", False)
    values.setdefault("node_name", socket.gethostname())
    own_namespace, own_name = environ.get("POD_NAMESPACE"), environ.get("POD_NAME")
    if own_namespace and own_name:
        values["own_pod"] = (own_namespace, own_name)
    settings = grouped(Settings, values)
    server = settings.server
    if (server.host, server.port) == (server.probe_host, server.probe_port) and server.port != 0:
        raise SettingsError(f"--probe-listen: must differ from --listen (both {server.host}:{server.port})")
    startup_lock = server.pod_startup_lock_port
    probe_port = server.probe_port if server.probe_host is not None else 0
    if startup_lock and startup_lock in (server.port, probe_port):
        which = "--listen" if startup_lock == server.port else "--probe-listen"
        raise SettingsError(f"--pod-startup-lock-port: must differ from {which}'s port (both {startup_lock})")
    if settings.cluster.pacemaker_configs and settings.standalone:
        raise SettingsError(
            "--pacemaker-configs: only in cluster mode (the objects are read from the API server)"
        )
    if settings.queue.state_file is not None and not settings.standalone:
        raise SettingsError(
            "--state-file: only for --standalone (in a cluster, lockd rebuilds its slots from the pods)"
        )
    groups = settings.groups
    if not 1.0 <= groups.group_wait <= 60.0:
        raise SettingsError(f"--group-wait: must be from 1s to 60s (got {groups.group_wait:g}s)")
    if groups.group_recheck < 1.0:
        raise SettingsError(f"--group-recheck: must be at least 1s (got {groups.group_recheck:g}s)")
    return settings
