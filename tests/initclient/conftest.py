"""The real-process fixtures of tests/initclient/process.py (a scripted lockd, a port where nothing listens),
for the modules of this folder."""

from tests.initclient.process import closed_url, lockd

__all__ = ["closed_url", "lockd"]
