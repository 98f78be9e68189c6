"""Reading a policy file: its text (size-limited, UTF-8), its YAML documents with duplicate keys refused, then
the validator of each document (`documents`)."""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from stagger.policy.documents import parse_policy_documents
from stagger.policy.model import PolicyError, PolicyFile
from stagger.policy.rules import got_text

__all__ = ["MAX_POLICY_BYTES", "load_policy_file", "parse_policy_text", "read_policy_text"]


# A policy file is a few kilobytes; a large one is a mistake or an attack on lockd's memory (every node
# parses it), so it is refused before it is parsed.
MAX_POLICY_BYTES = 256 * 1024


def _tag_misfit(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        shown = got_text(node.value)
    else:
        shown = "a sequence" if isinstance(node, yaml.SequenceNode) else "a mapping"
    return f"cannot read {shown} as {node.tag}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that rejects a key written twice in one mapping (plain YAML keeps the last silently) and
    aliases (`*name`): a policy file never needs them, and a few nested ones expand to gigabytes."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's constructors raise plain ValueError on some scalars (`2001-13-45` read as a timestamp, an
        # int of more than 4300 digits, `!!int 0x`), and AttributeError or TypeError on a tag that does not
        # fit its node (`!!timestamp` on a mapping: found by tests/fuzz/test_policy_files.py), which escaped
        # as no PolicyError; here they become a YAML error at the node's line and column like any other.
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as error:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {got_text(node.value)}: {error}", node.start_mark
            ) from error
        except (AttributeError, TypeError) as error:
            raise yaml.constructor.ConstructorError(None, None, _tag_misfit(node), node.start_mark) from error

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a policy file", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        if not isinstance(node, yaml.MappingNode):  # a mapping's tag on another node (`!!map a`, `!!set [1]`)
            raise yaml.constructor.ConstructorError(None, None, _tag_misfit(node), node.start_mark)
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_policy_text(path: str | os.PathLike[str]) -> str:
    """The file's text; raises PolicyError naming the file when it cannot be read or is not UTF-8."""
    source = os.fspath(path)
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            raise PolicyError(
                [f"{source}: the policy file is larger than {MAX_POLICY_BYTES // 1024} KiB; refused"],
                source=source,
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise PolicyError([f"{source}: cannot read the policy file: {reason}"], source=source) from error


def load_policy_file(path: str | os.PathLike[str]) -> PolicyFile:
    """Read, parse and validate a policy file; raises PolicyError naming the file (and line for YAML)."""
    return parse_policy_text(read_policy_text(path), source=os.fspath(path))


def parse_policy_text(text: str, *, source: str = "<policy>", allow_empty: bool = True) -> PolicyFile:
    """Parse and validate a policy file's YAML text, one document or several separated by `---`; raises
    PolicyError naming the source (and line).

    With `allow_empty=False` a file with no document (empty, or only comments) is an error too: a reload
    must not turn a file emptied by mistake into "no policies"."""
    if len(text) > MAX_POLICY_BYTES:
        raise PolicyError(
            [f"{source}: the policy file is larger than {MAX_POLICY_BYTES // 1024} KiB; refused"],
            source=source,
        )
    try:
        # A SafeLoader subclass: no arbitrary objects. Read whole here, so that a YAML error of a later
        # document is a PolicyError too.
        documents = list(yaml.load_all(text, Loader=_UniqueKeyLoader))
    except RecursionError:
        # PyYAML composes nested collections recursively: a file of "[[[[..." ran out of stack, and the
        # RecursionError escaped as no PolicyError.
        raise PolicyError([f"{source}: invalid YAML: nested too deeply"], source=source) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(error, "problem", None) or str(error)
        if context := getattr(error, "context", None):
            problem = f"{problem} ({context})"
        raise PolicyError([f"{where}: invalid YAML: {problem}"], source=source) from error
    if all(document is None for document in documents) and not allow_empty:
        raise PolicyError([f"{source}: the policy file is empty"], source=source)
    return parse_policy_documents(documents, source=source)
