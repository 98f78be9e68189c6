"""`gate` mode: the leader removes the `<prefix>/pacing` scheduling gate of the oldest held pods as their
pacers allow, one JSON patch per pod.

The patch also records the grant (`granted-at`) and takes the `staggered` label off, so the pod counts as
starting from then on, for this leader and for the next one (counts are rebuilt from the API). It starts
with a `test` of the pod's current gates: a view that is out of date (the pod was changed, or recreated
under the same name) fails the patch (422) instead of removing the wrong gate, and the next watch event
brings the truth.

Scheduling gates may only be removed after creation ("The Pod's scheduling gates can only be removed":
https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/), which is all this does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from stagger.groupbook import PodKey, PodRecord
from stagger.kube import PODS, ApiError, RestClient
from stagger.names import Names
from stagger.timestamps import format_rfc3339
from webhook.groups.pacing import Pacing
from webhook.reconcilers.releasing import Releaser

__all__ = ["GateReconciler", "GateStats", "json_pointer", "ungate_patch"]

logger = logging.getLogger(__name__)


def json_pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) from its reference tokens: `~` and `/` escaped."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def ungate_patch(pod: Mapping[str, Any], *, names: Names, wall: float) -> list[dict[str, Any]] | None:
    """The JSON patch that releases a gated pod, or None when the pod does not carry our gate. Pure."""
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    gates = list(spec.get("schedulingGates") or ())
    kept = [
        gate
        for gate in gates
        if not (isinstance(gate, Mapping) and gate.get("name") == names.scheduling_gate)
    ]
    if len(kept) == len(gates):
        return None
    patch: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": metadata.get("uid")},
        {"op": "test", "path": "/spec/schedulingGates", "value": gates},
        (
            {"op": "replace", "path": "/spec/schedulingGates", "value": kept}
            if kept
            else {"op": "remove", "path": "/spec/schedulingGates"}
        ),
    ]
    if metadata.get("annotations") is None:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    patch.append(
        {
            "op": "add",
            "path": json_pointer("metadata", "annotations", names.granted_at_annotation),
            "value": format_rfc3339(wall),
        }
    )
    if names.staggered_label in (metadata.get("labels") or {}):
        patch.append({"op": "remove", "path": json_pointer("metadata", "labels", names.staggered_label)})
    return patch


@dataclass
class GateStats:
    removed: int = 0
    failed: int = 0


class GateReconciler(Releaser):
    """Runs while this replica leads: whenever the book changes (or every RECHECK_SECONDS), the gated pods
    the pacers allow are reserved and released (`webhook.reconcilers.releasing`)."""

    verb = "ungate"

    def __init__(
        self,
        *,
        client: RestClient,
        pacing: Pacing,
        pod: Callable[[PodKey], Mapping[str, Any] | None],
        wall: Callable[[], float],
        counted: Callable[[str], None] = lambda basis: None,
        removed: Callable[[str], None] = lambda result: None,
    ) -> None:
        super().__init__(pacing=pacing, counted=counted)
        self._client = client
        self._pod = pod
        self._wall = wall
        self._removed = removed  # each patch, by result: ok, error
        self.stats = GateStats()

    def handles(self, record: PodRecord) -> bool:
        return record.gated

    def _failed(self, key: PodKey) -> None:
        # The place is free again at once; no change is signalled, so a pod whose patch keeps failing is
        # tried again at the next change or recheck, not in a tight loop.
        self.stats.failed += 1
        self._removed("error")
        self._pacing.unreserve(key)

    async def release(self, record: PodRecord, reason: str) -> None:
        key = record.key
        pod = self._pod(key)
        patch = None if pod is None else ungate_patch(pod, names=self._pacing.names, wall=self._wall())
        if patch is None:
            return
        try:
            await self._client.patch(PODS, name=key[1], namespace=key[0], patch=patch, patch_type="json")
        except ApiError as err:
            self._failed(key)
            level = logging.INFO if err.status in (404, 409, 422) else logging.WARNING
            logger.log(level, "could not remove the scheduling gate of %s/%s: %s", key[0], key[1], err)
            return
        except (aiohttp.ClientError, TimeoutError) as err:
            self._failed(key)
            logger.warning(
                "could not remove the scheduling gate of %s/%s: %s", key[0], key[1], err or type(err).__name__
            )
            return
        self.stats.removed += 1
        self._removed("ok")
        logger.info("released %s/%s (scheduling gate removed): %s", key[0], key[1], reason)
