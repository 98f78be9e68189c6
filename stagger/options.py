"""A process's command-line options as one table: each option is read from its flag or, failing that, from
its `STAGGER_...` environment variable, and its text is parsed by the row's parser.

A process (lockd, the controller) describes every option once, as an `Option` row: its flag, the
variables it may also come from, its help and how its text is read. The argparse parser (whose help shows
each option's variables), the environment lookup and the parsing all come from those rows, so a new
option is one line. Flags win over environment variables, which win over the defaults (the process's own
settings dataclass). Every problem is a `SettingsError` whose message starts with the flag or the
variable the bad text came from, and a `STAGGER_...` variable that no option reads is one too: a misspelt
variable in a manifest would otherwise be ignored without a word and its default used.

The rows and their reading (`Option`, `Command`, `SettingsError`, `unknown_variables`) are defined in
`stagger.optiontable`, which the init client imports alone to keep its start small, and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stagger import addresses, durations
from stagger.names import DEFAULT_PREFIX, DEFAULT_TOKEN_AUDIENCE, Names
from stagger.optiontable import Command, Option, Parse, SettingsError, unknown_variables

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "HEADER_TIMEOUT",
    "LOG_LEVEL",
    "PREFIX",
    "TOKEN_AUDIENCE",
    "Command",
    "Option",
    "Parse",
    "SettingsError",
    "boolean",
    "file_path",
    "grouped",
    "host_port",
    "http_url",
    "key_values",
    "label_prefix",
    "one_of",
    "regrouped",
    "seconds",
    "split_host_port",
    "text",
    "unknown_variables",
    "whole",
]


T = TypeVar("T", bound="DataclassInstance")


# --- how option texts are read -------------------------------------------------------------------------


def boolean(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"", "0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}: expected true or false (got {text!r})")


def host_port(text: str, name: str) -> tuple[str, int]:
    try:
        return addresses.parse_host_port(text, name=name)
    except ValueError as err:
        raise SettingsError(str(err)) from err


def key_values(text: str, name: str) -> tuple[tuple[str, str], ...]:
    """`k=v,k2=v2` as pairs (empty items are skipped)."""
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"{name}: expected key=value[,key=value] (got {item!r})")
        pairs.append((key, value))
    return tuple(pairs)


def whole(minimum: int, *, maximum: int | None = None) -> Parse:
    def parse(text: str, name: str) -> int:
        if not text.isascii() or not text.isdigit() or int(text) < minimum:
            raise SettingsError(f"{name}: expected a whole number of at least {minimum} (got {text!r})")
        if maximum is not None and int(text) > maximum:
            raise SettingsError(f"{name}: must be at most {maximum} (got {text!r})")
        return int(text)

    return parse


def seconds(*, at_most: float | None = None) -> Parse:
    """A duration (`5s`, `1m30s`, or plain seconds), greater than 0 and at most `at_most`."""

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


def file_path(text: str, name: str) -> Path:
    return Path(text)


def text(text: str, name: str) -> str:
    return text


def audience(text: str, name: str) -> str:
    """A token audience: any non-empty text without white space (a URL, often)."""
    if not text or any(c.isspace() for c in text):
        raise SettingsError(f"{name}: must be non-empty, without spaces (got {text!r})")
    return text


def one_of(*choices: str) -> Parse:
    """One of `choices`, case-insensitive; returned in lower case."""

    def parse(text: str, name: str) -> str:
        if text.lower() not in choices:
            raise SettingsError(f"{name}: must be {' or '.join(choices)} (got {text!r})")
        return text.lower()

    return parse


def label_prefix(text: str, name: str) -> str:
    """The label/annotation prefix of `stagger.names.Names`."""
    try:
        Names(text)
    except ValueError as err:
        raise SettingsError(f"--{err}") from err
    return text


def http_url(text: str, name: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise SettingsError(f"{name}: must start with http:// or https:// (got {text!r})")
    return text


# --- options lockd and the controller share ------------------------------------------------------------


# Options that lockd and the controller share, defined once.
HEADER_TIMEOUT = Option(
    "--header-timeout", ("STAGGER_HEADER_TIMEOUT",), "header_timeout",
    "a connection must send a whole request within this, and idle connections close after it (default 10s)",
    seconds(), "DURATION",
)  # fmt: skip
PREFIX = Option(
    "--prefix", ("STAGGER_PREFIX",), "prefix", f"label/annotation prefix (default {DEFAULT_PREFIX})",
    label_prefix, "PREFIX",
)  # fmt: skip
TOKEN_AUDIENCE = Option(
    "--token-audience", ("STAGGER_TOKEN_AUDIENCE",), "token_audience",
    f"audience of the pod's service-account token that the init client shows lockd (default {DEFAULT_TOKEN_AUDIENCE}; "
    "the same for lockd and the controller)", audience, "AUDIENCE",
)  # fmt: skip
LOG_LEVEL = Option(
    "--log-level", ("STAGGER_LOG_LEVEL",), "log_level", "debug, info, warning or error (default info)",
    one_of("debug", "info", "warning", "error"), "LEVEL",
)  # fmt: skip


def split_host_port(values: dict[str, Any], dest: str, *, host: str, port: str) -> None:
    """Moves a `host_port` option's value, if given, from `dest` in `values` (as `Command.read` returns
    them) to the two settings `host` and `port`: the command line writes one HOST:PORT, the settings keep
    its parts apart."""
    if dest in values:
        values[host], values[port] = values.pop(dest)


# --- settings grouped by part --------------------------------------------------------------------------


def _groups(cls: type[Any]) -> dict[str, type[Any]]:
    """The fields of the settings dataclass `cls` that are groups (dataclasses themselves), by name."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


def _names(cls: type[Any]) -> set[str]:
    groups = _groups(cls)
    top = {f.name for f in dataclasses.fields(cls) if f.name not in groups}
    return top.union(*({f.name for f in dataclasses.fields(group)} for group in groups.values()))


def _check_names(cls: type[Any], values: Mapping[str, Any]) -> None:
    """A misspelt setting is a bug in the caller: said at once, not dropped."""
    unknown = set(values) - _names(cls)
    if unknown:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(sorted(unknown))}")


def grouped(cls: type[T], values: Mapping[str, Any]) -> T:
    """The settings dataclass `cls` from flat values by option `dest`: a field that is a group (a frozen
    dataclass, as kopf groups its settings) is built from the values named like its own fields, the other
    fields from the value of their name; what is not given keeps its default. Field names are unique
    across the groups, so that an option's `dest` is its field's name wherever it lives."""
    _check_names(cls, values)
    groups = _groups(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in groups:
            group = groups[f.name]
            kwargs[f.name] = group(
                **{g.name: values[g.name] for g in dataclasses.fields(group) if g.name in values}
            )
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def regrouped(settings: T, **values: Any) -> T:
    """`settings` with the given settings changed, named flat as in `grouped` (tests and tools build a
    variant this way: `regrouped(settings, node_name="n")`)."""
    cls = type(settings)
    _check_names(cls, values)
    groups = _groups(cls)
    top = {f.name for f in dataclasses.fields(cls) if f.name not in groups}
    changes: dict[str, Any] = {k: v for k, v in values.items() if k in top}
    for name, group in groups.items():
        mine = {g.name: values[g.name] for g in dataclasses.fields(group) if g.name in values}
        if mine:
            changes[name] = dataclasses.replace(getattr(settings, name), **mine)
    return dataclasses.replace(settings, **changes)
