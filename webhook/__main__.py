"""`python -m webhook`: start the controller (admission over TLS, probes over plain HTTP)."""

from __future__ import annotations

import asyncio
import logging
import sys

from stagger import kube, policy, serving, startup
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


def main(argv: list[str] | None = None) -> int:
    started = startup.start(
        "webhook",
        argv=sys.argv[1:] if argv is None else argv,
        parse=parse_settings,
        build=controller.make_app,
        refusals=[
            (policy.PolicyError, "the policy file is not valid, nothing started:\n"),
            (CertificateError, "--tls-cert/--tls-key: "),
            (TokenError, "--token-file: "),
            (kube.ConfigError, "--kubeconfig: "),
        ],
    )
    if isinstance(started, int):
        return started
    settings, application = started
    access_log = logging.getLogger("webhook.access") if settings.log_level == "debug" else None
    certificate = application.get(controller_app.CERTIFICATE)
    main_listener = serving.Listener(
        serving.make_runner(
            application,
            header_timeout=settings.server.header_timeout,
            shutdown_timeout=settings.server.shutdown_timeout,
            access_log=access_log,
            owner="the controller",
        ),
        settings.server.host,
        settings.server.port,
        ssl_context=certificate.context if certificate is not None else None,
    )
    probe_listener = serving.Listener(
        serving.make_runner(
            controller_app.make_probe_app(application),
            header_timeout=settings.server.header_timeout,
            shutdown_timeout=settings.server.shutdown_timeout,
            access_log=access_log,
            owner="the controller",
        ),
        settings.server.probe_host,
        settings.server.probe_port,
    )
    try:
        asyncio.run(
            serving.serve(
                main_listener,
                probe_listener,
                started=lambda: print(
                    banner(settings, main_listener, probe_listener), file=sys.stderr, flush=True
                ),
                stopping="stopping: finishing the requests in flight, then closing",
            )
        )
    except serving.ListenError as err:
        print(f"webhook: {err.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
