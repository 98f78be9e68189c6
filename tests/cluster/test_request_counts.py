"""The API requests a run made, by "VERB resource[/sub]": read from a real API server's
`apiserver_request_total` (codes and scopes summed, subresources apart), as the benchmarks report where
the requests per pod go."""

from __future__ import annotations

from sim.cluster.backend import requests_by_kind, requests_served

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, ...
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 12
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 30
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 4
"""


def test_requests_by_verb_and_resource() -> None:
    kinds = requests_by_kind(METRICS)
    assert kinds == {"POST events": 13, "PATCH pods/status": 30, "PATCH pods": 10, "GET /healthz": 4}
    assert sum(kinds.values()) == requests_served(METRICS)
