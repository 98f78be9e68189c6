"""What decoding a request body into the Go types refuses: a value of the wrong JSON type. The real server
answers 400 BadRequest, "KIND in version "V" cannot be handled as a KIND: json: cannot unmarshal string
into Go struct field PodSpec.spec.hostNetwork of type bool" (encoding/json's UnmarshalTypeError: the first
one in document order; the struct holding the field; the JSON path without indexes or map keys; the Go
type), and a malformed quantity with resource.Quantity's own error (k8s.io/apimachinery/pkg/api/resource).

The Go types are read off the OpenAPI definitions the emulator already has: `$ref` names give struct and
package names (io.k8s.api.core.v1.PodSpec is v1.PodSpec), `format` the integer sizes, `items` and
`additionalProperties` slices and maps. IntOrString decodes as an int32 when it is not a string.
"""

from __future__ import annotations

import re
from typing import Any

from sim.emulator.schema import Node, Schemas

_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_QUANTITY_FORMAT = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_QUANTITY_SUFFIXES = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"}
QUANTITY_FORMAT_ERROR = f"quantities must match the regular expression '{_QUANTITY_FORMAT.pattern}'"
_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class _Mismatch(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _ref_name(node: Node) -> str | None:
    ref = node.get("$ref")
    return str(ref).rpartition("/")[2] if ref else None


def _short(definition: str) -> str:
    return definition.rpartition(".")[2]


def _package(definition: str) -> str:
    return definition.rsplit(".", 2)[-2]


def _type_of(node: Node) -> str:
    kinds = node.get("type")
    if isinstance(kinds, list):
        kinds = next((k for k in kinds if k != "null"), None)
    return str(kinds or "")


def go_type(node: Node) -> str:
    """The Go type a schema node decodes into, as reflect.Type.String() prints it."""
    name = _ref_name(node)
    if name == _INT_OR_STRING:
        return "int32"
    if name is not None:
        return f"{_package(name)}.{_short(name)}"
    kind, fmt = _type_of(node), node.get("format")
    if kind == "array":
        return "[]" + go_type(node.get("items") or {})
    if kind == "object":
        values = node.get("additionalProperties")
        return "map[string]" + (go_type(values) if isinstance(values, dict) else "interface {}")
    if kind == "integer":
        return str(fmt) if fmt in ("int32", "int64") else "int"
    return {"string": "[]uint8" if fmt == "byte" else "string", "number": "float64", "boolean": "bool"}.get(
        kind, kind
    )


def _json_kind(value: Any, target: str) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        integral = isinstance(value, int) or value.is_integer()
        return "number" if integral or not target.startswith("int") else f"number {value!r}"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Walker:
    def __init__(self, schemas: Schemas) -> None:
        self.definitions = schemas.definitions

    def mismatch(self, value: Any, node: Node, struct: str, path: list[str]) -> _Mismatch:
        target = go_type(node)
        where = f"Go struct field {struct}.{'.'.join(path)}" if path else "Go value"
        return _Mismatch(f"json: cannot unmarshal {_json_kind(value, target)} into {where} of type {target}")

    def check(self, value: Any, node: Node, struct: str, path: list[str]) -> None:
        name = _ref_name(node)
        if name == _QUANTITY:
            self._quantity(value)
        elif name == _INT_OR_STRING:
            if not isinstance(value, str) and not self._fits_integer(value, "int32"):
                raise self.mismatch(value, node, struct, path)
        elif name is not None:
            self._struct(value, node, name, struct, path)
        else:
            self._plain(value, node, struct, path)

    def _struct(self, value: Any, node: Node, name: str, struct: str, path: list[str]) -> None:
        target = self.definitions.get(name) or {}
        properties = target.get("properties")
        if properties is None:  # a string-like wrapper (Time) or free-form content
            if _type_of(target) in ("string", "integer", "number", "boolean"):
                self._plain(value, target, struct, path)
            return
        if not isinstance(value, dict):
            raise self.mismatch(value, node, struct, path)
        for key, item in value.items():
            field = properties.get(key)
            if field is not None and item is not None:
                self.check(item, field, _short(name), [*path, key])

    def _plain(self, value: Any, node: Node, struct: str, path: list[str]) -> None:
        kind = _type_of(node)
        if kind == "array":
            if not isinstance(value, list):
                raise self.mismatch(value, node, struct, path)
            for item in value:
                if item is not None:
                    self.check(item, node.get("items") or {}, struct, path)
        elif kind == "object":
            if not isinstance(value, dict):
                raise self.mismatch(value, node, struct, path)
            values = node.get("additionalProperties")
            if isinstance(values, dict):
                for item in value.values():
                    if item is not None:
                        self.check(item, values, struct, path)
        elif not self._scalar_fits(value, kind, node):
            raise self.mismatch(value, node, struct, path)

    def _scalar_fits(self, value: Any, kind: str, node: Node) -> bool:
        if kind == "string":
            return isinstance(value, str)
        if kind == "boolean":
            return isinstance(value, bool)
        if kind == "number":
            return not isinstance(value, bool) and isinstance(value, int | float)
        if kind == "integer":
            return self._fits_integer(value, go_type(node))
        return True

    @staticmethod
    def _fits_integer(value: Any, target: str) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if isinstance(value, float) and not value.is_integer():
            return False
        low, high = _RANGES.get(target, _RANGES["int64"])
        return low <= int(value) <= high

    @staticmethod
    def _quantity(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _Mismatch(QUANTITY_FORMAT_ERROR)
        if isinstance(value, str):
            found = _QUANTITY_FORMAT.match(value.strip())
            if found is None:
                raise _Mismatch(QUANTITY_FORMAT_ERROR)
            suffix = found.group(2)
            if suffix not in _QUANTITY_SUFFIXES and not re.fullmatch(r"[eE][-+]?[0-9]+", suffix):
                raise _Mismatch("unable to parse quantity's suffix")


def decode_problem(schemas: Schemas, definition: str, obj: Any) -> str | None:
    """Why `obj` would not decode into the Go type of `definition` (None: it would)."""
    if not schemas.has(definition):
        return None
    try:
        _Walker(schemas).check(obj, {"$ref": f"#/$defs/{definition}"}, _short(definition), [])
    except _Mismatch as mismatch:
        return mismatch.message
    return None
