"""`kubectl stagger convert`: the four peers' configurations (straggler's policy file, pod-pacemaker's
PacemakerConfig, thundering-herd-scheduler's plugin arguments, pod-startup-lock's flags) as the stagger
policy file they mean, and what could not be carried over.

The parts: the shared shapes and Go-like readings (`common`), Go's flag syntax and where command lines
are (`goflags`), one module per peer (`straggler`, `pacemaker`, `herd`, `startuplock`), which peer wrote a
file (`detect`), and one conversion of several files (`run`). All pure: the command line reads the files.
"""

from __future__ import annotations

from kubectl_stagger.convert.common import PEERS, Input, InvalidInput, Peer, UnknownFormat
from kubectl_stagger.convert.run import Converted, OutputDoesNotLoad, convert_inputs

__all__ = [
    "PEERS",
    "Converted",
    "Input",
    "InvalidInput",
    "OutputDoesNotLoad",
    "Peer",
    "UnknownFormat",
    "convert_inputs",
]
