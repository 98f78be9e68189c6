"""`evict` mode when the owner's replacement is held for want of an answer: admission goes to a replica
that does not lead, which asks the leader through a connection that swallows the request (`BlackHole`, a
TCP relay in front of the leader), so the replica holds the replacement after `--admit-timeout`. The
leader must release it against its owner's reservation (grant basis `ownerReservation`) at once, not
after the reservation lapses (RESERVATION_SECONDS, a minute with nothing started in the group:
`python -m sim chaos --seed 91`), and its eviction must leave the owner one reservation, not two: another
owner's pod is still held, and the next replacement is let through against that one reservation."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sim.emulator.server import ApiServer
from stagger.groupbook import RESERVATION_SECONDS
from stagger.timestamps import parse_rfc3339
from tests.groups_api.controller import Api, running_controller
from tests.groups_api.test_evict_mode import POLICY, TIMINGS, held, metric, notes, owned, until_gone
from tests.webhook.reviews import NAMES

pytestmark = pytest.mark.e2e


class BlackHole:
    """A TCP relay to `port` on loopback; while `swallowing`, what the client sends is dropped (the
    request never reaches the leader, and no answer comes)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.swallowing = False
        self.swallowed = 0

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if upstream and self.swallowing:
                    self.swallowed += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            self._pump(reader, up_writer, upstream=True), self._pump(up_reader, writer, upstream=False)
        )

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[int]:
        """Serves on a free port for the block: that port."""
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()
            await server.wait_closed()


async def test_a_replacement_held_for_want_of_an_answer_goes_against_its_owner_s_reservation(
    tmp_path: Path,
) -> None:
    async with (
        ApiServer() as server,
        running_controller(
            server=server, tmp_path=tmp_path / "a", policies=POLICY, extra=TIMINGS, register=False
        ) as leader,
    ):
        ca = tmp_path / "leader-ca.crt"
        leader.certs.ca.cert_pem.write_to_path(str(ca))
        hole = BlackHole(int(leader.process.url.rsplit(":", 1)[1]))
        async with (
            hole.serving() as port,
            running_controller(
                server=server,
                tmp_path=tmp_path / "b",
                policies=POLICY,
                extra=(*TIMINGS, "--leader-url", f"https://127.0.0.1:{port}", "--leader-ca-file", str(ca)),
                granting=False,
            ) as follower,
        ):
            api = Api(server, follower.session)
            # Admission goes to the follower, which asks the leader: web-a goes, web-b is held.
            assert not held(await api.create_pod(owned("web-a", "web")))
            web_b = await api.create_pod(owned("web-b", "web"))
            assert held(web_b)
            first_hold = parse_rfc3339(notes(web_b)[NAMES.held_since_annotation])
            assert first_hold is not None
            await leader.until(lambda groups: groups["pods"] == 2)

            # web-a Ready: the leader evicts web-b; its place is the owner's reservation.
            await api.make_ready("web-a")
            await until_gone(api, "web-b")
            await leader.until(lambda groups: groups["reservations"]["count"] == 1)

            # The replacement's admission is forwarded and never answered: the follower holds it.
            hole.swallowing = True
            assert held(await api.create_pod(owned("web-c", "web")))
            assert hole.swallowed
            assert (
                await metric(
                    follower, 'stagger_controller_evict_admissions_total{basis="unanswered",outcome="hold"}'
                )
                == 1
            )
            hole.swallowing = False

            # The leader releases it against the reservation at once, not once the reservation lapses.
            await until_gone(api, "web-c", within=RESERVATION_SECONDS / 4)
            assert await metric(leader, 'stagger_controller_grants_total{basis="ownerReservation"}') == 1
            section = await leader.until(
                lambda groups: groups["evictions"]["evicted"] == 2 and groups["reservations"]["count"] == 1
            )
            (reservation,) = section["reservations"]["items"]  # one place, one reservation
            assert reservation["kind"] == "owner" and reservation["owner"] == "uid-web"

            # The group is still full: another owner's pod is held; the next replacement goes against the
            # one reservation, carrying the chain's first hold.
            assert held(await api.create_pod(owned("api-a", "api")))
            replacement = await api.create_pod(owned("web-d", "web"))
            assert not held(replacement), notes(replacement)
            assert notes(replacement)[NAMES.ticket_annotation] == reservation["id"]
            carried = parse_rfc3339(notes(replacement)[NAMES.held_since_annotation])
            assert carried == pytest.approx(first_hold, abs=0.01)
            await leader.until(lambda groups: groups["reservations"]["count"] == 0)
            assert held(await api.get_pod("api-a"))
