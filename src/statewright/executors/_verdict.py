"""Verdict schemas: close them (unknown fields fail closed) and check verdicts against them.

Every adapter (python callable, command, OpenAI-compatible, the MCP verdict server) goes
through ``VerdictSchema`` so "valid" means the same thing on every channel. Before the
schema is asked, a verdict must be plain JSON within the limits of ``statewright._jsonsafe``
(``MAX_JSON_DEPTH`` levels, ``MAX_JSON_BYTES`` bytes, no NaN or Infinity, no lone
surrogates); a verdict over the size limit is ``output_too_large``, any other problem
``no_verdict``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import exceptions as js_exceptions
from jsonschema import validators

from statewright._record import record

from .._errors import PermanentError
from .._jsonsafe import JsonProblem, loads_plain, plain_json
from .base import Reason

# Keywords next to which adding ``additionalProperties: false`` could reject valid data
# (the properties may be declared in a subschema that this level cannot see).
_OPEN_BY_COMPOSITION = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "dependentSchemas")
_OPENING_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")

MAX_MESSAGE_CHARS = 1000


def close_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` where object schemas that say nothing about extra keys forbid them.

    Applies to the top level and, recursively, to ``properties`` values and ``items``, for
    object schemas that are not composed (allOf/anyOf/oneOf/$ref/if). An explicit
    ``additionalProperties`` (or ``patternProperties``/``unevaluatedProperties``) is kept.
    """
    closed = copy.deepcopy(dict(schema))
    _close_in_place(closed)
    return closed


def _close_in_place(node: dict[str, Any]) -> None:
    is_object = node.get("type") == "object" or "properties" in node
    if (
        is_object
        and not any(k in node for k in _OPENING_KEYWORDS)
        and not any(k in node for k in _OPEN_BY_COMPOSITION)
    ):
        node["additionalProperties"] = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        for sub in properties.values():
            if isinstance(sub, dict):
                _close_in_place(sub)
    items = node.get("items")
    if isinstance(items, dict):
        _close_in_place(items)


@record
class Checked:
    """A verdict that passed (``verdict``, a plain copy) or why not (``problem`` and the
    reason code it fails with: ``no_verdict`` or ``output_too_large``)."""

    verdict: dict[str, Any] | None
    problem: str | None = None
    reason: Reason | None = None


class VerdictSchema:
    """A closed, checked verdict schema. Build once per attempt, then ``problem(verdict)``."""

    def __init__(self, schema: Mapping[str, Any], *, where: str = "output_schema") -> None:
        if not isinstance(schema, Mapping):
            msg = f"{where} must be a JSON Schema object; got {type(schema).__name__}"
            raise PermanentError(msg, reason=Reason.INVALID_SPEC)
        self.schema = close_schema(schema)
        cls = validators.validator_for(self.schema)
        try:
            cls.check_schema(self.schema)
        except js_exceptions.SchemaError as exc:
            msg = f"{where} is not a valid JSON Schema: {exc.message}; fix the step's output_schema"
            raise PermanentError(msg, reason=Reason.INVALID_SPEC) from None
        self._validator = cls(self.schema)

    def check(self, verdict: object) -> Checked:
        """The verdict as plain JSON if it is one and valid against the schema, else why not."""
        return _checked(verdict, self._schema_problem)

    def check_text(self, text: str) -> Checked:
        """``check`` for JSON text (strict: ``NaN`` and ``Infinity`` are not JSON)."""
        return _checked_text(text, self.check)

    def problem(self, verdict: object) -> str | None:
        """None when ``verdict`` is a JSON object valid against the schema, else why not."""
        return self.check(verdict).problem

    def parse(self, text: str) -> tuple[dict[str, Any] | None, str | None]:
        """Parse JSON text and check it: ``(verdict, None)`` or ``(None, problem)``."""
        checked = self.check_text(text)
        return checked.verdict, checked.problem

    def _schema_problem(self, verdict: object) -> str | None:
        if not isinstance(verdict, dict):
            return _object_problem(verdict)
        errors = sorted(self._validator.iter_errors(verdict), key=lambda e: list(e.path))
        if not errors:
            return None
        parts = []
        for error in errors[:5]:
            where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
            parts.append(f"at {where}: {error.message}")
        if len(errors) > 5:
            parts.append(f"and {len(errors) - 5} more")
        return _cut("verdict does not match the schema: " + "; ".join(parts))


class AnyVerdict:
    """The verdict of a step without an output_schema: optional, but when given, any JSON
    object within the limits every verdict is held to (it becomes the step's result)."""

    schema = None

    def check(self, verdict: object) -> Checked:
        return _checked(verdict, _object_problem)

    def check_text(self, text: str) -> Checked:
        return _checked_text(text, self.check)


def _object_problem(verdict: object) -> str | None:
    return None if isinstance(verdict, dict) else f"the verdict must be a JSON object; got {_json_type(verdict)}"


def _checked(verdict: object, problem_of: Callable[[object], str | None]) -> Checked:
    plain, unsafe = plain_json(verdict)
    if unsafe is not None:
        return _refused(unsafe)
    problem = problem_of(plain)
    if problem is not None:
        return Checked(None, problem, Reason.NO_VERDICT)
    return Checked(plain)


def _checked_text(text: str, check: Callable[[object], Checked]) -> Checked:
    value, unsafe = loads_plain(text)
    if unsafe is not None:
        return _refused(unsafe)
    return check(value)


def _refused(unsafe: JsonProblem) -> Checked:
    reason = Reason.OUTPUT_TOO_LARGE if unsafe.too_large else Reason.NO_VERDICT
    return Checked(None, f"the verdict is {unsafe.message}", reason)


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    if type(value) in names:
        return names[type(value)]
    return "number" if isinstance(value, int | float) else type(value).__name__


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."
