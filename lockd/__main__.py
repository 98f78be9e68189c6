"""`python -m lockd`: start the node lock daemon."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from lockd import daemon, server
from lockd.settings import Settings, SettingsError, parse_settings
from stagger import kube, policy


def banner(settings: Settings) -> str:
    base = f"http://{settings.host}:{settings.port}"
    mode = "standalone" if settings.standalone else "cluster"
    # In a cluster only a pod of this node with its uid gets a slot: show a request that can work.
    ident = "namespace=default&name=demo" + ("" if settings.standalone else "&uid=<the pod's metadata.uid>")
    return (
        f"lockd ({mode}) on {base} for node {settings.node_name}. Try:\n"
        f"  curl -s '{base}/v1/lock?{ident}'\n"
        f"  curl -s '{base}/status?format=text'"
    )


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
        application = daemon.make_app(settings)
    except policy.PolicyError as err:
        print(f"lockd: the policy file is not valid, nothing started:\n{err}", file=sys.stderr)
        return 2
    except kube.ConfigError as err:
        print(f"lockd: cannot reach the cluster: {err} (or run with --standalone)", file=sys.stderr)
        return 2
    runner = server.make_runner(
        application,
        header_timeout=settings.header_timeout,
        shutdown_timeout=settings.shutdown_timeout,
        access_log=logging.getLogger("lockd.access") if settings.log_level == "debug" else None,
    )
    try:
        asyncio.run(
            server.serve(
                runner,
                host=settings.host,
                port=settings.port,
                started=lambda: print(banner(settings), file=sys.stderr, flush=True),
            )
        )
    except server.ListenError as err:
        print(f"lockd: {err.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
