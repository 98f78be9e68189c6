"""Printing: rows as a kubectl-style table (upper-case headers, columns two spaces apart), documents as
JSON or YAML (`-o json|yaml`, for scripts: the same fields the tables are made from)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import yaml

__all__ = ["OutputFormat", "dump", "render_table"]

OutputFormat = Literal["table", "json", "yaml"]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as wide as their widest cell; trailing blanks cut, as kubectl prints."""
    widths = [max([len(header), *(len(row[i]) for row in rows)]) for i, header in enumerate(headers)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [list(headers), *rows]
    ]
    return "\n".join(lines) + "\n"


def dump(document: Mapping[str, Any], *, output: OutputFormat) -> str:
    if output == "yaml":
        return yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
