"""A forger of AdmissionReviews, run as its own process (`python -m tests.hostile.forger`) as an attacker's pod
would be: it posts made-up reviews of evict-mode pods (a made-up ReplicaSet owner each, never created) to a
controller's `/mutate/pods` at a fixed rate for a bounded time, with no credentials, and prints one JSON
line: every answer's HTTP status, seconds and whether it let the pod through.

Every request is bounded (`--timeout`): the forger ends by itself even when the controller does not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import aiohttp

from tests.webhook.reviews import NAMES, enabled, pod, review


def ghost(number: int) -> dict[str, Any]:
    obj = pod(f"ghost-{number}", labels=enabled(app="web"))
    # A bare pod is never held in evict mode (an eviction would delete it for good), so it would claim
    # nothing: the forger makes up an owner too.
    obj["metadata"]["uid"] = str(uuid.uuid4())
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "ghost",
            "uid": str(uuid.uuid4()),
            "controller": True,
        }
    ]
    return obj


async def _forge(
    session: aiohttp.ClientSession, url: str, number: int, *, context: ssl.SSLContext, bound: float
) -> list[Any]:
    began = time.monotonic()
    try:
        async with session.post(
            url, json=review(ghost(number)), ssl=context, timeout=aiohttp.ClientTimeout(total=bound)
        ) as response:
            answer = await response.json()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as err:
        return [type(err).__name__, time.monotonic() - began, False]
    return [status, time.monotonic() - began, _let_through(answer)]


def _let_through(answer: dict[str, Any]) -> bool:
    """Whether the answer lets the pod through with a ticket (its place claimed), by its JSON Patch."""
    encoded = answer.get("response", {}).get("patch")
    if not isinstance(encoded, str):
        return False
    patch = base64.b64decode(encoded).decode()
    key = NAMES.ticket_annotation
    return key in patch or key.replace("~", "~0").replace("/", "~1") in patch


async def forge(url: str, *, ca: str, rate: float, seconds: float, bound: float) -> list[list[Any]]:
    """`rate` reviews a second for `seconds`, on a fixed schedule (a slow answer does not slow the flood)."""
    context = ssl.create_default_context(cafile=ca)
    async with aiohttp.ClientSession() as session:
        began = time.monotonic()
        sent = []
        for number in range(int(rate * seconds)):
            delay = began + number / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule itself
            sent.append(asyncio.create_task(_forge(session, url, number, context=context, bound=bound)))
        return list(await asyncio.gather(*sent))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hostile.forger", description=__doc__)
    parser.add_argument("url", help="the controller's /mutate/pods URL")
    parser.add_argument("--ca", required=True, help="CA file (PEM) of the controller's certificate")
    parser.add_argument("--rate", type=float, default=100.0, help="reviews a second")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long")
    parser.add_argument("--timeout", type=float, default=10.0, help="bound on each request")
    args = parser.parse_args(argv)
    answers = asyncio.run(
        forge(args.url, ca=args.ca, rate=args.rate, seconds=args.seconds, bound=args.timeout)
    )
    print(json.dumps({"answers": answers}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
