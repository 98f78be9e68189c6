"""`python -m webhook`: start the controller (admission over TLS, probes over plain HTTP)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from stagger import framing, kube, serving, startup
from webhook import app as controller_app
from webhook import controller
from webhook.settings import Settings, parse_settings
from webhook.tls import CertificateError
from webhook.token import TokenError


def banner(settings: Settings, main: serving.Listener, probes: serving.Listener) -> str:
    scheme = "https" if settings.tls else "http"
    host, port = main.bound()
    probe_host, probe_port = probes.bound()
    return (
        f"webhook: admission on {scheme}://{host}:{port}/mutate/pods, group grants on {scheme}://{host}:{port}/v1/groups/, "
        f"status on {scheme}://{host}:{port}/status, "
        f"probes on http://{probe_host}:{probe_port} (/healthz /readyz /metrics)"
    )


def _runner(
    app: web.Application,
    *,
    settings: Settings,
    bounds: framing.Bounds,
    access_log: logging.Logger | None,
    shed: Callable[[str], None] | None = None,
    refused: Callable[[int], None] | None = None,
) -> serving.Runner:
    return serving.make_runner(
        app,
        bounds=bounds,
        shutdown_timeout=settings.server.shutdown_timeout,
        access_log=access_log,
        owner="the controller",
        shed=shed,
        refused=refused,
    )


def serve(settings: Settings, application: web.Application) -> Coroutine[Any, Any, None]:
    """The controller's two listeners (admission, with TLS if configured, and the probes), until SIGTERM
    or SIGINT."""
    access_log = logging.getLogger("webhook.access") if settings.log_level == "debug" else None
    serving.set_tls_read_buffer(settings.server.tls_read_buffer)
    certificate = application.get(controller_app.CERTIFICATE)
    server, metrics = settings.server, application[controller_app.METRICS]
    main_bounds = framing.Bounds(
        request_timeout=server.header_timeout,
        max_body=server.max_body,
        max_connections=server.max_connections,
        body_budget=server.body_budget,
    )
    main_listener = serving.Listener(
        _runner(
            application,
            settings=settings,
            bounds=main_bounds,
            access_log=access_log,
            shed=lambda why: metrics.connections_shed.labels(why).inc(),
            refused=lambda status: metrics.requests_refused.labels(str(status)).inc(),
        ),
        settings.server.host,
        settings.server.port,
        ssl_context=certificate.context if certificate is not None else None,
    )
    probe_listener = serving.Listener(
        _runner(
            controller_app.make_probe_app(application),
            settings=settings,
            bounds=serving.PROBE_BOUNDS,
            access_log=access_log,
        ),
        settings.server.probe_host,
        settings.server.probe_port,
    )
    return serving.serve(
        main_listener,
        probe_listener,
        started=lambda: print(banner(settings, main_listener, probe_listener), file=sys.stderr, flush=True),
        stopping="stopping: finishing the requests in flight, then closing",
    )


def main(argv: list[str] | None = None) -> int:
    return startup.run(
        "webhook",
        argv=argv,
        parse=parse_settings,
        build=controller.make_app,
        refusals=[
            (CertificateError, "--tls-cert/--tls-key: "),
            (TokenError, "--token-file: "),
            (kube.ConfigError, "--kubeconfig: "),
        ],
        serve=serve,
    )


if __name__ == "__main__":
    sys.exit(main())
