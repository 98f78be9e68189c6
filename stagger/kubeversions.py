"""The Kubernetes minors stagger is tested on, what of stagger needs a newer minor than some clusters run,
and what a cluster's `GET /version` answer means for it. Pure: the controller asks `/version` once at
start-up and logs, shows (`/status` `kubernetes`) and exports (`stagger_controller_kubernetes_info`) the
`Assessment` made here (webhook/controller.py); it never refuses to start on it (what works is still
paced).

A feature counts as present from the minor it went GA: from then on its feature gate is locked on. Before,
it may have been beta and on by default, and the sentences say from which minor, but a provider may turn
a beta feature off, so stagger does not count on it there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "NEEDS",
    "NEWEST_TESTED",
    "OLDEST_TESTED",
    "Assessment",
    "Need",
    "assess",
    "format_minor",
    "format_tested",
    "parse_version",
    "unknown",
]

Minor = tuple[int, int]

# The ends of the range CI runs (.ci/run): the default build of the test bed's control plane and nodes is the
# newest release (testbed/go.mod, v1.37), and the oldest supported minor runs too (KUBE_VERSION=1.34,
# testbed/go.1.34.mod), which is also the chart's kubeVersion. tests/kubeversions checks they agree.
OLDEST_TESTED: Final[Minor] = (1, 34)
NEWEST_TESTED: Final[Minor] = (1, 37)

# How much of a version string is shown (log, /status, a metric label): a real one is ~20 characters.
_SHOWN_MAX = 64


@dataclass(frozen=True)
class Need:
    """Something of Kubernetes a part of stagger relies on, and the minor from which it is always there."""

    feature: str  # what Kubernetes provides
    ga: Minor  # GA: on in every cluster of this minor and later (the feature gate locked on)
    on_by_default: Minor | None  # beta and on by default from this minor (None: off until GA)
    feature_gates: str  # the feature gate(s), for an operator who turns them on by hand
    used_by: str  # what of stagger needs it


# What stagger uses that a minor before NEWEST_TESTED may lack, each checked against the Kubernetes docs and
# the versioned feature gates (k8s.io/kubernetes pkg/features/versioned_kube_features.go). Left out:
# - sidecar containers (SidecarContainers, GA 1.33): stagger adds none; evict mode's stub copies an init
#   container's restartPolicy only from a pod that has one, which a cluster without them never admits;
# - the Job's podReplacementPolicy (JobPodReplacementPolicy, beta 1.29, GA 1.34): the Jobs webhook sets it
#   to Failed only because a Job with a podFailurePolicy may have no other value where the field exists;
#   where it does not, the API server drops it and asks for nothing;
# - the CEL optional syntax (`?.`, `orValue`) of lockd's ValidatingAdmissionPolicy: it is there wherever
#   ValidatingAdmissionPolicy v1 is;
# - what is older than any minor a provider still runs: the Eviction API (policy/v1, 1.22), Leases, Events
#   (events.k8s.io/v1), projected service-account tokens with an audience and TokenReview, watch bookmarks.
NEEDS: Final[tuple[Need, ...]] = (
    # https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/ ("Kubernetes v1.30
    # [stable]"); KEP-3521: alpha 1.26, beta (on) 1.27, stable 1.30.
    Need(
        feature="pod scheduling gates (spec.schedulingGates)",
        ga=(1, 30),
        on_by_default=(1, 27),
        feature_gates="PodSchedulingReadiness",
        used_by="gate mode (a staggering policy with mode: gate)",
    ),
    # https://www.kubernetes.dev/resources/keps/3716/ (KEP-3716, graduated to stable for 1.30:
    # kubernetes/enhancements#4435); feature gate AdmissionWebhookMatchConditions: alpha 1.27, beta (on)
    # 1.28, GA 1.30.
    Need(
        feature="admission webhook matchConditions",
        ga=(1, 30),
        on_by_default=(1, 28),
        feature_gates="AdmissionWebhookMatchConditions",
        used_by=(
            "the chart's Jobs webhook (controller.webhook.jobs: a Job sent by its pod template's label) and "
            "scheduler-name opt-in (controller.webhook.schedulerNames)"
        ),
    ),
    # https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/ ("Kubernetes v1.30
    # [stable]"); beta in 1.28 was off by default and served only v1beta1, the chart writes v1.
    Need(
        feature="ValidatingAdmissionPolicy v1 (admissionregistration.k8s.io/v1)",
        ga=(1, 30),
        on_by_default=None,
        feature_gates="ValidatingAdmissionPolicy",
        used_by="lockd.confineWrites (the policy that holds lockd's writes to its own node)",
    ),
    # The claim a pod's projected token carries its node in (the chart's lockd-vap.yaml reads it from
    # request.userInfo.extra); feature gate ServiceAccountTokenPodNodeInfo: alpha 1.29, beta (on) 1.30, GA
    # 1.32 (versioned_kube_features.go).
    Need(
        feature="the node-name claim of service-account tokens (authentication.kubernetes.io/node-name)",
        ga=(1, 32),
        on_by_default=(1, 30),
        feature_gates="ServiceAccountTokenPodNodeInfo",
        used_by="lockd.confineWrites (the policy knows lockd's node only from its token)",
    ),
    # https://kubernetes.io/docs/tasks/job/pod-failure-policy/ ("Kubernetes v1.31 [stable]"); the
    # DisruptionTarget condition an eviction adds: PodDisruptionConditions, beta (on) 1.26, GA 1.31.
    Need(
        feature="the Job podFailurePolicy and the pods' DisruptionTarget condition",
        ga=(1, 31),
        on_by_default=(1, 26),
        feature_gates="JobPodFailurePolicy, PodDisruptionConditions",
        used_by="evict mode for Jobs (controller.webhook.jobs: an eviction is not counted as a failure)",
    ),
)


@dataclass(frozen=True)
class Assessment:
    """What the cluster's version means for stagger."""

    git_version: str  # as the API server names itself ("v1.34.4-gke.100"), or "unknown"
    minor: Minor | None  # (1, 34); None when unreadable
    tested: bool  # within OLDEST_TESTED..NEWEST_TESTED
    missing: tuple[str, ...]  # one sentence per Need this minor is before
    note: str  # one line for the log: the version and where it stands

    @property
    def supported(self) -> bool | None:
        """Whether stagger supports this cluster: not older than tested and nothing missing (a newer minor
        is supported untested); None when the version is unknown."""
        if self.minor is None:
            return None
        return self.minor >= OLDEST_TESTED and not self.missing


def format_minor(minor: Minor) -> str:
    return f"{minor[0]}.{minor[1]}"


def format_tested() -> str:
    """`1.34 to 1.37`."""
    return f"{format_minor(OLDEST_TESTED)} to {format_minor(NEWEST_TESTED)}"


_NUMBER = re.compile(r"\s*([0-9]{1,6})\+?\s*")  # "34", "34+" (some providers); at most 6 digits
_GIT_VERSION = re.compile(r"v?([0-9]{1,6})\.([0-9]{1,6})(?:[.+-]|$)")  # "v1.34.4-gke.100", "v1.35.0+k3s1"


def _number(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1_000_000 else None
    if isinstance(value, str) and (match := _NUMBER.fullmatch(value)):
        return int(match[1])
    return None


def parse_version(info: Mapping[str, object]) -> Minor | None:
    """(major, minor) from a `/version` answer: its `major` and `minor` ("1", "34" or "34+"), else its
    `gitVersion` ("v1.34.4-gke.100"); None when neither reads (a build without version stamps says
    major "", minor "", gitVersion "v0.0.0-master+..."). Never raises."""
    major, minor = _number(info.get("major")), _number(info.get("minor"))
    if major is None or minor is None:
        git_version = info.get("gitVersion")
        match = _GIT_VERSION.match(git_version) if isinstance(git_version, str) else None
        if match is None:
            return None
        major, minor = int(match[1]), int(match[2])
    return (major, minor) if major >= 1 else None


def _shown(info: Mapping[str, object], minor: Minor | None) -> str:
    """The version as the log, /status and the metric label show it: gitVersion, else "v1.34"."""
    git_version = info.get("gitVersion")
    if isinstance(git_version, str) and git_version.strip() and git_version.isprintable():
        return git_version.strip()[:_SHOWN_MAX]
    return f"v{format_minor(minor)}" if minor is not None else "unknown"


def _sentence(need: Need, version: str) -> str:
    before = (
        f"on by default since {format_minor(need.on_by_default)} unless the feature gate "
        f"{need.feature_gates} is off"
        if need.on_by_default is not None
        else f"off by default before that (feature gate {need.feature_gates})"
    )
    return (
        f"{need.used_by} needs {need.feature}, GA in Kubernetes {format_minor(need.ga)} ({before}); "
        f"this cluster runs {version}"
    )


def assess(info: Mapping[str, object]) -> Assessment:
    """What a `/version` answer means: tested or not, and what of stagger needs a newer minor."""
    minor = parse_version(info)
    version = _shown(info, minor)
    if minor is None:
        return unknown(f"/version named no readable major and minor (gitVersion {version})")
    missing = tuple(_sentence(need, version) for need in NEEDS if minor < need.ga)
    tested = OLDEST_TESTED <= minor <= NEWEST_TESTED
    if minor < OLDEST_TESTED:
        where = f"older than the oldest minor stagger is tested on ({format_tested()})"
    elif minor > NEWEST_TESTED:
        where = f"newer than tested ({format_tested()}); nothing stagger uses is missing"
    else:
        where = f"within the minors stagger is tested on ({format_tested()})"
    return Assessment(
        git_version=version,
        minor=minor,
        tested=tested,
        missing=missing,
        note=f"Kubernetes {version} is {where}",
    )


def unknown(why: str) -> Assessment:
    """The version could not be read (`why`: the error, or what `/version` answered)."""
    return Assessment(
        git_version="unknown",
        minor=None,
        tested=False,
        missing=(),
        note=f"the Kubernetes version is unknown ({why}); stagger is tested on {format_tested()}",
    )
