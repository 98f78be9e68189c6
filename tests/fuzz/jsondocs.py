"""JSON documents for the fuzz tests of the controller's two APIs (admission and the group grants): any
JSON value, and every place inside a document, to replace or remove."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON document (the root is ())."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from places(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from places(child, (*path, index))
