"""What can go wrong in a way a person can act on, each with its own exit code (listed in `--help`)."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode", "Problem"]


class ExitCode(IntEnum):
    OK = 0
    INVALID_POLICY = 1  # check-policy: the file does not validate (every error on stderr)
    USAGE = 2  # argparse's own code for a bad command line
    UNREACHABLE = 3  # no usable kubeconfig, the API server cannot be reached, or it refused us
    NOT_INSTALLED = 4  # no stagger controller or lockd pods where we looked
    POD_NOT_FOUND = 5  # why: no such pod
    SELFTEST_FAILED = 6  # selftest: a check failed (each is one line on stdout)
    UNKNOWN_FORMAT = 7  # convert: the input is none of the peers' formats convert reads


class Problem(Exception):
    """Printed as one line on stderr (no traceback), and the command exits with `code`."""

    def __init__(self, message: str, *, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
