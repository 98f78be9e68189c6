"""`python -m tests.benchmarks.bare_app --port N`: the reference the lockd benchmarks divide by: a bare aiohttp app
answering what lockd answers on the paths measured (the same status, headers and body sizes), with no
parsing, no ledger, no metrics. Served as lockd serves (handler cancellation on, no access log)."""

from __future__ import annotations

import argparse
import json
import sys

from aiohttp import web

DENIED = json.dumps(
    {"granted": False, "reason": "1 of 1 slots in use (maxConcurrent)", "position": 1, "maxWait": 600.0}
).encode()
GRANTED = json.dumps(
    {"granted": True, "namespace": "bench", "name": "holder", "grantedAt": "2026-01-01T00:00:00.000000Z"}
).encode()


async def lock(request: web.Request) -> web.Response:
    if request.query.get("name") == "holder":
        return web.Response(body=GRANTED, content_type="application/json")
    return web.Response(
        body=DENIED, status=423, content_type="application/json", headers={"Retry-After": "1"}
    )


async def legacy(request: web.Request) -> web.Response:
    return web.Response(status=423, text="Locked", headers={"Retry-After": "1"})


async def ok(request: web.Request) -> web.Response:
    return web.Response(body=b'{"ok": true}', content_type="application/json")


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/v1/lock", lock)
    app.router.add_get("/", legacy)
    app.router.add_get("/healthz", ok)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bare_app")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    web.run_app(
        make_app(), host="127.0.0.1", port=args.port, access_log=None, handler_cancellation=True, print=None
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
