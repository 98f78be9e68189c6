"""What a simulated kubelet keeps and reports: its settings, its memory of each pod it runs, and the
stats the measurements read of it (``sim.cluster.kubernetes.kubelet`` runs the pods)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.cluster.kubernetes.podstatus import ContainerView
from sim.cluster.launchers.initproc import InitResult, Process
from sim.cluster.startup import ModelSettings
from stagger.informer import InformerSettings
from stagger.objects import Obj


@dataclass(frozen=True)
class FailOpen:
    pod: str
    """namespace/name"""
    why: str
    """The init client's line saying why."""
    cause: str
    """The cause its termination message names (stagger.contracts.failopen)."""


@dataclass(frozen=True)
class NodeStats:
    """What the measurements read of a kubelet (from a pool process as JSON: `to_json`, `from_json`)."""

    peak_starting: int
    """The most containers starting at once on the node."""
    arrivals: tuple[float, ...]
    """When the kubelet first saw each of its pods (simulated seconds; the pods it still knows)."""
    fail_opens: tuple[FailOpen, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "peakStarting": self.peak_starting,
            "arrivals": list(self.arrivals),
            "failOpens": [{"pod": f.pod, "why": f.why, "cause": f.cause} for f in self.fail_opens],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeStats:
        return cls(
            peak_starting=int(data["peakStarting"]),
            arrivals=tuple(float(t) for t in data["arrivals"]),
            fail_opens=tuple(
                FailOpen(pod=f["pod"], why=f["why"], cause=f["cause"]) for f in data["failOpens"]
            ),
        )


@dataclass(frozen=True)
class KubeletSettings:
    node_name: str
    node_ip: str
    pod_ip_prefix: str
    """Pod IPs are ``<prefix><n>`` (e.g. ``198.18.129.``: `nodeagent.pod_subnet`)."""
    cores: float
    model: ModelSettings = field(default_factory=ModelSettings)
    lockd_url: str | None = None
    """This node's lockd, for freeing slots; None when stagger is off."""
    release_slots: bool = True
    load_file: Path | None = None
    """Where the node's CPU busy percentage is written for lockd's ``--load-file``."""
    max_tick_seconds: float = 0.5
    """Longest wall time between two checks when nothing happens (a safety net: wake-ups are events)."""
    init_process_timeout_seconds: float = 900.0
    """Wall time an init client process may run before it is killed (exit 137)."""
    stop_timeout_seconds: float = 5.0
    """Wall time between SIGTERM and SIGKILL when a pod's init client is stopped."""
    release_timeout_seconds: float = 5.0
    config_retry_seconds: float = 10.0
    """Simulated seconds before a container with a configuration error is tried again."""
    python: str = sys.executable
    initclient_nice: int = 10
    """Niceness of the init client processes (0: same priority as the simulator)."""
    informer: InformerSettings = field(default_factory=InformerSettings)


@dataclass
class PodRuntime:
    """The kubelet's memory of one pod (shell state; statuses are rendered from it by pure code)."""

    uid: str
    key: str
    pod: Obj
    pod_ip: str
    start_time: float
    init_views: list[ContainerView]
    main_names: list[str]
    main_images: list[str]
    stub_mains: frozenset[str] = frozenset()
    """Main containers that are evict mode's stub: running from ``main_started_at`` on, outside the model."""
    init_index: int = 0
    main_started: bool = False
    main_started_at: float | None = None
    task: asyncio.Task[InitResult] | None = None
    process: Process | None = None
    retry_at: float | None = None
    uses_stagger: bool = False
    slot_released: bool = False
    terminating: bool = False
    terminate_again_at: float | None = None
    """A termination that failed (its delete not answered) is tried again from then, as the real kubelet's
    pod worker keeps at a terminating pod until it is gone."""
    failed_phase: str | None = None
    written: Obj | None = None


def model_key(uid: str, name: str, *, init: bool = False) -> str:
    """The start-up model's key for one container of the pod ``uid`` (``init``: an init container)."""
    return f"{uid}/{'init/' if init else ''}{name}"
