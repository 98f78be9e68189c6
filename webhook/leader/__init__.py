"""Leader election among the controller's replicas, as client-go's `tools/leaderelection` does it, on a
coordination.k8s.io/v1 Lease: the pure core (`lease`: what to do, as a function of the Lease read, what
was observed before, the timings and `now`) and the shell (`elector`: reads, decides, writes, labels the
leader's pod, releases on cancel). This package's names are their public API."""

from __future__ import annotations

from webhook.leader import lease
from webhook.leader.elector import LeaderElector, LeaderState
from webhook.leader.lease import *  # noqa: F403 (the core's names are listed once, in its __all__)

__all__ = ["LeaderElector", "LeaderState"]
__all__ += lease.__all__
