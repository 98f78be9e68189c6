"""The start of a stagger process (lockd, the controller), the same for each: its settings from flags and
`STAGGER_...` variables (a bad one is one line on stderr and exit code 2), logging configured at the
chosen level, then its app built, where a bad policy file, certificate, token or kubeconfig is one line
naming it and exit code 2, with nothing started."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from aiohttp import web

from stagger.options import SettingsError

__all__ = ["Refusal", "start"]


class _Leveled(Protocol):
    @property
    def log_level(self) -> str: ...


S = TypeVar("S", bound=_Leveled)

Refusal = tuple[type[Exception], str]
"""An error building the app may raise, and the words before its message (e.g. "--token-file: ")."""


def start(
    prog: str,
    *,
    argv: Sequence[str],
    parse: Callable[[Sequence[str], Mapping[str, str]], S],
    build: Callable[[S], web.Application],
    refusals: Sequence[Refusal],
) -> tuple[S, web.Application] | int:
    """The settings and the built app, or the exit code after the one line that says why not."""
    try:
        settings = parse(argv, os.environ)
    except SettingsError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return settings, build(settings)
    except tuple(kind for kind, _ in refusals) as err:
        words = next(words for kind, words in refusals if isinstance(err, kind))
        print(f"{prog}: {words}{err}", file=sys.stderr)
        return 2
