"""`GET /status`: what the controller is doing, as JSON for tools and as text for a person.

The document has a fixed core (the controller, its readiness, the policies in force, the serving
certificate, admission counters) and then one section per part that registered one (the group pacers,
leader election and the gate reconciler add theirs): each section is a JSON object under its own key,
shown as indented `key: value` lines in the text form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stagger import pacers
from stagger.durations import format_duration, format_duration_or_never
from stagger.policy import PolicyFile, StaggeringPolicy
from stagger.policywatch import PolicyWatcher
from stagger.timestamps import format_rfc3339
from webhook.settings import Settings
from webhook.tls import ServingCertificate

__all__ = ["build_status", "render_text"]


def _policy_row(policy: StaggeringPolicy) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": policy.name,
        "mode": policy.mode if policy.mode != "evict" else f"evict (hold: {policy.hold})",
        "pacer": pacers.name(policy.pacer),
        "labelSelector": policy.label_selector.to_query(),
        # "never" for math.inf: a JSON number cannot be infinite.
        "maxBlockedDuration": format_duration_or_never(policy.max_blocked_duration),
    }
    if policy.bypass_label_selector is not None:
        row["bypassLabelSelector"] = policy.bypass_label_selector.to_query()
    if policy.grouping_expression is not None:
        row["groupingExpression"] = policy.grouping_expression
    return row


def _policy_section(state: PolicyWatcher, *, max_wait: float) -> dict[str, Any]:
    policy_file: PolicyFile = state.policy_file
    section: dict[str, Any] = {
        "source": state.source,
        "loadedAt": format_rfc3339(state.loaded_at),
        "staggeringPolicies": [_policy_row(p) for p in policy_file.staggering_policies],
        "nodePolicies": len(policy_file.node_policies),
        "initClientMaxWait": format_duration(max_wait),
    }
    if state.last_error:
        section["lastReloadError"] = state.last_error
    return section


def _tls_section(certificate: ServingCertificate | None) -> dict[str, Any]:
    if certificate is None:
        return {"enabled": False}
    section: dict[str, Any] = {
        "enabled": True,
        "certFile": str(certificate.cert),
        "keyFile": str(certificate.key),
        "sha256": certificate.sha256,
        "loadedAt": format_rfc3339(certificate.loaded_at),
        "reloads": certificate.reloads,
    }
    if certificate.last_error:
        section["lastReloadError"] = certificate.last_error
    return section


def build_status(
    *,
    settings: Settings,
    listen: str,
    policy: PolicyWatcher,
    max_wait: float,
    certificate: ServingCertificate | None,
    admissions: Mapping[str, int],
    started_at: float,
    not_ready: Sequence[str],
    sections: Mapping[str, dict[str, Any]] = {},
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "controller": {
            "listen": listen,
            "image": settings.inject.image,
            "lockdPort": settings.inject.lockd_port,
            "prefix": settings.prefix,
            "startedAt": format_rfc3339(started_at),
        },
        "ready": not not_ready,
        "policy": _policy_section(policy, max_wait=max_wait),
        "tls": _tls_section(certificate),
        "admissions": dict(admissions),
    }
    if not_ready:
        doc["notReady"] = list(not_ready)
    doc.update(sections)
    return doc


def _lines(value: Any, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(value, Mapping):
        out: list[str] = []
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                out.append(f"{pad}{key}:")
                out.extend(_lines(item, indent + 1))
            else:
                out.append(f"{pad}{key}: {_scalar(item)}")
        return out
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, Mapping):
                inner = _lines(item, indent + 1)
                out.append(f"{pad}- {inner[0].strip()}" if inner else f"{pad}-")
                out.extend(inner[1:])
            else:
                out.append(f"{pad}- {_scalar(item)}")
        return out
    return [f"{pad}{_scalar(value)}"]


def _scalar(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping | list):
        return "none"
    return str(value)


def render_text(doc: Mapping[str, Any]) -> str:
    """The same document for `curl -k https://<controller>:9443/status?format=text`."""
    controller, pol, tls = doc["controller"], doc["policy"], doc["tls"]
    counts = doc["admissions"]
    out = [
        f"controller on {controller['listen']}  image {controller['image']}  lockd port "
        f"{controller['lockdPort']}  prefix {controller['prefix']}  since {controller['startedAt']}",
        "ready" if doc["ready"] else "NOT READY: " + "; ".join(doc.get("notReady", [])),
        f"policy file {pol['source']} (loaded {pol['loadedAt']}): {len(pol['staggeringPolicies'])} "
        f"staggering policies, {pol['nodePolicies']} node policies; init client maxWait "
        f"{pol['initClientMaxWait']}",
    ]
    if pol.get("lastReloadError"):
        out.append(f"policy reload FAILED, the last good policy stays: {pol['lastReloadError']}")
    if tls["enabled"]:
        out.append(
            f"tls certificate {tls['certFile']} sha256 {tls['sha256'][:16]}... (loaded {tls['loadedAt']}, "
            f"{tls['reloads']} reloads)"
        )
        if tls.get("lastReloadError"):
            out.append(f"certificate reload FAILED, the one in force stays: {tls['lastReloadError']}")
    else:
        out.append("tls OFF (--insecure-http)")
    out.append("admissions " + "  ".join(f"{k} {v}" for k, v in counts.items()))
    policies = pol["staggeringPolicies"]
    if policies:
        headers = ["POLICY", "MODE", "PACER", "SELECTOR", "GROUPING", "MAX BLOCKED"]
        rows = [
            [
                p["name"],
                p["mode"],
                p["pacer"],
                p["labelSelector"] or "(all)",
                p.get("groupingExpression", "-"),
                p["maxBlockedDuration"],
            ]
            for p in policies
        ]
        widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
        out.append("")
        for row in [headers, *rows]:
            out.append(
                "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            )
    core = {"controller", "ready", "notReady", "policy", "tls", "admissions"}
    for key, value in doc.items():
        if key not in core:
            out.append("")
            out.append(f"{key}:")
            out.extend(_lines(value, 1))
    return "\n".join(out) + "\n"
