"""Policy files for tests."""

from __future__ import annotations


def limit_policy(limit: int, *, hold: str = "2m", extra: str = "") -> str:
    """A policy file with one node policy `test` allowing `limit` pods starting at once; `extra` adds
    node policy lines (indented two spaces)."""
    return (
        "nodePolicies:\n"
        "- name: test\n"
        f"  holdTimeout: {hold}\n"
        "  throttleConfig:\n"
        f"    maxConcurrent: {{value: {limit}}}\n"
        f"{extra}"
    )
