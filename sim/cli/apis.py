"""The API server a command runs its simulated cluster on: the emulator started here, a real control plane
started here (`--control-plane real`, binaries from `make control-plane`), or one already running (an
emulator's URL, or a real cluster's kubeconfig). Shared by `sim cluster` and `sim herd`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import aiohttp

from sim.cluster.backend import ApiBackend, read_metrics, requests_by_kind, requests_served
from sim.controlplane.launcher import DEFAULT_BIN_DIR, ControlPlane, MissingBinaries, missing_binaries
from sim.emulator.server import ApiServer, ApiServerSettings

ControlPlaneKind = Literal["emulator", "real"]
CONTROL_PLANES: tuple[ControlPlaneKind, ...] = ("emulator", "real")


class ApiUnavailable(Exception):
    """The API server asked for cannot be had (the real control plane's binaries are not built)."""


def add_control_plane_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="the API server started here: sim's emulator (default; sim's scheduler and workload "
        "controllers run beside it) or a real etcd, kube-apiserver, kube-controller-manager and "
        "kube-scheduler from `make control-plane` (they schedule and run the workloads; sim brings the nodes)",
    )


def check_control_plane(kind: str) -> None:
    """Raises ApiUnavailable when `kind` is `real` and the binaries are not built."""
    if kind == "real":
        missing = missing_binaries()
        if missing:
            raise ApiUnavailable(str(MissingBinaries(DEFAULT_BIN_DIR, missing)))


@dataclass(frozen=True)
class OpenApi:
    """A running API server: how to reach it, and its request counter (requests it has answered so far,
    from every client: the emulator's count, or a real API server's `apiserver_request_total`)."""

    backend: ApiBackend
    request_count: Callable[[], Awaitable[int]]
    description: str
    # The same count by "VERB resource[/sub]" (empty where there is no count).
    request_counts: Callable[[], Awaitable[dict[str, int]]] = field(default=lambda: _no_counts())


@contextlib.asynccontextmanager
async def open_api(
    kind: ControlPlaneKind,
    *,
    port: int = 0,
    kubeconfig: Path | None = None,
    api_url: str | None = None,
    api_kubeconfig: Path | None = None,
    quiet: bool = False,
    extra_args: dict[str, list[str]] | None = None,
) -> AsyncIterator[OpenApi]:
    """Start (or attach to) an API server for the duration of the block. `kubeconfig`: where to write a
    kubeconfig for one started here. `extra_args`: more flags per component of a real control plane
    started here (`{"kube-controller-manager": ["--kube-api-qps=100"]}`). `api_url` (an unauthenticated server such as the emulator) or
    `api_kubeconfig` (a real cluster, e.g. `python -m sim controlplane`): attach instead of starting."""

    def say(line: str) -> None:
        if not quiet:
            print(line, flush=True)

    if api_kubeconfig is not None:
        backend = ApiBackend.real(api_kubeconfig)
        async with aiohttp.ClientSession() as session:
            yield OpenApi(
                backend,
                _metrics_counter(backend, session),
                f"the cluster of {api_kubeconfig}",
                _metrics_counts(backend, session),
            )
        return
    if api_url is not None:
        backend = ApiBackend(api_url)
        yield OpenApi(backend, _no_counter, api_url)
        return
    if kind == "real":
        check_control_plane(kind)
        plane = ControlPlane(kubeconfig=kubeconfig, port=port or None, extra_args=extra_args)
        try:
            await plane.start_async()
            if kubeconfig is not None:
                say(f"kubeconfig: {kubeconfig}")
            print(
                f"real control plane (kubernetes {plane.version}) ready in {plane.startup_seconds:.1f}s",
                file=sys.stderr,
                flush=True,
            )
            backend = ApiBackend.real(plane.kubeconfig)
            async with aiohttp.ClientSession() as session:
                yield OpenApi(
                    backend,
                    _metrics_counter(backend, session),
                    f"{plane.server} (real)",
                    _metrics_counts(backend, session),
                )
        finally:
            await asyncio.to_thread(plane.stop)
        return
    async with ApiServer(ApiServerSettings(port=port)) as api:
        if kubeconfig is not None:
            api.write_kubeconfig(kubeconfig)
            say(f"kubeconfig: {kubeconfig}")

        async def count() -> int:
            return api.request_count

        async def counts() -> dict[str, int]:
            return {f"{verb.upper()} {resource}": n for (verb, resource), n in api.request_counts.items()}

        yield OpenApi(ApiBackend(api.url), count, api.url, counts)


async def _no_counter() -> int:
    return 0


async def _no_counts() -> dict[str, int]:
    return {}


def _metrics_counts(
    backend: ApiBackend, session: aiohttp.ClientSession
) -> Callable[[], Awaitable[dict[str, int]]]:
    async def counts() -> dict[str, int]:
        return requests_by_kind(await read_metrics(backend, session))

    return counts


def _metrics_counter(backend: ApiBackend, session: aiohttp.ClientSession) -> Callable[[], Awaitable[int]]:
    async def count() -> int:
        return requests_served(await read_metrics(backend, session))

    return count
