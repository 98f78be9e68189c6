"""AdmissionReviews, pods and policy files for the controller's tests."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from stagger.names import Names

NAMES = Names()
ENABLE = NAMES.enable_label

IMAGE_POLICY = """\
staggeringPolicies:
- name: image-pull
  labelSelector: {matchLabels: {staggerimages: "1"}}
  groupingExpression: .spec.containers[0].image
  pacer: {exponential: {minInitial: 4, multiplier: 4, maxStagger: 16}}
  mode: MODE
"""


def image_policy(mode: str = "lock") -> str:
    """The seed's image-pull policy (exponential 4/4/16 grouped by the first container's image)."""
    return IMAGE_POLICY.replace("MODE", mode)


def pod(
    name: str = "web-1",
    *,
    labels: dict[str, str] | None = None,
    image: str = "nginx:1.25",
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": image}]}
    if init is not None:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


def enabled(**labels: str) -> dict[str, str]:
    return {ENABLE: "1", **labels}


def owned(name: str, owner: str) -> dict[str, Any]:
    """An enabled pod of app `web` whose controller is the ReplicaSet `owner` (uid `uid-<owner>`)."""
    obj = pod(name, labels=enabled(app="web"))
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": owner,
            "uid": f"uid-{owner}",
            "controller": True,
        }
    ]
    return obj


def review(obj: dict[str, Any], *, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "test"},
            "object": obj,
        },
    }


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch of an AdmissionReview answer ([] when none)."""
    encoded = answer["response"].get("patch")
    return json.loads(base64.b64decode(encoded)) if encoded else []
