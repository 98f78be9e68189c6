"""`python -m lockd`: start the node lock daemon."""

from __future__ import annotations

import logging
import os
import sys

from aiohttp import web

from lockd import app as lockd_app
from lockd.settings import SettingsError, parse_settings
from stagger import kube, policy


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as err:
        print(f"lockd: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        application = lockd_app.make_app(settings)
    except policy.PolicyError as err:
        print(f"lockd: the policy file is not valid, nothing started:\n{err}", file=sys.stderr)
        return 2
    except kube.ConfigError as err:
        print(f"lockd: cannot reach the cluster: {err} (or run with --standalone)", file=sys.stderr)
        return 2
    print(
        f"lockd ({'standalone' if settings.standalone else 'cluster'}) on http://{settings.host}:{settings.port} "
        f"for node {settings.node_name}. Try:\n"
        f"  curl -s 'http://{settings.host}:{settings.port}/v1/lock?namespace=default&name=demo'\n"
        f"  curl -s 'http://{settings.host}:{settings.port}/status?format=text'",
        file=sys.stderr,
        flush=True,
    )
    web.run_app(
        application,
        host=settings.host,
        port=settings.port,
        shutdown_timeout=settings.shutdown_timeout,
        access_log=logging.getLogger("lockd.access") if settings.log_level == "debug" else None,
        print=None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
