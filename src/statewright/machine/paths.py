"""References into a task's state: ``input.FIELD...`` and ``results.STEP.FIELD...``.

A reference is dotted: ``input.supplier_id``, ``results.analyse.account.iban``; a segment of
digits indexes a list (``results.plan.files.0``). Pure: no I/O, used by the reducer (a human
step's proposal) and by the loader (checked against the workflow before it runs)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from statewright._record import record

ROOTS = ("input", "results")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
MISSING_REFERENCE = "missing_reference"  # the reason code of a reference that found nothing


@record
class Ref:
    """A parsed reference into a task's ``input`` or ``results`` (for results, the step id first)."""

    text: str
    root: str  # input | results
    parts: tuple[str, ...]  # for results: the step id first

    @property
    def step(self) -> str | None:
        return self.parts[0] if self.root == "results" else None


class RefError(ValueError):
    """A reference that cannot be parsed (at load time) or finds nothing (when resolved)."""


def parse_ref(text: object) -> Ref:
    if not isinstance(text, str) or not text:
        raise RefError(f"a reference must be text such as input.FIELD or results.STEP.FIELD; got {text!r}")
    root, _, rest = text.partition(".")
    if root not in ROOTS:
        raise RefError(f"reference {text!r} must start with input. or results.")
    parts = tuple(rest.split(".")) if rest else ()
    if any(_SEGMENT.fullmatch(p) is None for p in parts):
        raise RefError(f"reference {text!r}: each part after the root is letters, digits, _ or - "
                       "(a number indexes a list)")
    if root == "results" and not parts:
        raise RefError(f"reference {text!r} must name a step: results.STEP[.FIELD...]")
    return Ref(text, root, parts)


def resolve(ref: Ref, task_input: Mapping[str, Any], results: Mapping[str, Any]) -> Any:
    """The value ``ref`` names. Raises RefError (a ``missing_reference``) when a step has no
    result yet, a field is missing, or a segment walks into something that is not a mapping
    or a list."""
    if ref.root == "input":
        value: Any = task_input
        walked = "input"
        parts: Sequence[str] = ref.parts
    else:
        step = ref.parts[0]
        if step not in results:
            raise RefError(f"{ref.text}: step {step!r} has no result (not run yet, or its latest attempt "
                           "recorded none)")
        value, walked, parts = results[step], f"results.{step}", ref.parts[1:]
    for part in parts:
        if isinstance(value, Mapping):
            if part not in value:
                raise RefError(f"{ref.text}: {walked} has no field {part!r}")
            value = value[part]
        elif isinstance(value, list):
            if not part.isdigit() or int(part) >= len(value):
                raise RefError(f"{ref.text}: {walked} is a list of {len(value)}; it has no item {part!r}")
            value = value[int(part)]
        else:
            raise RefError(f"{ref.text}: {walked} is {_kind(value)}, which has no field {part!r}")
        walked = f"{walked}.{part}"
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else f"a {type(value).__name__}"
