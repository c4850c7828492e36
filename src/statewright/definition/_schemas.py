"""Checks on the JSON Schemas in a definition (``input_schema``, ``output_schema``) beyond
the meta-schema: every ``$ref`` resolves inside the schema (nothing is fetched: a remote
or missing reference would fail at the first task), and no chain of in-place references
(``$ref``, ``allOf``, ``not``, ...) loops or runs past ``MAX_SCHEMA_REF_CHAIN``, since
validating anything against such a schema never ends or exhausts the stack."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from statewright.definition.limits import MAX_SCHEMA_REF_CHAIN


@functools.lru_cache(maxsize=256)
def schema_problems(canonical: str) -> tuple[str, ...]:
    """What is wrong with a JSON Schema (given as canonical JSON: the same schema in many
    files or steps is checked once): not a valid schema, a ``$ref`` that does not resolve,
    or references that never descend into the data."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    schema = json.loads(canonical)
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        return (f"not a valid JSON Schema: {exc.message}",)
    validator = cls(schema)
    unresolved = _unresolved_refs(validator)
    if unresolved:
        return tuple(f"$ref {ref!r} does not resolve within the schema; point it at a definition "
                     "in the same schema (e.g. '#/$defs/NAME')" for ref in unresolved)
    cycle = _ref_cycle(validator)
    if cycle is not None:
        return (f"$ref {cycle!r} leads back to itself, or through more than {MAX_SCHEMA_REF_CHAIN} "
                "references, without descending into the data; validation would never end or "
                "exhaust the stack",)
    return ()


def _unresolved_refs(validator: Any) -> list[str]:
    """Every ``$ref`` (walked iteratively) that the validator cannot resolve now. Nothing is
    fetched: a reference outside the schema would fail at the first task, so it fails here."""
    from referencing.exceptions import Unresolvable

    resolver = validator._resolver  # jsonschema's own resolver, as validation will use it
    bad: list[str] = []
    stack: list[Any] = [validator.schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in bad:
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    bad.append(ref)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return bad


# Keywords whose subschemas apply to the same instance: a cycle through only these never ends.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")


def _ref_cycle(validator: Any) -> str | None:
    """The ``$ref`` of a reference cycle (or a chain longer than ``MAX_SCHEMA_REF_CHAIN``)
    that never descends into the instance, or None. An iterative depth-first walk over
    in-place edges (``$ref``, ``allOf``, ``not``, ...), remembering each finished node's
    longest in-place chain."""
    root = validator._resolver
    height: dict[int, int] = {}  # finished nodes: the longest in-place chain from each
    candidates: list[Any] = [validator.schema]
    while candidates:  # every subschema may start a chain
        start = candidates.pop()
        if isinstance(start, list):
            candidates.extend(start)
            continue
        if not isinstance(start, Mapping):
            continue
        candidates.extend(start.values())
        if id(start) not in height:
            found = _walk_in_place(start, root, height)
            if found is not None:
                return found
    return None


class _Frame:
    __slots__ = ("best", "children", "node", "via")

    def __init__(self, node: Mapping[str, Any], children: list[tuple[Any, Any, str]], via: str) -> None:
        self.node, self.children, self.via, self.best = node, children, via, 0


def _in_place_children(node: Mapping[str, Any], resolver: Any) -> list[tuple[Any, Any, str]]:
    from referencing.exceptions import Unresolvable

    children: list[tuple[Any, Any, str]] = []
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            target = resolver.lookup(ref)
        except Unresolvable:
            pass
        else:
            children.append((target.contents, target.resolver, ref))
    for key in _IN_PLACE_LISTS:
        items = node.get(key)
        if isinstance(items, list):
            children.extend((sub, resolver, "") for sub in items)
    children.extend((node[key], resolver, "") for key in _IN_PLACE_ONE if key in node)
    return children


def _walk_in_place(start: Mapping[str, Any], resolver: Any, height: dict[int, int]) -> str | None:
    path = [_Frame(start, _in_place_children(start, resolver), "#")]
    on_path = {id(start)}
    while path:
        frame = path[-1]
        if not frame.children:
            path.pop()
            on_path.discard(id(frame.node))
            height[id(frame.node)] = frame.best + 1
            if path:
                path[-1].best = max(path[-1].best, frame.best + 1)
            continue
        child, child_resolver, via = frame.children.pop()
        if not isinstance(child, Mapping):
            continue
        via = via or frame.via
        if id(child) in on_path:
            return via
        if id(child) in height:
            frame.best = max(frame.best, height[id(child)])
            if len(path) + height[id(child)] > MAX_SCHEMA_REF_CHAIN:
                return via
            continue
        if len(path) >= MAX_SCHEMA_REF_CHAIN:
            return via
        on_path.add(id(child))
        path.append(_Frame(child, _in_place_children(child, child_resolver), via))
    return None
