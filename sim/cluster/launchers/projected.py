"""Projected service-account token volumes for an init client process, as a kubelet makes them.

For each mount of the container whose volume is `projected` with `serviceAccountToken` sources, the kubelet
asks the API server for a token of the pod's service account (the TokenRequest API, bound to the pod, with
the source's audience and expirationSeconds) and writes it at the source's path in the volume
(https://kubernetes.io/docs/concepts/storage/projected-volumes/#serviceaccounttoken). A real container sees
the volume at its mountPath; a process on this machine cannot, so the volume is a folder here and every
environment value that names a path under the mountPath is moved into it (what the process reads is what
the mount would have shown it). The kubelet's token refresh (at 80% of its life) is not modelled: an init
client's run is far shorter than the 10 minutes stagger asks for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.cluster.objects import name_of, namespace_of
from stagger.kube import ApiError, RestClient

__all__ = ["ProjectionError", "mapped_env", "project_tokens"]


class ProjectionError(Exception):
    """The token could not be had: the kubelet cannot mount the volume, and the container does not start."""


def _token_sources(volume: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    projected = volume.get("projected") or {}
    return [
        source["serviceAccountToken"]
        for source in projected.get("sources") or ()
        if isinstance(source, Mapping) and isinstance(source.get("serviceAccountToken"), Mapping)
    ]


async def project_tokens(
    client: RestClient, pod: Mapping[str, Any], container: Mapping[str, Any], *, into: Path
) -> dict[str, str]:
    """Write the tokens of the container's projected token volumes under `into`; mountPath -> folder."""
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or () if isinstance(v, Mapping)}
    mounts: dict[str, str] = {}
    for mount in container.get("volumeMounts") or ():
        sources = _token_sources(volumes.get(mount.get("name")) or {})
        if not sources:
            continue
        folder = into / str(mount["name"])
        folder.mkdir(mode=0o700)
        for source in sources:
            token = await _request_token(client, pod, source)
            path = folder / str(source.get("path") or "token")
            path.write_text(token)
            os.chmod(path, 0o600)
        mounts[str(mount["mountPath"]).rstrip("/")] = str(folder)
    return mounts


async def _request_token(client: RestClient, pod: Mapping[str, Any], source: Mapping[str, Any]) -> str:
    account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    spec: dict[str, Any] = {
        "expirationSeconds": int(source.get("expirationSeconds") or 3600),
        "boundObjectRef": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name_of(pod),
            "uid": str((pod.get("metadata") or {}).get("uid", "")),
        },
    }
    if source.get("audience"):
        spec["audiences"] = [source["audience"]]
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = f"/api/v1/namespaces/{namespace_of(pod)}/serviceaccounts/{account}/token"
    try:
        answer = await client.request("POST", path, body=body)
    except ApiError as err:
        raise ProjectionError(f"MountVolume.SetUp failed: failed to fetch token: {err}") from err
    return str((answer.get("status") or {}).get("token") or "")


def mapped_env(env: Mapping[str, str], mounts: Mapping[str, str]) -> dict[str, str]:
    """`env` with each value that is a path under a mountPath moved to that volume's folder here."""
    result = dict(env)
    for key, value in env.items():
        for mount_path, folder in mounts.items():
            if value == mount_path or value.startswith(mount_path + "/"):
                result[key] = folder + value[len(mount_path) :]
    return result
