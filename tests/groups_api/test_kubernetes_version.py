"""The controller process's start-up check of the cluster's Kubernetes version, on the API emulator: on
the emulator's own minor (within the tested ones) it logs one INFO line and `/status` `kubernetes` says
tested and supported; on an emulator that answers `/version` as 1.29 it logs a WARNING naming the version
and each missing feature (gate mode's scheduling gates among them), `/status` says supported false with
them, and the controller still starts, grants and is ready (it never refuses); without an API server the
section says why the version is unknown."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sim.emulator.resources import KUBERNETES_VERSION
from sim.emulator.server import ApiServer, ApiServerSettings
from stagger.kubeversions import format_tested
from tests.groups_api.controller import Controller, running_controller
from tests.webhook.process import Certs, running_webhook, tls_args
from tests.webhook.reviews import image_policy

pytestmark = pytest.mark.e2e

MAJOR, MINOR = KUBERNETES_VERSION


async def _probe(controller: Controller, path: str) -> tuple[int, str]:
    async with controller.session.get(controller.process.probe_url + path) as response:
        return response.status, await response.text()


async def _kubernetes(controller: Controller, line: str) -> dict[str, Any]:
    """/status `kubernetes` once the check has logged `line` (it sets the section before it logs)."""
    await asyncio.to_thread(controller.process.wait_for_line, re.compile(re.escape(line)))
    return dict((await controller.status())["kubernetes"])


async def test_on_a_tested_minor_status_says_tested_and_supported(tmp_path: Path) -> None:
    async with (
        ApiServer() as server,
        running_controller(server=server, tmp_path=tmp_path, policies=image_policy("gate")) as controller,
    ):
        version = f"v{MAJOR}.{MINOR}.0-sim"
        section = await _kubernetes(controller, f"INFO webhook.controller: Kubernetes {version} is within")
        assert section == {
            "version": version,
            "tested": format_tested(),
            "withinTested": True,
            "supported": True,
            "missing": [],
            "note": f"Kubernetes {version} is within the minors stagger is tested on ({format_tested()})",
        }
        status, page = await _probe(controller, "/metrics")
        assert status == 200
        assert f'stagger_controller_kubernetes_info{{tested="true",version="{version}"}} 1.0' in page
        assert "WARNING webhook.controller" not in controller.process.log


async def test_on_an_older_minor_it_warns_names_what_is_missing_and_runs_on(tmp_path: Path) -> None:
    async with (
        ApiServer(ApiServerSettings(kubernetes_version="1.29")) as server,
        running_controller(server=server, tmp_path=tmp_path, policies=image_policy("gate")) as controller,
    ):
        section = await _kubernetes(controller, "WARNING webhook.controller: Kubernetes v1.29.0-sim is older")
        assert section["version"] == "v1.29.0-sim"
        assert (section["withinTested"], section["supported"]) == (False, False)
        gate_mode = [s for s in section["missing"] if s.startswith("gate mode")]
        assert gate_mode == [
            "gate mode (a staggering policy with mode: gate) needs pod scheduling gates (spec.schedulingGates), "
            "GA in Kubernetes 1.30 (on by default since 1.27 unless the feature gate PodSchedulingReadiness is "
            "off); this cluster runs v1.29.0-sim"
        ]
        for sentence in section["missing"]:
            controller.process.wait_for_line(re.compile(re.escape(f"WARNING webhook.controller: {sentence}")))
        # Fail open: it started, leads, grants (running_controller waited for that) and is ready.
        assert (await controller.status())["groups"]["granting"] is True
        assert (await _probe(controller, "/readyz"))[0] == 200
        _, page = await _probe(controller, "/metrics")
        assert 'stagger_controller_kubernetes_info{tested="false",version="v1.29.0-sim"} 1.0' in page


async def test_without_an_api_server_the_version_is_unknown(tmp_path: Path) -> None:
    certs = Certs.write(tmp_path / "tls")
    policies = tmp_path / "policies.yaml"
    policies.write_text(image_policy("gate"))
    with running_webhook(*tls_args(certs), "--policies", str(policies)) as webhook:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{webhook.url}/status", ssl=certs.client_context()) as response,
        ):
            section = (await response.json())["kubernetes"]
    assert (section["version"], section["supported"]) == ("unknown", None)
    assert "no API server to ask" in section["note"]
