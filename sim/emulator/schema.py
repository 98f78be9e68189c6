"""The Kubernetes OpenAPI schemas, as shipped by `kubernetes-validate`, used for two things:

* validation: a cached strict JSON-schema validator per kind reports every violation at once (the
  library's own `validate()` re-reads the files and stops at the first error), and tells unknown fields
  apart from wrong ones, so the server can drop unknown fields with a warning (fieldValidation=Warn,
  the real default) or refuse them (fieldValidation=Strict);
* strategic merge patch: the schemas carry `x-kubernetes-patch-strategy` and
  `x-kubernetes-patch-merge-key`, exactly the metadata the real server's patcher reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

import jsonschema
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from sim.emulator.errors import FieldError

SCHEMA_VERSION = "1.37"
_DEFS_ID = "https://kubernetes.io/api/_definitions.json"

Node = dict[str, Any]
Path = tuple[str | int, ...]


def format_path(path: Iterable[str | int]) -> str:
    """`spec.containers[0].image`: how field paths appear in Kubernetes messages."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _schema_dir(version: str) -> str:
    known = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= version]
    chosen = known[-1] if known else kv_utils.latest_version()
    return f"v{chosen}-local-strict"


class Schemas:
    """Loaded once per server (about 10 ms); validators are built lazily per definition."""

    def __init__(self, *, version: str = SCHEMA_VERSION) -> None:
        folder = resources.files("kubernetes_validate").joinpath(
            "kubernetes-json-schema", _schema_dir(version)
        )
        document = json.loads(folder.joinpath("_definitions.json").read_text())
        self.definitions: dict[str, Node] = document["$defs"]
        self._registry: Registry[Any] = Resource.from_contents(document) @ Registry()
        self._validators: dict[str, jsonschema.protocols.Validator] = {}

    def has(self, definition: str) -> bool:
        return definition in self.definitions

    # ------------------------------------------------------------------------------------- validation

    def _validator(self, definition: str) -> jsonschema.protocols.Validator:
        validator = self._validators.get(definition)
        if validator is None:
            schema = {"$ref": f"{_DEFS_ID}#/$defs/{definition}"}
            validator = jsonschema.validators.Draft202012Validator(schema, registry=self._registry)
            self._validators[definition] = validator
        return validator

    def check(self, definition: str, obj: Any) -> tuple[list[Path], list[FieldError]]:
        """Unknown fields (paths) and schema violations of `obj` against `definition`."""
        unknown: list[Path] = []
        errors: list[FieldError] = []
        for error in self._validator(definition).iter_errors(obj):
            path: Path = tuple(error.absolute_path)
            if error.validator == "additionalProperties" and isinstance(error.instance, dict):
                known = (
                    set((error.schema.get("properties") or {}).keys())
                    if isinstance(error.schema, dict)
                    else set()
                )
                unknown.extend((*path, key) for key in sorted(error.instance) if key not in known)
            elif error.validator != "required":
                # A missing field decodes to its Go zero value: whether that is acceptable is semantic
                # validation's call (e.g. a container's name), not the schema's.
                errors.append(_field_error(error, path))
        return unknown, errors

    # ------------------------------------------------------------------------------ schema navigation

    def resolve(self, node: Node | None) -> Node | None:
        """Follow `$ref`s; the referring node's own `x-kubernetes-*` keys are kept (they describe the field)."""
        seen = 0
        while node is not None and "$ref" in node and seen < 32:
            target = self.definitions.get(str(node["$ref"]).rpartition("/")[2])
            if target is None:
                return None
            extras = {k: v for k, v in node.items() if k.startswith("x-kubernetes-")}
            node = {**target, **extras}
            seen += 1
        return node

    def root(self, definition: str) -> Node | None:
        return self.resolve(self.definitions.get(definition))

    def field(self, node: Node | None, name: str) -> Node | None:
        node = self.resolve(node)
        if node is None:
            return None
        prop = (node.get("properties") or {}).get(name)
        if prop is None and isinstance(node.get("additionalProperties"), dict):
            prop = node["additionalProperties"]
        return self.resolve(prop)

    def items(self, node: Node | None) -> Node | None:
        node = self.resolve(node)
        return self.resolve(node.get("items")) if node is not None else None


def remove_paths(obj: Any, paths: list[Path]) -> None:
    """Drop the unknown fields `check` found (deepest first, so indexes stay valid)."""
    for path in sorted(paths, key=len, reverse=True):
        target = obj
        for part in path[:-1]:
            try:
                target = target[part]
            except (KeyError, IndexError, TypeError):
                target = None
                break
        if isinstance(target, dict):
            target.pop(path[-1], None)


def _field_error(error: jsonschema.ValidationError, path: Path) -> FieldError:
    if error.validator == "required":
        missing = str(error.message).split("'")[1] if "'" in str(error.message) else ""
        return FieldError("FieldValueRequired", format_path((*path, missing)))
    field = format_path(path)
    if error.validator == "enum":
        supported = tuple(str(v) for v in error.validator_value if v is not None)
        return FieldError("FieldValueNotSupported", field, value=error.instance, supported=supported)
    if error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        kinds = " or ".join(str(w) for w in wanted if w != "null")
        return FieldError("FieldValueTypeInvalid", field, f"must be of type {kinds}", value=error.instance)
    if error.validator == "oneOf":
        return FieldError(
            "FieldValueTypeInvalid", field, "must be a string or a number", value=error.instance
        )
    return FieldError("FieldValueInvalid", field, str(error.message), value=error.instance)
