"""References to task state inside a command's arguments: ``{input.branch}``,
``{results.analyse.iban}``, ``{results.scan.files.0}``.

    run: {command: [git, checkout, "{input.branch}"]}
    check: {command: [curl, -fsS, "https://ci.example/runs/{results.start.run_id}"]}

A reference is ``{ROOT}`` or ``{ROOT.PATH}``: ROOT is ``input`` (the task's input) or
``results`` (``results.STEP`` is that step's latest result); PATH is dot-separated
segments of letters, digits, ``_`` and ``-``. A segment of digits indexes a list (and is
a key on an object). ``{{`` is a literal ``{``; a ``}`` needs no escape, and braces that
do not make a reference (``{}``, ``{"a": 1}``, ``{x}``) stay as they are.

Each argument is resolved on its own before the command starts, and stays exactly one
argument: no shell ever sees it. A string value is put in as it is; any other value
(number, boolean, null, list, object) as its compact JSON text.

``reference_problems`` is the load-time check (an unknown root or step, a step that
cannot have run yet, a field a schema proves cannot exist); ``resolve_argv`` is the
run-time one, raising ValueError with one line when a value is missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from statewright._record import record
from statewright.definition.model import Step, StepKind
from statewright.machine.paths import Ref, parse_ref, resolve

ROOTS = ("input", "results")
#: Programs that run code given on their command line (``-c``/``-e``).
_INTERPRETER = re.compile(r"(?:sh|bash|dash|zsh|ksh|ash|fish|pwsh|python[0-9.]*|pypy[0-9.]*|node|perl|ruby|php)")
_SHORT_FLAGS = re.compile(r"-[A-Za-z]+")
#: The most one argument may be once resolved (Linux refuses longer ones: MAX_ARG_STRLEN).
MAX_ARGUMENT_BYTES = 128 * 1024 - 1

_REFERENCE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_-]+)*)\}")


@record
class Reference:
    """One ``{ROOT.PATH}`` in an argument; ``text`` is how it was written."""

    root: str
    path: tuple[str, ...]
    text: str


Part = str | Reference


def parse_item(item: str) -> list[Part]:
    """An argument as literal text and references, ``{{`` read as ``{``."""
    parts: list[Part] = []
    literal: list[str] = []
    pos = 0
    while pos < len(item):
        if item.startswith("{{", pos):
            literal.append("{")
            pos += 2
            continue
        m = _REFERENCE.match(item, pos) if item[pos] == "{" else None
        if m is not None and (m.group(2) or m.group(1) in ROOTS):
            if literal:
                parts.append("".join(literal))
                literal = []
            path = tuple(m.group(2).split(".")[1:])
            parts.append(Reference(m.group(1), path, m.group(0)))
            pos = m.end()
            continue
        literal.append(item[pos])
        pos += 1
    if literal:
        parts.append("".join(literal))
    return parts


def has_references(items: Sequence[object]) -> bool:
    """Whether any argument holds a reference or a ``{{`` (so needs resolving)."""
    return any(isinstance(i, str) and "{" in i for i in items)


# --- run time --------------------------------------------------------------------------


def resolve_argv(
    argv: Sequence[str], input: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """``argv`` with every reference replaced by its value, each item still one argument.
    Raises ValueError (one line naming the reference) when a value is missing or cannot
    be an argument."""
    return [_resolve_item(item, input, results) if "{" in item else item for item in argv]


def _resolve_item(item: str, input: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> str:
    out: list[str] = []
    for part in parse_item(item):
        out.append(part if isinstance(part, str) else _as_text(lookup(part, input, results)))
    text = "".join(out)
    if "\0" in text:
        raise ValueError(f"{item!r} resolves to text with a NUL character, which no argument can carry")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES:
        raise ValueError(f"{item!r} resolves to more than {MAX_ARGUMENT_BYTES:,} bytes, more than one "
                         "argument may hold; read the value from $STATEWRIGHT_STATE instead")
    return text


def lookup(ref: Reference, input: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> Any:
    """The value ``ref`` names, or ValueError (``RefError``) saying which part is missing."""
    if ref.root not in ROOTS:
        raise ValueError(f"{ref.text}: unknown root {ref.root!r}; references start with input or results")
    if ref.root == "results" and not ref.path:
        return results
    return resolve(Ref(ref.text, ref.root, ref.path), input, results)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=dict)



# --- load time -------------------------------------------------------------------------


def command_items(step: Step) -> Iterator[tuple[str, list[str]]]:
    """Each argv a step runs, as ``(where, items)``: its code command, its check command,
    its command agent. A string command is split as the executor splits it."""
    for key, spec in (("run", step.run), ("check", step.check), ("agent", step.agent)):
        if not isinstance(spec, Mapping) or "command" not in spec:
            continue
        command = spec["command"]
        if isinstance(command, str):
            try:
                yield key, shlex.split(command)
            except ValueError:
                continue  # the spec's own check reports it
        elif isinstance(command, list):
            yield key, [p for p in command if isinstance(p, str)]


def reference_problems(steps: Sequence[Step], input_schema: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(step id, problem)`` for every reference that can never resolve (in a command's
    argv, a human step's ``proposal`` and its approvers' ``scope``), and every one written
    inside an interpreter's inline code (where it would be read as code)."""
    index = {s.id: i for i, s in enumerate(steps)}
    out: list[tuple[str, str]] = []
    for i, step in enumerate(steps):
        for where, text in (*(("proposal", r) for r in step.proposal),
                            *((f"approvers scope {k}", r) for k, r in step.approvers_scope.items())):
            dotted = parse_ref(text)
            problem = reference_problem(Reference(dotted.root, dotted.parts, text), i, steps, index, input_schema)
            if problem is not None:
                out.append((step.id, f"{where} {text}: {problem}"))
        for key, items in command_items(step):
            for n, item in enumerate(items):
                refs = [p for p in parse_item(item) if isinstance(p, Reference)] if "{" in item else []
                for ref in refs:
                    problem = reference_problem(ref, i, steps, index, input_schema)
                    if problem is not None:
                        out.append((step.id, f"{key} command item {n} {ref.text}: {problem}"))
                if refs and _in_inline_script(items, n):
                    out.append((step.id, f"{key} command item {n}: {_INLINE}"))
    return out


_INLINE = ("a reference inside an inline script would be read as code; pass it as its own argument "
           "instead, e.g. [sh, -c, 'echo \"$1\"', sh, \"{input.x}\"], or [python, -c, CODE, \"{input.x}\"] "
           "with CODE reading sys.argv")


def _in_inline_script(items: Sequence[str], n: int) -> bool:
    """Whether item ``n`` is the code an interpreter runs from its command line
    (``sh -c CODE``, ``bash -lc CODE``, ``python -c CODE``, ``node -e CODE``, ``perl -e CODE``)."""
    if n < 2 or not _INTERPRETER.fullmatch(os.path.basename(items[0])):
        return False
    flag = items[n - 1]
    return flag == "--eval" or (_SHORT_FLAGS.fullmatch(flag) is not None and ("c" in flag or "e" in flag))


def reference_problem(
    ref: Reference, at: int, steps: Sequence[Step], index: Mapping[str, int],
    input_schema: Mapping[str, Any] | None,
) -> str | None:
    if ref.root == "input":
        return _schema_refutes(input_schema, ref.path, "input", "the workflow's input_schema")
    if ref.root != "results":
        return f"unknown root {ref.root!r}; a reference starts with input or results (write {{{{ for a literal {{)"
    if not ref.path:
        return None
    name, rest = ref.path[0], ref.path[1:]
    if name not in index:
        return f"{name!r} is not a step of this workflow"
    if index[name] == at:
        return f"{name!r} is this step; a step sees only the results of steps before it"
    if index[name] > at:
        return f"step {name!r} comes after this one, so it cannot have run yet"
    source = steps[index[name]]
    if source.kind is StepKind.HUMAN:
        return f"step {name!r} is a human step, which records no result"
    if source.kind is StepKind.WAIT:
        return _schema_refutes(WAIT_RESULT_SCHEMA, rest, f"results.{name}", "a wait step's result")
    if source.kind is StepKind.MAP:
        return _schema_refutes(MAP_RESULT_SCHEMA, rest, f"results.{name}", "a map step's result")
    return _schema_refutes(source.output_schema, rest, f"results.{name}", f"the output_schema of step {name!r}")


def result_schema(step: Step) -> Mapping[str, Any] | None:
    """The schema of what ``step`` records as its result (None: not stated)."""
    if step.kind is StepKind.WAIT:
        return WAIT_RESULT_SCHEMA
    if step.kind is StepKind.MAP:
        return MAP_RESULT_SCHEMA
    return step.output_schema


#: What a wait step records as its result: its last check.
WAIT_RESULT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"check": {"type": "integer"}, "passed": {"type": "boolean"},
                   "detail": {"type": "string"}, "body": {}},
    "additionalProperties": False,
}


#: What a map step records as its result: its children's results in item order (null for
#: one that did not complete), the counts, and each failure.
MAP_RESULT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "results": {"type": "array"}, "succeeded": {"type": "integer"}, "failed": {"type": "integer"},
        "failures": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer"}, "task_id": {"type": "string"}, "status": {"type": "string"},
            "reason": {"type": "string"}}}},
    },
    "additionalProperties": False,
}


def _schema_refutes(schema: object, path: tuple[str, ...], walked: str, what: str) -> str | None:
    """Why ``schema`` proves ``path`` cannot exist, or None when it may. Only what the
    schema says plainly counts: ``type``, ``properties``, ``additionalProperties``, ``items``."""
    for segment in path:
        if not isinstance(schema, Mapping):
            return None
        kind = schema.get("type")
        if kind == "object":
            props = schema.get("properties")
            props = props if isinstance(props, Mapping) else {}
            if segment in props:
                schema = props[segment]
            elif schema.get("additionalProperties") is False and "patternProperties" not in schema:
                known = ", ".join(sorted(props)) or "none"
                return f"{what} allows no field {segment!r} in {walked} (fields: {known})"
            else:
                schema = schema.get("additionalProperties")
        elif kind == "array":
            if not segment.isdigit():
                return f"{what} makes {walked} a list; index it with a number"
            schema = schema.get("items")
        elif isinstance(kind, str):
            return f"{what} makes {walked} a {kind}, which has no field {segment!r}"
        else:
            return None
        walked = f"{walked}.{segment}"
    return None
