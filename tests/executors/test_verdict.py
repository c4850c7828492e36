"""Verdict schemas are closed (unknown fields fail) and checked the same on every channel."""

from __future__ import annotations

import pytest

from statewright._errors import PermanentError
from statewright.executors import VerdictSchema, close_schema

REVIEW = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "must_fix": {"type": "array", "items": {"type": "object",
                                                "properties": {"file": {"type": "string"}}}},
    },
    "required": ["approved"],
}


def test_close_schema_forbids_unknown_fields_at_top_level_and_inside() -> None:
    """Object schemas that say nothing about extra keys get additionalProperties: false."""
    closed = close_schema(REVIEW)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["must_fix"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in REVIEW  # the original is untouched


def test_close_schema_respects_explicit_openness_and_composition() -> None:
    """An explicit additionalProperties, or a composed schema, is left as written."""
    assert close_schema({"type": "object", "additionalProperties": True}) == {
        "type": "object", "additionalProperties": True}
    composed = {"type": "object", "allOf": [{"properties": {"a": {}}}]}
    assert "additionalProperties" not in close_schema(composed)


def test_problem_reports_where_and_what() -> None:
    """Invalid verdicts are described with their location."""
    schema = VerdictSchema(REVIEW)
    assert schema.problem({"approved": False, "must_fix": [{"file": "a.py"}]}) is None
    assert "not of type 'boolean'" in str(schema.problem({"approved": "true"}))
    assert "'approved' is a required property" in str(schema.problem({}))
    extra = str(schema.problem({"approved": True, "override": "ship it"}))
    assert "Additional properties are not allowed" in extra
    nested = str(schema.problem({"approved": True, "must_fix": [{"file": "a", "x": 1}]}))
    assert "at must_fix/0" in nested
    assert "must be a JSON object; got array" in str(schema.problem([True]))


def test_parse_rejects_non_json() -> None:
    """Text that is not JSON is a problem, not an exception."""
    verdict, problem = VerdictSchema(REVIEW).parse("approved: yes")
    assert verdict is None
    assert "not valid JSON" in str(problem)


def test_a_broken_schema_is_a_permanent_error() -> None:
    """A schema that is not JSON Schema cannot be retried into working."""
    with pytest.raises(PermanentError, match="not a valid JSON Schema"):
        VerdictSchema({"type": "object", "properties": {"a": {"type": "boolean-ish"}}})
    with pytest.raises(PermanentError, match="must be a JSON Schema object"):
        VerdictSchema(["not", "a", "schema"])  # type: ignore[arg-type]
