"""`kubectl stagger convert`: the four peers' configurations (straggler's policy file, pod-pacemaker's
PacemakerConfig, thundering-herd-scheduler's plugin arguments, pod-startup-lock's flags) as the stagger
policy file they mean, and what could not be carried over.

The parts: the shared shapes and Go-like readings (`common`), Go's flag syntax and where command lines
are (`goflags`), one module per peer (`straggler`, `pacemaker`, `herd`, `startuplock`), which peer wrote a
file (`detect`), and one conversion of several files (`run`), which also says what the converted cluster
still needs (stagger's chart values, the peers' objects to delete). All pure: the command line reads the
files.
"""

from __future__ import annotations

from kubectl_stagger.convert.common import PEERS, ChartValue, Input, InvalidInput, Peer, UnknownFormat
from kubectl_stagger.convert.run import Converted, OutputDoesNotLoad, convert_inputs

__all__ = [
    "PEERS",
    "ChartValue",
    "Converted",
    "Input",
    "InvalidInput",
    "OutputDoesNotLoad",
    "Peer",
    "UnknownFormat",
    "convert_inputs",
]
