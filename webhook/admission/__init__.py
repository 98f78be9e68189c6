"""The mutating admission webhook's decision for one AdmissionReview: a pure function of the review body
and the policies, returning the HTTP status and the body to answer with. The aiohttp server around it
(TLS, logging, metrics) is elsewhere.

Admission never denies a pod: stagger must not be the reason a workload cannot be created (the webhook is
also registered with failurePolicy Ignore). For a pod with `<prefix>/enable: "1"` it answers with a JSON
Patch that
- inserts the init client as the first init container (so sidecars and the app's own init containers wait
  too), configured from the downward API, with small resources and a locked-down security context;
- for a pod in staggering policies: labels it `<prefix>/group` and annotates `<prefix>/policies` and
  `<prefix>/group-key` (see `stagger.matching`), and holds it unless it is bypassed in every policy: label
  `<prefix>/staggered: "1"` (lock and gate modes) and, in gate mode, the `<prefix>/pacing` scheduling gate.
- in evict mode the leader's answer (`EvictAnswer`, asked by the HTTP layer before `review`) decides:
  let the pod through (its ticket and granted-at annotated: its place is counted already), or hold it
  (the staggered label, the `<prefix>/hold` annotation, `<prefix>/held-since`, and a nodeSelector no node
  matches or every container replaced by an idle stub). A pod that must not be evicted (no controller
  owner, a DaemonSet's, a static pod, a Job's whose failure policy would count the eviction) is paced in
  lock mode instead, with a warning (`evict_ineligible`).

Besides its own label, a pod may be opted in by its namespace's label (`POST /mutate/pods/namespace`) or by
naming one of the configured schedulers (`POST /mutate/pods/scheduler`, which also gives it the default
scheduler): both add the enable label to the patch, and a pod whose own enable label says anything but "1"
has opted out (`optin`). The API server's selection is only trusted where the controller cannot check it
(the namespace's labels); the scheduler name is checked here.

`POST /mutate/jobs` (`review_job`) adds the rule that keeps a Job from counting an eviction as a failure
(`job_mutation`) to the Jobs whose pods evict mode may hold.

A pod already carrying the init container (admission reinvoked, or a pod opted in by hand) is left as it
is. Anything unexpected while building the patch admits the pod unchanged with a warning, and the caller
hears of the exception through `internal_errors` to log and count it. A body that is not an
AdmissionReview at all gets 400 with `{"error": reason}`. Dry-run requests are patched the same way: the
patch has no side effects.

The parts: what is added to a pod (`inject`), evict mode's question and answer (`evict`), one review in and
one answer out (`review`), how a pod is opted in (`optin`), the pods' mutation (`pods`), the Jobs' (`jobs`),
and the AdmissionReview shapes on the wire (`wire`). This package's names are their public API.
"""

from __future__ import annotations

from webhook.admission.evict import EvictAnswer, EvictQuestion, evict_ineligible, evict_question
from webhook.admission.inject import (
    HOLD_CONTAINER,
    IDLE_COMMAND,
    InjectSettings,
    escape_pointer,
    init_container,
    max_wait_for,
    stub_container,
    unreachable_wait_for,
)
from webhook.admission.jobs import DISRUPTION_IGNORE_RULE, job_mutation, review_job
from webhook.admission.optin import DEFAULT_SCHEDULER, ROUTES, OptIn, Route, opt_in
from webhook.admission.pods import mutation, review
from webhook.admission.review import INTERNAL_ERROR_WARNING

__all__ = [
    "DEFAULT_SCHEDULER",
    "DISRUPTION_IGNORE_RULE",
    "HOLD_CONTAINER",
    "IDLE_COMMAND",
    "INTERNAL_ERROR_WARNING",
    "ROUTES",
    "EvictAnswer",
    "EvictQuestion",
    "InjectSettings",
    "OptIn",
    "Route",
    "escape_pointer",
    "evict_ineligible",
    "evict_question",
    "init_container",
    "job_mutation",
    "max_wait_for",
    "mutation",
    "opt_in",
    "review",
    "review_job",
    "stub_container",
    "unreachable_wait_for",
]
