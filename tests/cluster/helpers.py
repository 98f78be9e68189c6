"""Helpers for the integration tests of the simulated cluster."""

from __future__ import annotations

from typing import Any

from stagger.kube import Resource, RestClient
from tests.waiting import eventually

__all__ = ["eventually", "list_items"]


async def list_items(client: RestClient, resource: Resource, **kwargs: Any) -> list[dict[str, Any]]:
    return list((await client.list(resource, **kwargs)).get("items") or [])
