"""The start of a stagger process (lockd, the controller), the same for each: its settings from flags and
`STAGGER_...` variables (a bad one is one line on stderr and exit code 2), logging configured at the
chosen level, then its app built, where a bad policy file, certificate, token or kubeconfig is one line
naming it and exit code 2, with nothing started; then its listeners served until a signal (exit code 0),
or one line and exit code 1 if an address cannot be bound."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from aiohttp import web

from stagger.options import SettingsError
from stagger.policy import PolicyError
from stagger.serving import ListenError

__all__ = ["Refusal", "run", "start"]


class _Leveled(Protocol):
    @property
    def log_level(self) -> str: ...


S = TypeVar("S", bound=_Leveled)

Refusal = tuple[type[Exception], str]
"""An error building the app may raise, and the words before its message (e.g. "--token-file: ")."""

# Every stagger process reads a policy file when its app is built.
_BAD_POLICY: Refusal = (PolicyError, "the policy file is not valid, nothing started:\n")


def start(
    prog: str,
    *,
    argv: Sequence[str],
    parse: Callable[[Sequence[str], Mapping[str, str]], S],
    build: Callable[[S], web.Application],
    refusals: Sequence[Refusal],
) -> tuple[S, web.Application] | int:
    """The settings and the built app, or the exit code after the one line that says why not. A bad
    policy file is refused before the errors of `refusals`, in their order."""
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
    every = [_BAD_POLICY, *refusals]
    try:
        return settings, build(settings)
    except tuple(kind for kind, _ in every) as err:
        words = next(words for kind, words in every if isinstance(err, kind))
        print(f"{prog}: {words}{err}", file=sys.stderr)
        return 2


def run(
    prog: str,
    *,
    argv: Sequence[str] | None,
    parse: Callable[[Sequence[str], Mapping[str, str]], S],
    build: Callable[[S], web.Application],
    refusals: Sequence[Refusal],
    serve: Callable[[S, web.Application], Coroutine[Any, Any, None]],
) -> int:
    """A process's `main`: `start` it (`argv` None is the command line's), then run what `serve` returns
    for its settings and app until it ends. The exit code: `start`'s if it refused, 1 after one line if
    an address cannot be bound, else 0 (also after Ctrl-C)."""
    started = start(
        prog, argv=sys.argv[1:] if argv is None else argv, parse=parse, build=build, refusals=refusals
    )
    if isinstance(started, int):
        return started
    settings, application = started
    try:
        asyncio.run(serve(settings, application))
    except ListenError as err:
        print(f"{prog}: {err.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
