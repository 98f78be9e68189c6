"""The controller's start-up check of the API server's version (`webhook.controller.check_kubernetes_version`)
on a stand-in client: what it logs (INFO within or above the tested minors, a WARNING naming each missing
feature below them, a WARNING and "unknown" when `/version` fails or does not answer in time), the
`kubernetes` section of `/status`, and `stagger_controller_kubernetes_info` (no sample while unknown)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
from aiohttp import web

from stagger import kube
from webhook.app import METRICS
from webhook.controller import KUBERNETES, KubernetesVersion, check_kubernetes_version, kubernetes_section
from webhook.metrics import Metrics

INFO_METRIC = "stagger_controller_kubernetes_info"


class Client:
    """Answers GET /version with `answer`, raises it when it is an exception, or never answers (None)."""

    def __init__(self, answer: dict[str, Any] | Exception | None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.asked.append((method, path))
        if self.answer is None:
            await asyncio.Event().wait()  # an API server that never answers
        if isinstance(self.answer, Exception):
            raise self.answer
        assert self.answer is not None
        return self.answer


def _app() -> web.Application:
    app = web.Application()
    app[METRICS] = Metrics()
    app[KUBERNETES] = KubernetesVersion()
    return app


async def _check(app: web.Application, answer: dict[str, Any] | Exception | None) -> Client:
    client = Client(answer)
    await check_kubernetes_version(app, cast(kube.RestClient, client), within=0.05)
    return client


def _samples(app: web.Application) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["version"], sample.labels["tested"]): sample.value
        for metric in app[METRICS].registry.collect()
        if metric.name == INFO_METRIC
        for sample in metric.samples
    }


def version(minor: int, git_version: str) -> dict[str, Any]:
    return {"major": "1", "minor": f"{minor}+", "gitVersion": git_version, "platform": "linux/amd64"}


@pytest.mark.parametrize(
    ("answer", "level", "logged", "section", "samples"),
    [
        pytest.param(
            version(35, "v1.35.1-gke.7"),
            logging.INFO,
            "Kubernetes v1.35.1-gke.7 is within the minors stagger is tested on (1.34 to 1.37)",
            {"version": "v1.35.1-gke.7", "withinTested": True, "supported": True, "missing": []},
            {("v1.35.1-gke.7", "true"): 1.0},
            id="tested",
        ),
        pytest.param(
            version(39, "v1.39.0"),
            logging.INFO,
            "Kubernetes v1.39.0 is newer than tested (1.34 to 1.37); nothing stagger uses is missing",
            {"version": "v1.39.0", "withinTested": False, "supported": True, "missing": []},
            {("v1.39.0", "false"): 1.0},
            id="newer",
        ),
        pytest.param(
            version(33, "v1.33.2"),
            logging.WARNING,
            "Kubernetes v1.33.2 is older than the oldest minor stagger is tested on (1.34 to 1.37); nothing "
            "stagger uses is missing there, but it is not tested",
            {"version": "v1.33.2", "withinTested": False, "supported": False, "missing": []},
            {("v1.33.2", "false"): 1.0},
            id="older",
        ),
        pytest.param(
            kube.ApiError(status=403, reason="Forbidden", message="no"),
            logging.WARNING,
            "the Kubernetes version is unknown (GET /version failed: 403 Forbidden: no); stagger is tested on "
            "1.34 to 1.37; stagger runs on without knowing",
            {"version": "unknown", "withinTested": False, "supported": None, "missing": []},
            {},
            id="refused",
        ),
        pytest.param(
            ConnectionRefusedError(111, "Connection refused"),
            logging.WARNING,
            "GET /version failed: [Errno 111] Connection refused",
            {"version": "unknown", "supported": None},
            {},
            id="unreachable",
        ),
        pytest.param(
            None,
            logging.WARNING,
            "GET /version failed: no answer within 0.05 s",
            {"version": "unknown", "supported": None},
            {},
            id="no-answer",
        ),
        pytest.param(
            {"kind": "Status"},
            logging.WARNING,
            "/version named no readable major and minor (gitVersion unknown)",
            {"version": "unknown", "supported": None},
            {},
            id="unreadable",
        ),
    ],
)
async def test_what_the_check_says(
    caplog: pytest.LogCaptureFixture,
    answer: dict[str, Any] | Exception | None,
    level: int,
    logged: str,
    section: dict[str, Any],
    samples: dict[tuple[str, str], float],
) -> None:
    app = _app()
    with caplog.at_level(logging.INFO, logger="webhook.controller"):
        client = await _check(app, answer)
    assert client.asked == [("GET", "/version")]
    assert [r.levelno for r in caplog.records] == [level]
    assert logged in caplog.records[0].getMessage()
    key, shown = kubernetes_section(app)
    assert key == "kubernetes"
    assert shown["tested"] == "1.34 to 1.37"
    assert {k: shown[k] for k in section} == section
    assert _samples(app) == samples


async def test_below_the_oldest_minor_each_missing_feature_is_a_warning_and_in_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app()
    with caplog.at_level(logging.INFO, logger="webhook.controller"):
        await _check(app, version(29, "v1.29.4"))
    messages = [r.getMessage() for r in caplog.records]
    assert {r.levelno for r in caplog.records} == {logging.WARNING}
    assert messages[0].startswith("Kubernetes v1.29.4 is older than the oldest minor stagger is tested on")
    _, shown = kubernetes_section(app)
    assert shown["supported"] is False and shown["withinTested"] is False
    assert messages[1:] == shown["missing"]
    assert any(
        m.startswith("gate mode (a staggering policy with mode: gate) needs pod scheduling gates")
        for m in messages
    )
    assert all(m.endswith("this cluster runs v1.29.4") for m in messages[1:])
    assert _samples(app) == {("v1.29.4", "false"): 1.0}


def test_before_the_answer_the_section_says_it_is_asking() -> None:
    _, shown = kubernetes_section(_app())
    assert shown["version"] == "unknown" and shown["supported"] is None
    assert "asking the API server's /version" in shown["note"]
