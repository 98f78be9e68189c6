"""The real-process fixtures of `test_process` (a scripted lockd, a port where nothing listens), for the
other modules of this folder."""

from tests.initclient.test_process import closed_url, lockd

__all__ = ["closed_url", "lockd"]
