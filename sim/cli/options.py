"""What sim's command lines share: a parser whose help keeps the command's examples as written (every
`python -m sim` command in `sim.cli`), and the measuring commands' `--out` and `--json`, `--log-level`, and
logging set up from it (`sim herd`, `sim groups`, `sim cluster`)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def command_parser(*, prog: str, description: str | None, epilog: str) -> argparse.ArgumentParser:
    """A parser that keeps the line breaks of its description and epilog (the examples)."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """`--out` (where the PNG timeline goes) and `--json` (the results as JSON, not a table)."""
    parser.add_argument(
        "--out", type=Path, default=Path("out"), help="directory for the PNG timeline (default out/)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def add_log_level_option(parser: argparse.ArgumentParser, *, default: str = "warning") -> None:
    parser.add_argument("--log-level", default=default, choices=list(LOG_LEVELS))


def set_up_logging(*, level: str) -> None:
    """Log to stderr at ``level`` (a `--log-level` value), with times: the runs are long."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
