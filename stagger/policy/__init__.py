"""The policy file: staggering policies (cluster-wide groups) and node policies (per-node throttles).

The file is validated by a small schema walker: each YAML key maps to a check that either returns
the parsed value or appends an error naming its path. Every error of a file is collected before
anything is built, so one load shows the operator everything that is wrong. A key set to null is
treated as absent (YAML `holdTimeout:` with no value means "use the default"). Keys match as Go's
decoder matches them (exactly, else regardless of case, with a note), as straggler and pod-pacemaker read
theirs. A file may hold several YAML documents, each stagger's format or pod-pacemaker's PacemakerConfig.

The parts: the model with its defaults (`model`), the walker's building blocks (`rules`), stagger's own
format (`schema`), PacemakerConfig (`pacemaker`), a file's documents put together (`documents`) and
reading a file (`files`). This package's names are their public API.
"""

from __future__ import annotations

from stagger.policy import model
from stagger.policy.documents import parse_policy_documents
from stagger.policy.files import load_policy_file, parse_policy_text, read_policy_text
from stagger.policy.model import *  # noqa: F403 (the model's names are listed once, in its __all__)
from stagger.policy.schema import parse_policy_file

__all__ = [
    "load_policy_file",
    "parse_policy_documents",
    "parse_policy_file",
    "parse_policy_text",
    "read_policy_text",
]
__all__ += model.__all__
