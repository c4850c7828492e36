"""Map steps in definitions: what a map step takes, its child workflow read from a file next
to it and pinned by content hash, and the refusals (an unknown file, workflows that map each
other, items that cannot be a list, bad bounds), each one line naming the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from statewright import DefinitionError, load_workflow, workflow_from_dict

CHILD = {"workflow": "one", "steps": [{"id": "work", "kind": "code", "owner": "t", "run": {"command": ["true"]}}]}


def parent(**spec: Any) -> dict[str, Any]:
    step = {"id": "each", "kind": "map", "owner": "t", "workflow": "child.yaml", "items": "input.files", **spec}
    return {"workflow": "many", "steps": [step]}


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_map_step_reads_its_child_file_and_pins_its_hash(tmp_path: Path) -> None:
    child = load_workflow(write(tmp_path / "child.yaml", CHILD))
    wf = load_workflow(write(tmp_path / "parent.yaml", parent(max_concurrency=4, tolerated_failures="10%")))
    spec = wf.steps[0].map
    assert spec is not None
    assert (spec.workflow, spec.items, spec.max_concurrency) == ("child.yaml", "input.files", 4)
    assert spec.workflow_hash == child.content_hash
    assert (spec.tolerated(50), spec.tolerated(9)) == (5, 0)
    assert wf.children == {child.content_hash: child}


def test_the_parents_hash_changes_with_its_child(tmp_path: Path) -> None:
    """Editing the child file changes the parent's content hash: a task pins both."""
    write(tmp_path / "child.yaml", CHILD)
    before = load_workflow(write(tmp_path / "parent.yaml", parent())).content_hash
    write(tmp_path / "child.yaml", {**CHILD, "version": 2})
    assert load_workflow(tmp_path / "parent.yaml").content_hash != before


def refused(path: Path) -> str:
    with pytest.raises(DefinitionError) as err:
        load_workflow(path)
    text = str(err.value)
    assert "Traceback" not in text
    return text


def test_an_unknown_child_file_is_refused(tmp_path: Path) -> None:
    text = refused(write(tmp_path / "parent.yaml", parent(workflow="missing.yaml")))
    assert "step 'each': workflow file 'missing.yaml' not found" in text


def test_workflows_that_map_each_other_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {**parent(workflow="b.yaml"), "workflow": "a"})
    write(tmp_path / "b.yaml", {**parent(workflow="a.yaml"), "workflow": "b"})
    assert "workflows map each other in a cycle: a.yaml -> b.yaml -> a.yaml" in refused(tmp_path / "a.yaml")
    write(tmp_path / "self.yaml", {**parent(workflow="self.yaml"), "workflow": "self"})
    assert "cycle: self.yaml -> self.yaml" in refused(tmp_path / "self.yaml")


def test_a_pinned_hash_the_file_no_longer_has_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "child.yaml", CHILD)
    text = refused(write(tmp_path / "parent.yaml", parent(workflow_hash="0" * 64)))
    assert "'workflow_hash' pins 000000000000" in text


@pytest.mark.parametrize(("items", "schema", "expected"), [
    ("input.files", {"type": "object", "properties": {"files": {"type": "string"}}},
     "items input.files is a string by its schema, not a list"),
    ("results.nowhere.files", None, "'nowhere' is not a step of this workflow"),
    ("output.files", None, "must start with input. or results."),
])
def test_items_that_can_never_be_a_list_are_refused(items: str, schema: Any, expected: str) -> None:
    data = parent(items=items)
    if schema is not None:
        data["input_schema"] = schema
    with pytest.raises(DefinitionError, match="step 'each'") as err:
        workflow_from_dict(data)
    assert expected in str(err.value)


def test_items_from_an_earlier_steps_list_are_accepted() -> None:
    plan = {"id": "plan", "kind": "code", "owner": "t", "run": {"command": ["plan"]},
            "output_schema": {"type": "object", "properties": {"files": {"type": "array"}}}}
    data = parent(items="results.plan.files", workflow="one")
    data["steps"] = [plan, *data["steps"]]
    wf = workflow_from_dict(data)
    assert wf.steps[1].map is not None and wf.steps[1].map.workflow_hash == ""


@pytest.mark.parametrize(("spec", "expected"), [
    ({"max_concurrency": 0}, "'max_concurrency' must be a whole number from 1 to 1000"),
    ({"max_concurrency": True}, "'max_concurrency' must be a whole number"),
    ({"tolerated_failures": -1}, "'tolerated_failures' must be a count"),
    ({"tolerated_failures": "150%"}, "'tolerated_failures' must be a count"),
    ({"workflow": ""}, "'workflow' must name the child workflow"),
    ({"workflow": "no such name!"}, "is neither a file"),
    ({"workflow_hash": "abc"}, "'workflow_hash' must be a content hash"),
    ({"run": {"command": ["x"]}}, "unknown field 'run' for a map step"),
])
def test_bad_map_fields_are_refused_with_one_line(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(DefinitionError) as err:
        workflow_from_dict(parent(**{"workflow": "one", **spec}))
    assert expected in str(err.value)


def test_a_later_step_may_refer_to_a_map_steps_result() -> None:
    after = {"id": "sum", "kind": "code", "owner": "t", "run": {"command": ["sum", "{results.each.succeeded}"]}}
    data = parent(workflow="one")
    data["steps"].append(after)
    workflow_from_dict(data)
    after["run"] = {"command": ["sum", "{results.each.nope}"]}
    with pytest.raises(DefinitionError, match="a map step's result allows no field 'nope'"):
        workflow_from_dict(data)
