"""How the real kube-apiserver reaches Services on loopback: an HTTP CONNECT proxy on its "cluster" egress.

A webhook configured by `clientConfig.service` (as Helm installs it) is called at the Service's ClusterIP
and port, with TLS verified for `<service>.<namespace>.svc`. On a real node kube-proxy and the pod network
carry that connection to a ready endpoint; this test bed has neither, so the apiserver is started with an
EgressSelectorConfiguration whose `cluster` selection sends such connections through this proxy (the way
konnectivity does on clusters whose control plane sits outside the pod network), and the proxy forwards
each `CONNECT <clusterIP>:<port>` (over a Unix socket: the apiserver speaks HTTP CONNECT over TCP only
with client certificates) to the loopback address a test routes it to: where the process standing
in for the Service's pod listens. Service-referenced webhooks dial with the `cluster` network context
(k8s.io/apiserver/pkg/util/webhook/authentication.go, ClientConfigForServiceFunc); URL-referenced ones use
`controlplane`, which stays direct, so the rest of the test bed is unaffected.

https://kubernetes.io/docs/tasks/extend-kubernetes/setup-konnectivity/ shows the configuration's shape.
A connection to an address nobody routed is refused (502), as a Service without ready endpoints is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from pathlib import Path

import yaml

logger = logging.getLogger(__name__)

Address = tuple[str, int]

HEADER_LIMIT = 8192
HEADER_TIMEOUT_SECONDS = 10.0


class ServiceProxy:
    """`routes[(cluster_ip, port)]` lists the loopback addresses that stand in for the Service's ready
    endpoints; each connection picks one at random (kube-proxy's iptables mode does the same)."""

    def __init__(self, *, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.routes: dict[Address, list[Address]] = {}
        self.connections: list[Address] = []
        """Every CONNECT target asked for, in order (routed or not)."""
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    def route(self, target: Address, backends: Sequence[Address]) -> None:
        self.routes[target] = list(backends)

    async def start(self) -> ServiceProxy:
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def __aenter__(self) -> ServiceProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def egress_config(self, path: Path) -> Path:
        """Writes the apiserver's EgressSelectorConfiguration (`--egress-selector-config-file`) for this
        proxy and returns its path."""
        config = {
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [
                {
                    "name": "cluster",
                    "connection": {
                        "proxyProtocol": "HTTPConnect",
                        "transport": {"uds": {"udsName": str(self.socket_path)}},
                    },
                }
            ],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._pipes.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_SECONDS)
        if len(head) > HEADER_LIMIT:
            writer.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
            return
        method, _, rest = head.decode("latin-1").partition(" ")
        authority = rest.partition(" ")[0]
        host, _, port_text = authority.rpartition(":")
        if method != "CONNECT" or not port_text.isdigit():
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        target = (host.strip("[]"), int(port_text))
        self.connections.append(target)
        backends = self.routes.get(target)
        if not backends:
            logger.info("CONNECT %s:%d: no route (no ready endpoint)", *target)
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        backend = random.choice(backends)
        try:
            up_reader, up_writer = await asyncio.open_connection(*backend)
        except OSError as err:
            logger.info("CONNECT %s:%d → %s:%d: %s", *target, *backend, err)
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
