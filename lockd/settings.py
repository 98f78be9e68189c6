"""lockd's settings: one frozen dataclass, parsed once from flags and `STAGGER_...` environment variables."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stagger import durations
from stagger.names import DEFAULT_PREFIX, Names


class SettingsError(ValueError):
    """A flag or environment variable that cannot be used; the message names it."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    standalone: bool = False
    policies: Path | None = None
    node_name: str = "localhost"
    # Standalone mode has no Node object to read labels from; these stand in for them.
    node_labels: tuple[tuple[str, str], ...] = ()
    cores: int | None = None
    load_file: Path | None = None
    sample_interval: float = 1.0
    waiter_idle_timeout: float = 30.0
    max_long_poll: float = 60.0
    reload_interval: float = 5.0
    shutdown_timeout: float = 5.0
    log_level: str = "info"
    # Cluster mode.
    kubeconfig: Path | None = None
    prefix: str = DEFAULT_PREFIX
    own_pod: tuple[str, str] | None = None
    controller_url: str | None = None
    controller_token_file: Path | None = None
    controller_timeout: float = 5.0
    group_unavailable_after: float = 30.0
    group_failure_policy: str = "open"
    events: bool = True


def _env_bool(value: str, *, name: str = "STAGGER_STANDALONE") -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"", "0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}: expected true or false (got {value!r})")


def _listen(text: str, *, name: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"{name}: expected HOST:PORT such as 127.0.0.1:8080 (got {text!r})")
    return host.strip("[]"), int(port)


def _labels(text: str, *, name: str) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"{name}: expected key=value[,key=value] (got {item!r})")
        pairs.append((key, value))
    return tuple(pairs)


def _seconds(text: str, *, name: str) -> float:
    try:
        return durations.parse_duration(text, path=name)
    except ValueError as err:
        raise SettingsError(str(err)) from err


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lockd",
        description=(
            "stagger's per-node lock daemon: grants pod start-up slots by node load, concurrency and rate "
            "limits. 200 = go, 423 = wait. Every flag can also be set by the environment variable shown."
        ),
    )
    add = parser.add_argument
    add(
        "--standalone",
        action="store_true",
        default=None,
        help="run without a cluster: pods are identified by namespace/name only [STAGGER_STANDALONE]",
    )
    add("--listen", metavar="HOST:PORT", help="address to serve on (default 127.0.0.1:8080) [STAGGER_LISTEN]")
    add(
        "--policies",
        metavar="FILE",
        help="policy file (YAML), reloaded when it changes; default: the built-in node policy [STAGGER_POLICIES]",
    )
    add(
        "--node-name",
        metavar="NAME",
        help="this node's name (default: hostname) [STAGGER_NODE_NAME or NODE_NAME]",
    )
    add(
        "--node-labels",
        metavar="K=V,...",
        help="labels that choose the node policy in standalone mode [STAGGER_NODE_LABELS]",
    )
    add(
        "--cores",
        metavar="N",
        help="CPU cores for perCore limits (default: what the machine has) [STAGGER_CORES]",
    )
    add(
        "--load-file",
        metavar="FILE",
        help='testing aid: read load as JSON {"cpuPercent": x, "ioPercent": y} from FILE instead of the '
        "machine [STAGGER_LOAD_FILE]",
    )
    add(
        "--sample-interval",
        metavar="DURATION",
        help="how often load is sampled (default 1s) [STAGGER_SAMPLE_INTERVAL]",
    )
    add(
        "--waiter-idle-timeout",
        metavar="DURATION",
        help="a waiter that has not asked for this long leaves the queue (default 30s) [STAGGER_WAITER_IDLE_TIMEOUT]",
    )
    add(
        "--max-long-poll",
        metavar="DURATION",
        help="upper bound for the wait= parameter (default 60s) [STAGGER_MAX_LONG_POLL]",
    )
    add(
        "--reload-interval",
        metavar="DURATION",
        help="how often the policy file is checked for changes (default 5s) [STAGGER_RELOAD_INTERVAL]",
    )
    add(
        "--shutdown-timeout",
        metavar="DURATION",
        help="time allowed to finish requests on SIGTERM (default 5s) [STAGGER_SHUTDOWN_TIMEOUT]",
    )
    add(
        "--kubeconfig",
        metavar="FILE",
        help="cluster mode: kubeconfig to reach the API server (default: in-cluster service account) "
        "[STAGGER_KUBECONFIG or KUBECONFIG]",
    )
    add(
        "--prefix",
        metavar="PREFIX",
        help=f"label/annotation prefix (default {DEFAULT_PREFIX}) [STAGGER_PREFIX]",
    )
    add(
        "--controller-url",
        metavar="URL",
        help="cluster mode: the controller's group pacer service, e.g. https://stagger-controller.stagger:8443 "
        "[STAGGER_CONTROLLER_URL]",
    )
    add(
        "--controller-token-file",
        metavar="FILE",
        help="bearer token sent to the controller (a mounted service account token) [STAGGER_CONTROLLER_TOKEN_FILE]",
    )
    add(
        "--controller-timeout",
        metavar="DURATION",
        help="time limit of one group grant request (default 5s) [STAGGER_CONTROLLER_TIMEOUT]",
    )
    add(
        "--group-unavailable-after",
        metavar="DURATION",
        help="how long the controller may be unreachable before --group-failure-policy applies (default 30s) "
        "[STAGGER_GROUP_UNAVAILABLE_AFTER]",
    )
    add(
        "--group-failure-policy",
        metavar="open|closed",
        help="controller unreachable: open = node throttles alone decide (default), closed = grouped pods wait "
        "[STAGGER_GROUP_FAILURE_POLICY]",
    )
    add(
        "--no-events",
        action="store_true",
        default=None,
        help="do not write Events on pods [STAGGER_NO_EVENTS]",
    )
    add(
        "--log-level",
        metavar="LEVEL",
        help="debug, info, warning or error (default info) [STAGGER_LOG_LEVEL]",
    )
    return parser


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Flags win over environment variables, which win over the defaults."""
    args = build_parser().parse_args(list(argv))
    defaults = Settings()

    def pick(flag: str | None, env: str) -> str | None:
        return flag if flag is not None else environ.get(env) or None

    standalone = (
        args.standalone if args.standalone is not None else _env_bool(environ.get("STAGGER_STANDALONE", ""))
    )
    listen = pick(args.listen, "STAGGER_LISTEN")
    host, port = _listen(listen, name="--listen") if listen else (defaults.host, defaults.port)
    policies = pick(args.policies, "STAGGER_POLICIES")
    load_file = pick(args.load_file, "STAGGER_LOAD_FILE")
    node_name = pick(args.node_name, "STAGGER_NODE_NAME") or environ.get("NODE_NAME") or socket.gethostname()
    labels = pick(args.node_labels, "STAGGER_NODE_LABELS")
    cores_text = pick(args.cores, "STAGGER_CORES")
    cores: int | None = None
    if cores_text is not None:
        if not cores_text.isdigit() or int(cores_text) < 1:
            raise SettingsError(f"--cores: expected a whole number of at least 1 (got {cores_text!r})")
        cores = int(cores_text)
    log_level = (pick(args.log_level, "STAGGER_LOG_LEVEL") or defaults.log_level).lower()
    if log_level not in {"debug", "info", "warning", "error"}:
        raise SettingsError(f"--log-level: expected debug, info, warning or error (got {log_level!r})")

    def seconds(flag: str | None, env: str, default: float, name: str, *, minimum: float = 0.0) -> float:
        text = pick(flag, env)
        if text is None:
            return default
        value = _seconds(text, name=name)
        if value <= minimum:
            raise SettingsError(f"{name}: must be greater than {minimum:g}s (got {text!r})")
        return value

    kubeconfig = pick(args.kubeconfig, "STAGGER_KUBECONFIG") or environ.get("KUBECONFIG") or None
    prefix = pick(args.prefix, "STAGGER_PREFIX") or DEFAULT_PREFIX
    try:
        Names(prefix)
    except ValueError as err:
        raise SettingsError(f"--{err}") from err
    own_namespace, own_name = environ.get("POD_NAMESPACE"), environ.get("POD_NAME")
    failure_policy = (pick(args.group_failure_policy, "STAGGER_GROUP_FAILURE_POLICY") or "open").lower()
    if failure_policy not in ("open", "closed"):
        raise SettingsError(f"--group-failure-policy: must be open or closed (got {failure_policy!r})")
    controller_url = pick(args.controller_url, "STAGGER_CONTROLLER_URL")
    if controller_url and not controller_url.startswith(("http://", "https://")):
        raise SettingsError(f"--controller-url: must start with http:// or https:// (got {controller_url!r})")
    token_file = pick(args.controller_token_file, "STAGGER_CONTROLLER_TOKEN_FILE")
    no_events = (
        args.no_events
        if args.no_events is not None
        else _env_bool(environ.get("STAGGER_NO_EVENTS", ""), name="STAGGER_NO_EVENTS")
    )

    return Settings(
        host=host,
        port=port,
        standalone=standalone,
        policies=Path(policies) if policies else None,
        node_name=node_name,
        node_labels=_labels(labels, name="--node-labels") if labels else (),
        cores=cores,
        load_file=Path(load_file) if load_file else None,
        sample_interval=seconds(
            args.sample_interval, "STAGGER_SAMPLE_INTERVAL", defaults.sample_interval, "--sample-interval"
        ),
        waiter_idle_timeout=seconds(
            args.waiter_idle_timeout,
            "STAGGER_WAITER_IDLE_TIMEOUT",
            defaults.waiter_idle_timeout,
            "--waiter-idle-timeout",
        ),
        max_long_poll=seconds(
            args.max_long_poll, "STAGGER_MAX_LONG_POLL", defaults.max_long_poll, "--max-long-poll"
        ),
        reload_interval=seconds(
            args.reload_interval, "STAGGER_RELOAD_INTERVAL", defaults.reload_interval, "--reload-interval"
        ),
        shutdown_timeout=seconds(
            args.shutdown_timeout, "STAGGER_SHUTDOWN_TIMEOUT", defaults.shutdown_timeout, "--shutdown-timeout"
        ),
        log_level=log_level,
        kubeconfig=Path(kubeconfig) if kubeconfig else None,
        prefix=prefix,
        own_pod=(own_namespace, own_name) if own_namespace and own_name else None,
        controller_url=controller_url,
        controller_token_file=Path(token_file) if token_file else None,
        controller_timeout=seconds(
            args.controller_timeout,
            "STAGGER_CONTROLLER_TIMEOUT",
            defaults.controller_timeout,
            "--controller-timeout",
        ),
        group_unavailable_after=seconds(
            args.group_unavailable_after,
            "STAGGER_GROUP_UNAVAILABLE_AFTER",
            defaults.group_unavailable_after,
            "--group-unavailable-after",
        ),
        group_failure_policy=failure_policy,
        events=not no_events,
    )
