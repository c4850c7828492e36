"""Map steps in definitions: parsing ``kind: map``, checking its ``items`` reference, and
reading the child workflows a file names (pinned by content hash, cycles refused).

    - id: review-files
      kind: map
      owner: team-review
      workflow: review-one.yaml      # a file next to this one, or a registered workflow's name
      items: results.plan.files      # a list in the task's state
      max_concurrency: 8             # children running at once (default 10)
      tolerated_failures: 10%        # or a count; more failures fail the step

A ``workflow:`` that ends in ``.yaml`` or ``.yml`` or holds a ``/`` is a file, read relative
to the file that names it; anything else is the name of a workflow registered with the
engine (checked when a task is submitted)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from statewright._errors import DefinitionError
from statewright.definition.limits import MAX_COUNT, MAX_MAP_CONCURRENCY, MAX_MAP_DEPTH, NAME, NAME_RULE, is_name
from statewright.definition.model import MapSpec, Step, StepKind, Workflow
from statewright.definition.references import Reference, reference_problem, result_schema
from statewright.machine.paths import RefError, parse_ref

_HASH = re.compile(r"[0-9a-f]{64}")
_PERCENT = re.compile(r"\s*([0-9]{1,3}(?:\.[0-9]+)?)\s*%\s*")


def is_file_ref(ref: str) -> bool:
    """Whether a map step's ``workflow:`` names a file (else a registered workflow's name)."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref


def parse_map(raw: Mapping[str, Any], where: str, add: Callable[[str, str], None]) -> MapSpec | None:
    """The MapSpec of a ``kind: map`` step, each problem given to ``add``."""
    workflow = raw.get("workflow")
    if not isinstance(workflow, str) or not workflow.strip():
        add(where, "'workflow' must name the child workflow: a file (child.yaml) or a registered name")
        return None
    if not is_file_ref(workflow) and not is_name(workflow, NAME):
        add(where, f"'workflow' {workflow!r} is neither a file (ending in .yaml or .yml) nor a name of {NAME_RULE}")
    pinned = raw.get("workflow_hash", "")
    if pinned and (not isinstance(pinned, str) or _HASH.fullmatch(pinned) is None):
        add(where, "'workflow_hash' must be a content hash of 64 hex digits")
        pinned = ""
    items = raw.get("items")
    try:
        parse_ref(items)
    except RefError as exc:
        add(where, f"items: {exc}")
        return None
    concurrency = raw.get("max_concurrency", 10)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_MAP_CONCURRENCY:
        add(where, f"'max_concurrency' must be a whole number from 1 to {MAX_MAP_CONCURRENCY}, got {concurrency!r}")
        concurrency = 1
    tolerated = raw.get("tolerated_failures", 0)
    count, percent = 0, None
    if isinstance(tolerated, str) and (m := _PERCENT.fullmatch(tolerated)) is not None and float(m.group(1)) <= 100:
        percent = float(m.group(1))
    elif isinstance(tolerated, int) and not isinstance(tolerated, bool) and 0 <= tolerated <= MAX_COUNT:
        count = tolerated
    else:
        add(where, f"'tolerated_failures' must be a count (0 to {MAX_COUNT}) or a percentage such as '10%', "
                   f"got {tolerated!r}")
    return MapSpec(workflow=workflow, items=str(items), workflow_hash=str(pinned or ""),
                   max_concurrency=concurrency, tolerated_failures=count, tolerated_percent=percent)


def items_problems(steps: Sequence[Step], input_schema: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(step id, problem)`` for each map step whose ``items`` can never be a list: an
    unknown or later step, or a schema that says the value is something else."""
    index = {s.id: i for i, s in enumerate(steps)}
    out: list[tuple[str, str]] = []
    for i, step in enumerate(steps):
        if step.map is None:
            continue
        ref = parse_ref(step.map.items)
        problem = reference_problem(Reference(ref.root, ref.parts, ref.text), i, steps, index, input_schema)
        if problem is not None:
            out.append((step.id, f"items {ref.text}: {problem}"))
            continue
        schema = input_schema if ref.root == "input" else result_schema(steps[index[ref.parts[0]]])
        kind = _type_at(schema, ref.parts if ref.root == "input" else ref.parts[1:])
        if kind is not None and kind != "array":
            out.append((step.id, f"items {ref.text} is a {kind} by its schema, not a list; a map step needs a list"))
    return out


def _type_at(schema: object, path: Sequence[str]) -> str | None:
    """The ``type`` a schema plainly gives the value at ``path``; None when it does not say."""
    for segment in path:
        if not isinstance(schema, Mapping):
            return None
        if schema.get("type") == "object" and isinstance(schema.get("properties"), Mapping):
            schema = schema["properties"].get(segment)
        elif schema.get("type") == "array" and segment.isdigit():
            schema = schema.get("items")
        else:
            return None
    if isinstance(schema, Mapping) and isinstance(schema.get("type"), str):
        return str(schema["type"])
    return None


# --- child workflows read from files ------------------------------------------------------


def pin_children(wf: Workflow, path: Path, read: Callable[[Path], Workflow],
                 build: Callable[[Mapping[str, Any], str], Workflow], stack: tuple[Path, ...] = ()) -> Workflow:
    """``wf`` (read from ``path``) with each map step's child file read (by ``read``), its
    content hash pinned in the step (so the parent's own hash covers its children) and the
    children kept in ``wf.children`` (``build`` makes the pinned definition). A cycle of
    files that map each other, a missing file or a pinned hash the file no longer has is a
    DefinitionError."""
    here = path.resolve()
    chain = (*stack, here)
    if len(chain) > MAX_MAP_DEPTH + 1:
        raise DefinitionError([f"map steps nest deeper than {MAX_MAP_DEPTH} workflows"], str(path))
    problems: list[str] = []
    children: dict[str, Workflow] = {}
    raw_steps = [dict(s) for s in wf.raw.get("steps", [])]
    for i, step in enumerate(wf.steps):
        if step.kind is not StepKind.MAP or step.map is None or not is_file_ref(step.map.workflow):
            continue
        target = (here.parent / step.map.workflow).resolve()
        where = f"step {step.id!r}"
        if target in chain:
            names = " -> ".join(p.name for p in (*chain[chain.index(target):], target))
            problems.append(f"{where}: workflows map each other in a cycle: {names}")
            continue
        if not target.is_file():
            problems.append(f"{where}: workflow file {step.map.workflow!r} not found (looked for {target})")
            continue
        try:
            child = pin_children(read(target), target, read, build, chain)
        except DefinitionError as exc:
            problems.append(f"{where}: child workflow {step.map.workflow!r}: {'; '.join(exc.problems)}")
            continue
        if step.map.workflow_hash and step.map.workflow_hash != child.content_hash:
            problems.append(f"{where}: 'workflow_hash' pins {step.map.workflow_hash[:12]}, but "
                            f"{step.map.workflow!r} now has content hash {child.content_hash[:12]}")
            continue
        children[child.content_hash] = child
        children.update(child.children)
        raw_steps[i]["workflow_hash"] = child.content_hash
    if problems:
        raise DefinitionError(problems, str(path))
    if not children:
        return wf
    pinned = build({**wf.raw, "steps": raw_steps}, wf.source)
    return replace(pinned, children=children)


def map_steps(wf: Workflow) -> list[Step]:
    return [s for s in wf.steps if s.kind is StepKind.MAP and s.map is not None]


__all__ = ["is_file_ref", "items_problems", "map_steps", "parse_map", "pin_children"]
