"""The garbage collector's decision: which objects lost all their owners."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sim.cluster.objects import is_terminating, meta
from stagger.objects import Obj


def orphans(objects: Iterable[Mapping[str, Any]], *, live_uids: set[str], owner_kinds: set[str]) -> list[Obj]:
    """Objects all of whose owners are gone (background propagation deletes them).

    Only owner references to kinds in ``owner_kinds`` (the kinds the caller watches) can be judged;
    an object with any other owner is left alone. The caller confirms absence with a live read first.
    """
    result = []
    for obj in objects:
        refs = [r for r in meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
        if not refs or is_terminating(obj):
            continue
        if all(r.get("kind") in owner_kinds and r.get("uid") not in live_uids for r in refs):
            result.append(dict(obj))
    return result
