"""The session release's policy file on real nodes, and the names the tests select by."""

from __future__ import annotations

import os

STAGGER_IMAGE = os.environ.get("STAGGER_IMAGE", "localhost/stagger:dev")
UPGRADE_IMAGE = os.environ.get("STAGGER_UPGRADE_IMAGE", f"{STAGGER_IMAGE}-upgrade")
"""The same image under a second name (localhost/stagger:dev-upgrade), tagged with buildah and imported into
the nodes with STAGGER_IMAGE when the session's cluster starts: what tests/nodes/test_upgrade.py's `helm
upgrade` moves the session release to (a new image tag, pullPolicy Never, no registry)."""
NODE_LIMIT = 2
ONE_SLOT_LABEL = "stagger-test/one-slot"
"""A node labelled with it (=1) starts one pod at a time (node policy `one-slot`): tests/nodes/test_readiness.py."""
MODE_LABEL = "stagger-test/mode"
MODES = {
    "lock": {"mode": "lock"},
    "gate": {"mode": "gate"},
    "evict-nodeselector": {"mode": "evict", "hold": "nodeSelector"},
    "evict-stub": {"mode": "evict", "hold": "stub"},
}
"""A staggering policy per mode (and hold), each selecting the pods labelled MODE_LABEL=<key>."""

POLICIES = {
    # Two starts at a time per node, whatever the load (the tests count starts; the CPU throttle would make
    # them depend on what else the machine runs), and a short unreachableWait (and maxWait) for the node
    # without lockd.
    "nodePolicies": [
        {
            "name": "default",
            "throttleConfig": {"maxConcurrent": {"value": NODE_LIMIT}},
            "holdTimeout": "2m",
            "maxWait": "45s",
            "unreachableWait": "30s",
        },
        {
            "name": "one-slot",
            "nodeSelector": {"matchLabels": {ONE_SLOT_LABEL: "1"}},
            "priority": 10,
            "throttleConfig": {"maxConcurrent": {"value": 1}},
            # As the default one's: admission injects the largest of the node policies' (test_failures).
            "holdTimeout": "2m",
            "maxWait": "45s",
            "unreachableWait": "30s",
        },
    ],
    # 1 starts, then 3 x the Ready ones (3 with 1 Ready, 6 with 2), then all once 3 are.
    "staggeringPolicies": [
        {
            "name": f"mode-{key}",
            "labelSelector": {MODE_LABEL: key},
            "maxBlockedDuration": "5m",
            "pacer": {"exponential": {"minInitial": 1, "multiplier": 3, "maxStagger": 3}},
            **mode,
        }
        for key, mode in MODES.items()
    ],
}
