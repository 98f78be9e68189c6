"""Settings of the init client: flags, each also from an environment variable; flags win. The options are
rows of the table lockd and the controller describe theirs with, taken from `stagger.optiontable` (which
`stagger.options` re-exports) so that the init client does not import the rest of `stagger.options`.

Parsing never exits the process: every problem becomes a `ConfigError` naming every bad or missing value
at once, because the caller must turn it into one line and a zero exit code (an init container must not
wedge its pod). Unlike lockd and the controller, an unknown `STAGGER_...` variable is no error here: a
newer controller may inject one this image does not know, and the pod must still start.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from stagger.durations import DurationError, format_duration, parse_duration
from stagger.optiontable import Command, Option, Parse, SettingsError

__all__ = [
    "DEFAULT_TERMINATION_LOG",
    "MAX_DURATION",
    "MAX_POLL_WAIT",
    "ConfigError",
    "Settings",
    "parse_settings",
]

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


# Kubernetes' default terminationMessagePath: the kubelet mounts a file there in every container and copies
# what is written to it into the container's status, where the controller reads why a pod failed open.
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


class ConfigError(SettingsError):
    """The configuration is unusable; the message names every bad flag/variable. `termination_log` is
    where to say so all the same (the setting's value when it was readable)."""

    def __init__(self, message: str, *, termination_log: str = DEFAULT_TERMINATION_LOG) -> None:
        super().__init__(message)
        self.termination_log = termination_log


@dataclass(frozen=True)
class Settings:
    lockd_url: str  # without a trailing slash
    namespace: str
    name: str
    uid: str | None = None
    max_wait: float = 600.0  # give up (fail-open) after this many seconds
    # Give up sooner while lockd cannot decide (no connection, 5xx, not ready), counted from its last
    # queue answer: a node whose lockd is down or crash-looping does not hold its pods for max-wait.
    unreachable_wait: float = 60.0
    poll_wait: float = 30.0  # long-poll seconds asked of lockd per request
    max_backoff: float = 10.0  # cap of the retry delay after errors
    # Time for each whole request on top of poll_wait: connect, send and the whole answer, one deadline,
    # so a lockd that answers a byte at a time is as unreachable as one that does not answer.
    request_timeout: float = 10.0
    # Where to write lockd's release token (mode 0600) on a grant, for whatever gives the slot back.
    release_token_file: str | None = None
    # Where the outcome goes for the controller (stagger.contracts.failopen); empty: nowhere.
    termination_log: str = DEFAULT_TERMINATION_LOG
    # The pod's projected service-account token (audience stagger's), sent to lockd as its proof of
    # who asks; read at each request, since the kubelet replaces it before it expires.
    pod_token_file: str | None = None


def _checked(parse: Parse) -> Parse:
    """`parse` for a value that is text as Kubernetes hands it over: valid UTF-8, every $(VAR) expanded."""

    def checked(value: str, where: str) -> object:
        if not _is_text(value):
            raise SettingsError(f"{where}: not valid UTF-8 (got {value!r})")
        if problem := _unexpanded(value):
            raise SettingsError(f"{where}: {problem}")  # one line about it; other checks would repeat it
        return parse(value, where)

    return checked


def _text(value: str, where: str) -> str:
    return value


def _lockd_url(value: str, where: str) -> str:
    url = value.rstrip("/")
    if problem := _check_url(url):
        raise SettingsError(f"{where}: {problem}")
    return url


def _seconds(*, low: float | None = None, high: float = MAX_DURATION, span: str = "") -> Parse:
    """A duration (with a unit, or bare seconds), at least `low` (when given) and at most `high`."""

    def parse(value: str, where: str) -> float:
        try:
            seconds = _duration(value, path=where)
        except DurationError as err:
            raise SettingsError(str(err)) from err
        if (low is not None and seconds < low) or seconds > high:
            shown = span or f"at most {format_duration(high)}"
            raise SettingsError(f"{where}: must be {shown} (got {value!r})")
        return seconds

    return parse


_OPTIONS: tuple[Option, ...] = (
    Option("--lockd-url", ("STAGGER_LOCKD_URL",), "lockd_url", "lockd base URL, e.g. http://10.0.0.5:8080",
           _checked(_lockd_url), "URL"),
    Option("--namespace", ("POD_NAMESPACE",), "namespace", "namespace of this pod", _checked(_text), "NAME"),
    Option("--name", ("POD_NAME",), "name", "name of this pod", _checked(_text), "NAME"),
    Option("--uid", ("POD_UID",), "uid", "UID of this pod (optional)", _checked(_text), "UID"),
    Option("--max-wait", ("STAGGER_MAX_WAIT",), "max_wait",
           "give up and proceed after this (default 10m; a smaller maxWait of the node policy wins)",
           _checked(_seconds()), "DURATION"),
    Option("--unreachable-wait", ("STAGGER_UNREACHABLE_WAIT",), "unreachable_wait",
           "give up and proceed after this while lockd cannot decide: no connection, 5xx or not ready "
           "(default 1m; counted from lockd's last queue answer)", _checked(_seconds(low=0.001, span="positive")),
           "DURATION"),
    Option("--poll-wait", ("STAGGER_POLL_WAIT",), "poll_wait", "long-poll seconds per request, 0..60 (default 30)",
           _checked(_seconds(low=0.0, high=MAX_POLL_WAIT, span="between 0s and 1m")), "DURATION"),
    Option("--max-backoff", ("STAGGER_MAX_BACKOFF",), "max_backoff",
           "cap of the retry delay after errors (default 10s)", _checked(_seconds(low=0.001, span="positive")),
           "DURATION"),
    Option("--request-timeout", ("STAGGER_REQUEST_TIMEOUT",), "request_timeout",
           "time for each whole request (connect, send, the whole answer) on top of the poll wait (default 10s)",
           _checked(_seconds(low=0.001, span="positive")),
           "DURATION"),
    Option("--release-token-file", ("STAGGER_RELEASE_TOKEN_FILE",), "release_token_file",
           "on a grant, write lockd's release token to this file (mode 0600), e.g. on a shared emptyDir, so "
           "the pod can give its slot back with DELETE /v1/lock (standalone lockd)", _checked(_text), "FILE"),
    Option("--pod-token-file", ("STAGGER_POD_TOKEN_FILE",), "pod_token_file",
           "the pod's projected service-account token, sent to lockd as proof that the pod itself asks "
           "(admission mounts it; without it lockd checks the pod's name and uid only)", _checked(_text), "FILE"),
    Option("--termination-log", ("STAGGER_TERMINATION_LOG",), "termination_log",
           "write the outcome (granted, or why not) here for the pod's status; empty: nowhere "
           f"(default {DEFAULT_TERMINATION_LOG}, the container's terminationMessagePath)", _checked(_text), "FILE"),
)  # fmt: skip
_REQUIRED = ("lockd_url", "namespace", "name")


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


_COMMAND = Command(
    prog="python -m initclient",
    description=(
        "Wait for a start-up slot from the node's lockd, then exit 0. Also exits 0 (fail-open, "
        "with one warning line) after max-wait, when lockd rejects the request, or on bad config."
    ),
    options=_OPTIONS,
    epilog="Durations accept 90s, 10m, 1h30m, 500ms or plain seconds.",
)


def parse_settings(argv: Sequence[str], env: Mapping[str, str]) -> Settings:
    """Settings from flags, falling back to env vars; raises ConfigError naming every problem."""
    try:
        values, problems = _COMMAND.read_each(argv, env)
    except SettingsError as err:  # the command line itself (an unknown flag, a flag without its value)
        raise ConfigError(str(err)) from err
    missing = [
        f"{option.envs[0]} (or {option.flag}) is required"
        for option in _OPTIONS
        if option.dest in _REQUIRED
        and option.dest not in values
        and not any(
            problem.startswith((f"{option.flag}:", *(f"{e}:" for e in option.envs))) for problem in problems
        )
    ]
    if missing or problems:
        where = values.get("termination_log", DEFAULT_TERMINATION_LOG)
        raise ConfigError("; ".join(missing + problems), termination_log=str(where))
    return Settings(**values)
