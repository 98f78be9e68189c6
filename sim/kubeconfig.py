"""A kubeconfig for an API server URL: what the emulator writes for its clients and what the simulated
cluster writes for its lockd processes (cluster, user and context all named "sim")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig(url: str, *, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": url}}],
        "users": [{"name": "sim", "user": {"token": token}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim", "namespace": "default"}}],
        "current-context": "sim",
        "preferences": {},
    }


def write_kubeconfig(path: str | Path, url: str, *, token: str) -> None:
    Path(path).write_text(yaml.safe_dump(kubeconfig(url, token=token), sort_keys=False))
