"""Settings of the init client: flags, each also from an environment variable; flags win.

Parsing never exits the process: every problem becomes a `ConfigError`, because the caller
must turn it into one line and a zero exit code (an init container must not wedge its pod).
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import urlsplit

from stagger.durations import DurationError, format_duration, parse_duration

__all__ = ["MAX_DURATION", "MAX_POLL_WAIT", "ConfigError", "Settings", "parse_settings"]

# lockd refuses a longer long poll (GET /v1/lock accepts wait=0..60).
MAX_POLL_WAIT = 60.0
# No wait, backoff or timeout is longer. A larger STAGGER_MAX_WAIT (say 99999999999999999999h) overflowed the
# backstop timer (setitimer: OverflowError), and the init client died with a traceback instead of failing
# open: the pod's start-up failed, again and again.
MAX_DURATION = 365 * 24 * 3600.0

_PLAIN_SECONDS = re.compile(r"\d+(?:\.\d+)?|\.\d+")
# Kubernetes expands $(VAR) in env values and args from the variables defined before it, and leaves it
# as it is when there is no such variable (e.g. HOST_IP without its fieldRef: status.hostIP).
_UNEXPANDED = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_DNS_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


class ConfigError(ValueError):
    """The configuration is unusable; the message names every bad flag/variable."""


@dataclass(frozen=True)
class Settings:
    lockd_url: str  # without a trailing slash
    namespace: str
    name: str
    uid: str | None = None
    max_wait: float = 600.0  # give up (fail-open) after this many seconds
    poll_wait: float = 30.0  # long-poll seconds asked of lockd per request
    max_backoff: float = 10.0  # cap of the retry delay after errors
    request_timeout: float = 10.0  # HTTP timeout on top of poll_wait
    # Where to write lockd's release token (mode 0600) on a grant, for whatever gives the slot back.
    release_token_file: str | None = None


@dataclass(frozen=True)
class _Option:
    flag: str
    env: str
    dest: str
    help: str


_OPTIONS: tuple[_Option, ...] = (
    _Option("--lockd-url", "STAGGER_LOCKD_URL", "lockd_url", "lockd base URL, e.g. http://10.0.0.5:8080"),
    _Option("--namespace", "POD_NAMESPACE", "namespace", "namespace of this pod"),
    _Option("--name", "POD_NAME", "name", "name of this pod"),
    _Option("--uid", "POD_UID", "uid", "UID of this pod (optional)"),
    _Option(
        "--max-wait",
        "STAGGER_MAX_WAIT",
        "max_wait",
        "give up and proceed after this (default 10m; a smaller maxWait of the node policy wins)",
    ),
    _Option(
        "--poll-wait", "STAGGER_POLL_WAIT", "poll_wait", "long-poll seconds per request, 0..60 (default 30)"
    ),
    _Option(
        "--max-backoff",
        "STAGGER_MAX_BACKOFF",
        "max_backoff",
        "cap of the retry delay after errors (default 10s)",
    ),
    _Option(
        "--request-timeout",
        "STAGGER_REQUEST_TIMEOUT",
        "request_timeout",
        "HTTP timeout on top of the poll wait (default 10s)",
    ),
    _Option(
        "--release-token-file",
        "STAGGER_RELEASE_TOKEN_FILE",
        "release_token_file",
        "on a grant, write lockd's release token to this file (mode 0600), e.g. on a shared emptyDir, so "
        "the pod can give its slot back with DELETE /v1/lock (standalone lockd)",
    ),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse would print usage and exit 2, which would fail the pod's start-up.
        raise ConfigError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m initclient",
        description=(
            "Wait for a start-up slot from the node's lockd, then exit 0. Also exits 0 (fail-open, "
            "with one warning line) after max-wait, when lockd rejects the request, or on bad config."
        ),
        epilog="Durations accept 90s, 10m, 1h30m, 500ms or plain seconds.",
    )
    for option in _OPTIONS:
        parser.add_argument(
            option.flag, dest=option.dest, metavar="VALUE", help=f"{option.help} [env {option.env}]"
        )
    return parser


def _duration(text: str, *, path: str) -> float:
    stripped = text.strip()
    # stagger.durations wants a unit on strings; the env contract also allows bare seconds ("600").
    return parse_duration(float(stripped) if _PLAIN_SECONDS.fullmatch(stripped) else stripped, path=path)


def _unexpanded(value: str) -> str | None:
    names = _UNEXPANDED.findall(value)
    if not names:
        return None
    refs = list(dict.fromkeys(f"$({name})" for name in names))
    return (
        f"{', '.join(refs)} {'was' if len(refs) == 1 else 'were'} not expanded: Kubernetes leaves $(VAR) as it is when VAR is not defined before it "
        f"in the container's env (got {value!r})"
    )


def _is_text(value: str) -> bool:
    """Python hands environment bytes that are not UTF-8 over as lone surrogates; such a POD_NAME made
    requests raise UnicodeEncodeError while building the URL, a traceback instead of failing open."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad_host(host: str) -> bool:
    """Not an IP address and not a DNS name (`urlsplit` gives hosts lower-cased, IPv6 without brackets)."""
    try:
        ipaddress.ip_address(host)
        return False
    except ValueError:
        pass
    name = host.removesuffix(".")
    if not name or len(name) > 253 or re.fullmatch(r"[0-9.]+", name):  # digits and dots: a bad IPv4
        return True
    return not all(_DNS_LABEL.fullmatch(label) for label in name.split("."))


def _check_url(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError as err:  # e.g. an unclosed "[" of an IPv6 address
        return f"not a valid URL: {err} (got {url!r})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"not an http(s) URL with a host (got {url!r})"
    if _bad_host(parts.hostname):
        return f"{parts.hostname!r} is not a host name or IP address (got {url!r})"
    if parts.query or parts.fragment:
        return f"must not have a query or fragment (got {url!r})"
    try:
        parts.port  # noqa: B018  # raises on a bad port; that is the check
    except ValueError:
        return f"has a bad port (got {url!r})"
    return None


def parse_settings(argv: Sequence[str], env: Mapping[str, str]) -> Settings:
    """Settings from flags, falling back to env vars; raises ConfigError naming every problem."""
    flags = vars(_parser().parse_args(list(argv)))
    raw: dict[str, tuple[str, str]] = {}  # dest -> (value, where it came from)
    for option in _OPTIONS:
        flag_value = flags[option.dest]
        # An empty value (e.g. an unset downward-API field) means "not given".
        if flag_value is not None and flag_value.strip():
            raw[option.dest] = (flag_value.strip(), option.flag)
        elif env.get(option.env, "").strip():
            raw[option.dest] = (env[option.env].strip(), option.env)

    errors: list[str] = []
    for option in _OPTIONS[:3]:
        if option.dest not in raw:
            errors.append(f"{option.env} (or {option.flag}) is required")
    for dest, (value, where) in list(raw.items()):
        if not _is_text(value):
            errors.append(f"{where}: not valid UTF-8 (got {value!r})")
            del raw[dest]
        elif problem := _unexpanded(value):
            errors.append(f"{where}: {problem}")
            del raw[dest]  # one line about it; its other checks would only repeat it

    url = raw.get("lockd_url", ("", ""))[0].rstrip("/")
    if "lockd_url" in raw and (problem := _check_url(url)):
        errors.append(f"{raw['lockd_url'][1]}: {problem}")

    durations: dict[str, float] = {}
    for dest in ("max_wait", "poll_wait", "max_backoff", "request_timeout"):
        if dest not in raw:
            continue
        value, where = raw[dest]
        try:
            durations[dest] = _duration(value, path=where)
        except DurationError as exc:
            errors.append(str(exc))
    limits = {
        "poll_wait": (0.0, MAX_POLL_WAIT),
        "max_backoff": (0.001, None),
        "request_timeout": (0.001, None),
    }
    for dest, (low, high) in limits.items():
        if dest not in durations:
            continue
        where, seconds = raw[dest][1], durations[dest]
        if seconds < low or (high is not None and seconds > high):
            span = f"between {format_duration(low)} and {format_duration(high)}" if high else "positive"
            errors.append(f"{where}: must be {span} (got {raw[dest][0]!r})")

    for dest, seconds in durations.items():
        if seconds > MAX_DURATION and limits.get(dest, (0.0, None))[1] is None:  # poll_wait has its own
            where = raw[dest][1]
            errors.append(f"{where}: must be at most {format_duration(MAX_DURATION)} (got {raw[dest][0]!r})")

    if errors:
        raise ConfigError("; ".join(errors))
    defaults = Settings(lockd_url=url, namespace=raw["namespace"][0], name=raw["name"][0])
    return Settings(
        lockd_url=url,
        namespace=defaults.namespace,
        name=defaults.name,
        uid=raw["uid"][0] if "uid" in raw else None,
        max_wait=durations.get("max_wait", defaults.max_wait),
        poll_wait=durations.get("poll_wait", defaults.poll_wait),
        max_backoff=durations.get("max_backoff", defaults.max_backoff),
        request_timeout=durations.get("request_timeout", defaults.request_timeout),
        release_token_file=raw["release_token_file"][0] if "release_token_file" in raw else None,
    )
