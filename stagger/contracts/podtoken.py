"""The pod's token for lockd, between admission and lockd: admission projects the pod's service-account
token into the init client in a volume of this name (`webhook.admission.inject`), and lockd reads the
same volume in the pod's spec to know that the pod was given a token, so that an ask or a release in the
pod's name must carry it (`lockd.tokenreview.decide`). A pod's volumes cannot change after it is created, so
what lockd reads there holds for the pod's whole life.

Names and a pure reader of the pod's spec: no I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["TOKEN_VOLUME", "has_token_volume"]

TOKEN_VOLUME: Final = "stagger-pod-token"
"""The projected volume of the pod's service-account token that the init client mounts."""


def has_token_volume(spec: Mapping[str, Any] | None) -> bool:
    """Whether a pod's spec has the token volume as admission injects it: named `TOKEN_VOLUME` and
    projecting a service-account token. A volume of that name that projects no token (a pod opted in by
    hand with a volume of its own under the name) gives the pod no token to show, so it does not count."""
    volumes = spec.get("volumes") if isinstance(spec, Mapping) else None
    if not isinstance(volumes, list):
        return False
    for volume in volumes:
        if not isinstance(volume, Mapping) or volume.get("name") != TOKEN_VOLUME:
            continue
        projected = volume.get("projected")
        sources = projected.get("sources") if isinstance(projected, Mapping) else None
        return isinstance(sources, list) and any(
            isinstance(source, Mapping) and isinstance(source.get("serviceAccountToken"), Mapping)
            for source in sources
        )
    return False
