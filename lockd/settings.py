"""lockd's settings: one frozen dataclass, parsed once from flags and `STAGGER_...` environment variables.

Every option is one row of `OPTIONS`: its flag, its variables, its help and how its text is read. The
help text, the environment lookup and the parsing all come from that row, so a new option is one line.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from stagger import addresses, durations
from stagger.names import DEFAULT_PREFIX, Names


class SettingsError(ValueError):
    """A flag or environment variable that cannot be used; the message names it."""


# A long poll longer than this only hides a dead client from lockd and its pod from kubectl for longer.
MAX_LONG_POLL_LIMIT = 300.0


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
    max_queue: int = 1000
    reload_interval: float = 5.0
    shutdown_timeout: float = 5.0
    # A connection must send a whole request within this, and an idle keep-alive connection is closed
    # after it (a slow client cannot hold a connection open).
    header_timeout: float = 10.0
    max_body: int = 1024 * 1024
    allow_anonymous: bool | None = None  # None: allowed standalone, refused in cluster mode
    state_file: Path | None = None
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

    @property
    def anonymous_allowed(self) -> bool:
        return self.standalone if self.allow_anonymous is None else self.allow_anonymous


# --- how option texts are read -------------------------------------------------------------------------


def _bool(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"", "0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}: expected true or false (got {text!r})")


def _listen(text: str, name: str) -> tuple[str, int]:
    try:
        return addresses.parse_host_port(text, name=name)
    except ValueError as err:
        raise SettingsError(str(err)) from err


def _labels(text: str, name: str) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"{name}: expected key=value[,key=value] (got {item!r})")
        pairs.append((key, value))
    return tuple(pairs)


def _whole(minimum: int) -> Callable[[str, str], int]:
    def parse(text: str, name: str) -> int:
        if not text.isascii() or not text.isdigit() or int(text) < minimum:
            raise SettingsError(f"{name}: expected a whole number of at least {minimum} (got {text!r})")
        return int(text)

    return parse


def _seconds(*, at_most: float | None = None) -> Callable[[str, str], float]:
    def parse(text: str, name: str) -> float:
        try:
            value = durations.parse_duration(text, path=name)
        except ValueError as err:
            raise SettingsError(str(err)) from err
        if value <= 0:
            raise SettingsError(f"{name}: must be greater than 0s (got {text!r})")
        if at_most is not None and value > at_most:
            raise SettingsError(
                f"{name}: must be at most {durations.format_duration(at_most)} (got {text!r})"
            )
        return value

    return parse


def _path(text: str, name: str) -> Path:
    return Path(text)


def _text(text: str, name: str) -> str:
    return text


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def parse(text: str, name: str) -> str:
        if text.lower() not in choices:
            raise SettingsError(f"{name}: must be {' or '.join(choices)} (got {text!r})")
        return text.lower()

    return parse


def _prefix(text: str, name: str) -> str:
    try:
        Names(text)
    except ValueError as err:
        raise SettingsError(f"--{err}") from err
    return text


def _url(text: str, name: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise SettingsError(f"{name}: must start with http:// or https:// (got {text!r})")
    return text


@dataclass(frozen=True)
class Option:
    flag: str
    envs: tuple[str, ...]
    dest: str  # the Settings field (or "listen", which fills host and port)
    help: str
    parse: Callable[[str, str], Any]
    metavar: str | None = None  # None: a switch (flag without a value; its variable takes true/false)


OPTIONS: tuple[Option, ...] = (
    Option("--standalone", ("STAGGER_STANDALONE",), "standalone",
           "run without a cluster: pods are identified by namespace/name only", _bool),
    Option("--listen", ("STAGGER_LISTEN",), "listen", "address to serve on (default 127.0.0.1:8080)",
           _listen, "HOST:PORT"),
    Option("--policies", ("STAGGER_POLICIES",), "policies",
           "policy file (YAML), reloaded when it changes; default: the built-in node policy", _path, "FILE"),
    Option("--node-name", ("STAGGER_NODE_NAME", "NODE_NAME"), "node_name", "this node's name (default: hostname)",
           _text, "NAME"),
    Option("--node-labels", ("STAGGER_NODE_LABELS",), "node_labels",
           "labels that choose the node policy in standalone mode", _labels, "K=V,..."),
    Option("--cores", ("STAGGER_CORES",), "cores", "CPU cores for perCore limits (default: what the machine has)",
           _whole(1), "N"),
    Option("--load-file", ("STAGGER_LOAD_FILE",), "load_file",
           'testing aid: read load as JSON {"cpuPercent": x, "ioPercent": y} from FILE instead of the machine',
           _path, "FILE"),
    Option("--sample-interval", ("STAGGER_SAMPLE_INTERVAL",), "sample_interval",
           "how often load is sampled (default 1s)", _seconds(), "DURATION"),
    Option("--waiter-idle-timeout", ("STAGGER_WAITER_IDLE_TIMEOUT",), "waiter_idle_timeout",
           "a waiter that has not asked for this long leaves the queue (default 30s)", _seconds(), "DURATION"),
    Option("--max-long-poll", ("STAGGER_MAX_LONG_POLL",), "max_long_poll",
           f"upper bound for the wait= parameter (default 60s, at most {MAX_LONG_POLL_LIMIT:g}s)",
           _seconds(at_most=MAX_LONG_POLL_LIMIT), "DURATION"),
    Option("--max-queue", ("STAGGER_MAX_QUEUE",), "max_queue",
           "how many pods may wait on this node; more get 429 (default 1000; a node policy's maxQueue wins)",
           _whole(1), "N"),
    Option("--reload-interval", ("STAGGER_RELOAD_INTERVAL",), "reload_interval",
           "how often the policy file is checked for changes (default 5s)", _seconds(), "DURATION"),
    Option("--shutdown-timeout", ("STAGGER_SHUTDOWN_TIMEOUT",), "shutdown_timeout",
           "time allowed to finish requests on SIGTERM (default 5s)", _seconds(), "DURATION"),
    Option("--header-timeout", ("STAGGER_HEADER_TIMEOUT",), "header_timeout",
           "a connection must send a whole request within this, and idle connections close after it "
           "(default 10s)", _seconds(), "DURATION"),
    Option("--max-body", ("STAGGER_MAX_BODY",), "max_body",
           "largest request body in bytes; larger gets 413 (default 1048576)", _whole(0), "BYTES"),
    Option("--allow-anonymous", ("STAGGER_ALLOW_ANONYMOUS",), "allow_anonymous",
           "serve the pod-startup-lock path GET /?duration=S in cluster mode too (anonymous slots, at most "
           "holdTimeout each; on by default standalone only)", _bool),
    Option("--state-file", ("STAGGER_STATE_FILE",), "state_file",
           "standalone: keep the slots in FILE (written atomically on each change) so a restart keeps them",
           _path, "FILE"),
    Option("--kubeconfig", ("STAGGER_KUBECONFIG", "KUBECONFIG"), "kubeconfig",
           "cluster mode: kubeconfig to reach the API server (default: in-cluster service account)", _path, "FILE"),
    Option("--prefix", ("STAGGER_PREFIX",), "prefix", f"label/annotation prefix (default {DEFAULT_PREFIX})",
           _prefix, "PREFIX"),
    Option("--controller-url", ("STAGGER_CONTROLLER_URL",), "controller_url",
           "cluster mode: the controller's group pacer service, e.g. https://stagger-controller.stagger:8443",
           _url, "URL"),
    Option("--controller-token-file", ("STAGGER_CONTROLLER_TOKEN_FILE",), "controller_token_file",
           "bearer token sent to the controller (a mounted service account token)", _path, "FILE"),
    Option("--controller-timeout", ("STAGGER_CONTROLLER_TIMEOUT",), "controller_timeout",
           "time limit of one group grant request (default 5s)", _seconds(), "DURATION"),
    Option("--group-unavailable-after", ("STAGGER_GROUP_UNAVAILABLE_AFTER",), "group_unavailable_after",
           "how long the controller may be unreachable before --group-failure-policy applies (default 30s)",
           _seconds(), "DURATION"),
    Option("--group-failure-policy", ("STAGGER_GROUP_FAILURE_POLICY",), "group_failure_policy",
           "controller unreachable: open = node throttles alone decide (default), closed = grouped pods wait",
           _one_of("open", "closed"), "open|closed"),
    Option("--no-events", ("STAGGER_NO_EVENTS",), "no_events", "do not write Events on pods", _bool),
    Option("--log-level", ("STAGGER_LOG_LEVEL",), "log_level", "debug, info, warning or error (default info)",
           _one_of("debug", "info", "warning", "error"), "LEVEL"),
)  # fmt: skip


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SettingsError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m lockd",
        description=(
            "stagger's per-node lock daemon: grants pod start-up slots by node load, concurrency and rate "
            "limits. 200 = go, 423 = wait. Every flag can also be set by the environment variable shown."
        ),
        epilog="example: python -m lockd --standalone --listen 127.0.0.1:8080",
    )
    for option in OPTIONS:
        shown = f"{option.help} [{' or '.join(option.envs)}]"
        if option.metavar is None:
            parser.add_argument(option.flag, dest=option.dest, action="store_true", default=None, help=shown)
        else:
            parser.add_argument(option.flag, dest=option.dest, metavar=option.metavar, help=shown)
    return parser


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Flags win over environment variables, which win over the defaults."""
    args = vars(build_parser().parse_args(list(argv)))
    values: dict[str, Any] = {}
    for option in OPTIONS:
        given = args.get(option.dest)
        if given is True and option.metavar is None:
            values[option.dest] = True
            continue
        if given is not None:
            values[option.dest] = option.parse(given, option.flag)
            continue
        env = next((name for name in option.envs if environ.get(name)), None)
        if env is not None:
            values[option.dest] = option.parse(environ[env], env)
    if "listen" in values:
        values["host"], values["port"] = values.pop("listen")
    values["events"] = not values.pop("no_events", False)
    values.setdefault("node_name", socket.gethostname())
    own_namespace, own_name = environ.get("POD_NAMESPACE"), environ.get("POD_NAME")
    if own_namespace and own_name:
        values["own_pod"] = (own_namespace, own_name)
    known = {f.name for f in fields(Settings)}
    settings = Settings(**{k: v for k, v in values.items() if k in known})
    if settings.state_file is not None and not settings.standalone:
        raise SettingsError(
            "--state-file: only for --standalone (in a cluster, lockd rebuilds its slots from the pods)"
        )
    return settings
