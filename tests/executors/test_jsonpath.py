"""The JSONPath subset used by HTTP checks."""

from __future__ import annotations

import pytest

from statewright.executors._jsonpath import json_equal, parse_json_path, resolve_json_path

DOC = {"state": "green", "items": [{"id": 1}, {"id": 2, "ok": True}], "a-b": {"c d": None}}


@pytest.mark.parametrize(
    ("path", "found", "value"),
    [
        ("$", True, DOC),
        ("$.state", True, "green"),
        ("$.items[0].id", True, 1),
        ("$.items[-1].ok", True, True),
        ("$['a-b']['c d']", True, None),
        ('$.a-b["c d"]', True, None),
        ("$.items[2]", False, None),
        ("$.state.length", False, None),
        ("$.missing", False, None),
        ("$.items.id", False, None),
    ],
)
def test_resolve(path: str, found: bool, value: object) -> None:
    """Paths resolve to the value they name, or report that it is absent."""
    assert resolve_json_path(DOC, parse_json_path(path)) == (found, value)


@pytest.mark.parametrize("bad", ["state", "$..state", "$.items[*]", "$[?(@.x)]", "$.", 5])
def test_unsupported_paths_are_rejected_with_the_position(bad: object) -> None:
    """Anything outside the subset is a ValueError, not a silent mismatch."""
    with pytest.raises(ValueError, match=r"must start with|cannot read"):
        parse_json_path(bad)


def test_json_equal_keeps_json_types_apart() -> None:
    """true is not 1, "1" is not 1, but 200 is 200.0."""
    assert json_equal(True, True)
    assert not json_equal(True, 1)
    assert not json_equal(1, True)
    assert not json_equal("1", 1)
    assert json_equal(200, 200.0)
    assert json_equal({"a": [1, "x"]}, {"a": [1, "x"]})
    assert not json_equal({"a": [1]}, {"a": [True]})
    assert json_equal(None, None)
