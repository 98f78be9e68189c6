"""What one emulator instance holds while it runs (settings, storage, registry, webhook dispatcher,
request counters), shared by the HTTP handlers and the watch streams through the aiohttp app."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from aiohttp import web

from sim.emulator.admission import WebhookDispatcher
from sim.emulator.registry import Registry
from sim.emulator.schema import Schemas
from sim.emulator.settings import ApiServerSettings
from sim.emulator.store import Store
from sim.emulator.tokens import TokenSigner


@dataclass
class ApiState:
    settings: ApiServerSettings
    store: Store
    schemas: Schemas
    registry: Registry
    service_endpoints: dict[str, str]
    reaper_wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: bool = False  # set at shutdown: open watches end at once instead of holding the stop up
    dispatcher: WebhookDispatcher | None = None  # set when the app starts (it owns the ClientSession)
    request_total: int = 0
    request_counts: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    signer: TokenSigner = field(default_factory=TokenSigner)  # signs and checks service-account tokens


STATE = web.AppKey("apiserver_state", ApiState)
