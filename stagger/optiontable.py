"""The option table itself: an `Option` row per option, and the `Command` that reads a command line and the
environment by its rows (`stagger.options` has the rest: how option texts are read, the options lockd and the
controller share, settings grouped by part, and it re-exports all of this).

Apart because the init client, started in every opted-in pod, reads its options with these alone: here is
nothing of label names, paths or dataclass introspection, and argparse is imported only when there is a
command line to parse (admission starts the init client with its environment and no flags).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import argparse

__all__ = ["ENV_PREFIX", "Command", "Option", "Parse", "SettingsError", "unknown_variables"]


class SettingsError(ValueError):
    """A flag or environment variable that cannot be used; the message names it."""


Parse = Callable[[str, str], Any]
"""How an option's text is read: (text, the flag or variable it came from) -> value, or SettingsError."""


@dataclass(frozen=True)
class Option:
    flag: str
    envs: tuple[str, ...]
    dest: str  # where the value goes in the dict `Command.read` returns
    help: str
    parse: Parse
    metavar: str | None = None  # None: a switch (flag without a value; its variable takes true/false)


ENV_PREFIX = "STAGGER_"

# The variables Kubernetes sets in every container for each Service of the pod's namespace (unless the pod
# has enableServiceLinks: false): a Service named `stagger-controller` gives STAGGER_CONTROLLER_SERVICE_HOST,
# STAGGER_CONTROLLER_PORT_443_TCP_ADDR and the like. They are not ours, and are not typos.
# https://kubernetes.io/docs/tutorials/services/connect-applications-service/#environment-variables
_SERVICE_LINK = re.compile(
    r"^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$"
)


def unknown_variables(options: Sequence[Option], environ: Mapping[str, str]) -> str | None:
    """Why the environment cannot be used: `STAGGER_...` variables that no option reads (with the nearest
    known name), or None."""
    known = [env for option in options for env in option.envs if env.startswith(ENV_PREFIX)]
    unknown = sorted(
        name
        for name in environ
        if name.startswith(ENV_PREFIX) and name not in known and not _SERVICE_LINK.match(name)
    )
    if not unknown:
        return None
    described = []
    for name in unknown:
        import difflib  # only for a misspelt name: not on every start-up

        near = difflib.get_close_matches(name, known, n=1)
        described.append(f"{name} (did you mean {near[0]}?)" if near else name)
    return (
        f"unknown environment variable{'s' if len(unknown) > 1 else ''} {', '.join(described)}: "
        "no option of this version reads it (`--help` lists each option's variable)"
    )


@dataclass(frozen=True)
class Command:
    """A process's command line: its name and description for `--help`, and its table of options."""

    prog: str
    description: str
    options: tuple[Option, ...]
    epilog: str | None = None

    def parser(self) -> argparse.ArgumentParser:
        """The argparse parser of the options: each help line ends with the option's variables; a bad
        command line raises SettingsError (it does not exit). `--help` prints and exits as usual."""
        # Imported here: argparse and what building a parser loads (shutil for the terminal's width, and with it
        # locale and the compression modules) cost the init client 1.2 MiB, a fifth of what it adds to the
        # interpreter, and 4 ms, for a command line it is not given.
        import argparse

        class Parser(argparse.ArgumentParser):
            def error(self, message: str) -> NoReturn:
                raise SettingsError(message)

        parser = Parser(prog=self.prog, description=self.description, epilog=self.epilog)
        for option in self.options:
            shown = f"{option.help} [{' or '.join(option.envs)}]"
            if option.metavar is None:
                parser.add_argument(
                    option.flag, dest=option.dest, action="store_true", default=None, help=shown
                )
            else:
                parser.add_argument(option.flag, dest=option.dest, metavar=option.metavar, help=shown)
        return parser

    def _flags(self, argv: Sequence[str]) -> dict[str, Any]:
        """The command line by `dest`; none at all (no parser built) when it is empty: every value is
        then absent, as the parser would find it."""
        return vars(self.parser().parse_args(list(argv))) if argv else {}

    def read(self, argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any]:
        """The parsed value of every option given, by `dest`: from its flag, else from the first of its
        variables that is set and not empty. Options given neither way are absent (the caller's defaults
        apply). Raises SettingsError naming the flag or variable of a bad value, or the `STAGGER_...`
        variables no option reads."""
        args = self._flags(argv)
        problem = unknown_variables(self.options, environ)
        if problem is not None:
            raise SettingsError(problem)
        values: dict[str, Any] = {}
        for option in self.options:
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
        return values

    def read_each(self, argv: Sequence[str], environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
        """For a process that must start whatever it is given (the init client, whose bad settings fail
        open): every option's value as `read` reads it, except that a blank value (spaces only, e.g. an
        unset downward-API field) counts as not given and values are stripped, each bad value is one
        problem in the list returned (the other options are still read, so one message can name them all),
        and a variable that no option reads is no problem (a newer controller may set one this version does
        not know). A bad command line still raises SettingsError."""
        args = self._flags(argv)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for option in self.options:
            given = args.get(option.dest)
            if isinstance(given, str) and given.strip():
                text, where = given.strip(), option.flag
            else:
                env = next((name for name in option.envs if environ.get(name, "").strip()), None)
                if env is None:
                    continue
                text, where = environ[env].strip(), env
            try:
                values[option.dest] = option.parse(text, where)
            except SettingsError as err:
                problems.append(str(err))
        return values, problems
