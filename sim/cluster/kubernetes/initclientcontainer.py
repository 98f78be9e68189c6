"""The stagger init client container of a simulated kubelet's pods: the REAL init client runs as a process
(``sim.cluster.launchers.initproc``) and its exit is the container's. Exit 0 completes the container (a
fail-open one is counted); a configuration error is tried again later; any other exit fails the pod
(``restartPolicy: Never``) or backs the container off (CrashLoopBackOff).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from sim.cluster import podparams
from sim.cluster.kubernetes.kubeletstate import FailOpen, KubeletSettings, PodRuntime, model_key
from sim.cluster.kubernetes.podstatus import ContainerView, exited, started, waiting
from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.initproc import InitClientRunner, InitResult, LaunchGate, Process
from sim.cluster.launchers.stopping import stop_process
from sim.cluster.objects import name_of
from sim.cluster.startup import Termination, backoff_delay
from stagger.contracts.failopen import read_outcome
from stagger.kube import RestClient

logger = logging.getLogger(__name__)


class InitClientContainers:
    """Drives the init client container of each pod of one node (``progress``) and stops it (``stop``)."""

    def __init__(
        self,
        *,
        settings: KubeletSettings,
        client: RestClient,
        wake: Callable[[], None],
        launch_gate: LaunchGate | None = None,
        fork_server: ForkServer | None = None,
    ) -> None:
        self.settings = settings
        self._runner = InitClientRunner(
            client=client,
            node_name=settings.node_name,
            node_ip=settings.node_ip,
            python=settings.python,
            nice=settings.initclient_nice,
            timeout_seconds=settings.init_process_timeout_seconds,
            stop_timeout_seconds=settings.stop_timeout_seconds,
            launch_gate=launch_gate,
            fork_server=fork_server,
        )
        # The kubelet's loop wakes up when a process exits, so that its exit is read at once.
        self._wake = wake
        self.fail_opens: list[FailOpen] = []
        """Pods whose init client let them start without a slot (exit 0 saying "(fail-open)")."""

    def progress(self, rt: PodRuntime, *, container: Mapping[str, Any], now: float) -> bool:
        """Drive the init client container of ``rt.init_index``; True once it has completed."""
        if rt.task is None:
            self._start(rt, container, now)
            return False
        if not rt.task.done():
            return False
        return self._exited(rt, self._result(rt), now)

    async def stop(self, rt: PodRuntime) -> None:
        """Stop the pod's init client process, if one runs, and forget its task."""
        if rt.process is not None and rt.process.returncode is None:
            await stop_process(rt.process, grace=self.settings.stop_timeout_seconds)
        if rt.task is not None:
            rt.task.cancel()
            await asyncio.gather(rt.task, return_exceptions=True)
            rt.task = None

    def _start(self, rt: PodRuntime, container: Mapping[str, Any], now: float) -> None:
        """Start the process, unless the container is backing off or waiting to retry its configuration."""
        if rt.retry_at is not None and now < rt.retry_at:
            return
        rt.retry_at = None
        rt.init_views[rt.init_index] = started(rt.init_views[rt.init_index], now=now)

        def on_started(process: Process) -> None:
            rt.process = process

        rt.task = asyncio.create_task(
            self._runner.run(rt.pod, container, pod_ip=rt.pod_ip, on_started=on_started),
            name=f"initclient-{rt.key}",
        )
        rt.task.add_done_callback(lambda _t: self._wake())

    def _result(self, rt: PodRuntime) -> InitResult:
        assert rt.task is not None
        task, rt.task, rt.process = rt.task, None, None
        try:
            return task.result()
        except Exception as exc:  # a spawn failure is the container's failure, not the kubelet's
            logger.warning("%s: init client of %s could not run: %r", self.settings.node_name, rt.key, exc)
            return InitResult(exit_code=128, output=(repr(exc),))

    def _exited(self, rt: PodRuntime, result: InitResult, now: float) -> bool:
        """The container's state after its process ended; True when it completed."""
        index = rt.init_index
        view = rt.init_views[index]
        if result.config_error is not None:
            rt.init_views[index] = waiting(
                view.name,
                view.image,
                reason="CreateContainerConfigError",
                message=result.config_error,
                restarts=view.restarts,
                last=view.last,
            )
            rt.retry_at = now + self.settings.config_retry_seconds
            return False
        started_at = view.started_at if view.started_at is not None else now
        if result.exit_code == 0:
            self._count_fail_open(rt, result=result)
            rt.init_views[index] = exited(
                view,
                reason="Completed",
                exit_code=0,
                message=result.message,
                started_at=started_at,
                finished_at=now,
                ready=True,
            )
            return True
        logger.info(
            "%s: init client of %s exited %d: %s",
            self.settings.node_name,
            rt.key,
            result.exit_code,
            " | ".join(result.output[-3:]),
        )
        if podparams.restart_policy(rt.pod) == "Never":
            rt.init_views[index] = exited(
                view, reason="Error", exit_code=result.exit_code, started_at=started_at, finished_at=now
            )
            rt.failed_phase = "Failed"
            return False
        termination = Termination(
            reason="Error", exit_code=result.exit_code, started_at=started_at, finished_at=now
        )
        self._back_off(rt, view, termination, now)
        return False

    def _count_fail_open(self, rt: PodRuntime, *, result: InitResult) -> None:
        # The init client says why it starts without a slot in its termination message.
        outcome = read_outcome(result.message)
        if outcome is not None and outcome["slot"] == "none":
            why, cause = outcome.get("reason", ""), outcome.get("cause", "unknown")
            self.fail_opens.append(FailOpen(pod=rt.key, why=why, cause=cause))

    def _back_off(self, rt: PodRuntime, view: ContainerView, termination: Termination, now: float) -> None:
        """CrashLoopBackOff: the container is tried again after the back-off delay of its restart count."""
        restarts = view.restarts + 1
        delay = backoff_delay(
            restarts=restarts, settings=self.settings.model, key=model_key(rt.uid, view.name)
        )
        rt.retry_at = now + delay
        rt.init_views[rt.init_index] = waiting(
            view.name,
            view.image,
            reason="CrashLoopBackOff",
            restarts=restarts,
            last=termination,
            message=f"back-off {delay:.0f}s restarting failed container={view.name} pod={name_of(rt.pod)}",
        )
