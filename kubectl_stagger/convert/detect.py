"""Which peer wrote a configuration, from its content: a PacemakerConfig is pod-pacemaker's, a file of
`staggeringPolicies` straggler's, a KubeSchedulerConfiguration (or the chart's values, or the arguments
alone) of the ThunderingHerdScheduling plugin thundering-herd-scheduler's, and command lines with
pod-startup-lock's flags pod-startup-lock's. A stagger policy file is none of them: it is said so."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kubectl_stagger.convert.common import Peer, UnknownFormat, go_get, yaml_documents, yaml_problem
from kubectl_stagger.convert.herd import is_herd
from kubectl_stagger.convert.pacemaker import is_pacemaker
from kubectl_stagger.convert.startuplock import is_startup_lock
from kubectl_stagger.convert.straggler import is_straggler

__all__ = ["KNOWN_FORMATS", "detect"]

logger = logging.getLogger(__name__)

KNOWN_FORMATS = (
    "straggler's policy file (staggeringPolicies), pod-pacemaker's PacemakerConfig, thundering-herd-scheduler's "
    "KubeSchedulerConfiguration, chart values or plugin arguments, pod-startup-lock's command lines or "
    "DaemonSets"
)


def detect(text: str, *, source: str) -> Peer:
    """The peer whose configuration `text` is; raises UnknownFormat saying what it looked for."""
    documents = yaml_documents(text) or []
    if is_pacemaker(documents):
        return "pod-pacemaker"
    if any(isinstance(each, Mapping) and go_get(each, "nodePolicies") is not None for each in documents):
        raise UnknownFormat(
            f"{source}: a stagger policy file already (nodePolicies): check it with `kubectl stagger check-policy`"
        )
    if is_straggler(documents):
        return "straggler"
    if is_herd(documents):
        return "thundering-herd"
    if is_startup_lock(text):
        return "pod-startup-lock"
    # A YAML flattened to one line (copied from a web page) is no YAML at all: the parser says where.
    problem = yaml_problem(text)
    said = f" (not YAML: {problem})" if problem else ""
    raise UnknownFormat(f"{source}: none of the formats convert reads{said}: {KNOWN_FORMATS}")
