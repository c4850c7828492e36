"""Every kind of bad definition is refused with one message naming the file, step and rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from statewright import DefinitionError, load_workflow, workflow_from_dict

AGENT = {"type": "command", "command": ["python", "fixer.py"]}


def base() -> dict[str, Any]:
    """A valid workflow; each case below breaks exactly one rule of it."""
    return {
        "workflow": "demo",
        "version": 1,
        "steps": [
            {"id": "implement", "kind": "ai", "owner": "dev", "agent": AGENT},
            {
                "id": "review", "kind": "ai", "owner": "reviewers", "agent": AGENT,
                "output_schema": "review",
                "on_failure": {"loop_back": "implement", "max_attempts": 3},
            },
            {
                "id": "approve", "kind": "human", "owner": "maintainers",
                "approvers": {"role": "maintainer"}, "separate_from": ["implement"],
                "expires_after": "1h",
            },
            {
                "id": "ci", "kind": "wait", "owner": "dev",
                "check": {"command": ["gh", "pr", "checks"]}, "every": "5m", "max_checks": 3,
            },
            {
                "id": "merge", "kind": "code", "owner": "dev",
                "run": {"command": ["git", "merge"]}, "retry": {"max_attempts": 2},
            },
        ],
    }


Edit = Callable[[dict[str, Any]], Any]


def step(data: dict[str, Any], sid: str) -> dict[str, Any]:
    return next(s for s in data["steps"] if s["id"] == sid)


def setter(sid: str, key: str, value: Any) -> Edit:
    return lambda d: step(d, sid).__setitem__(key, value)


def deleter(sid: str, key: str) -> Edit:
    return lambda d: step(d, sid).pop(key)


# (case id, edit, where the message points, the rule it states)
CASES: list[tuple[str, Edit, str, str]] = [
    ("unknown top-level field", lambda d: d.__setitem__("owner", "me"),
     "unknown field 'owner'",
     "allowed: concurrency, description, github, input_schema, notify, reject_codes, steps, tenant, version,"
     " workflow"),
    ("unknown step field", setter("review", "max_retries", 2),
     "step 'review'", "unknown field 'max_retries' for a ai step"),
    ("a field of another kind", setter("implement", "max_checks", 3),
     "step 'implement'", "unknown field 'max_checks' for a ai step (it belongs to wait steps)"),
    ("unknown route field",
     setter("review", "on_failure", {"loop_back": "implement", "max_attempts": 3, "delay": "5s"}),
     "step 'review' on_failure", "unknown field(s) ['delay'] in loop_back route"),
    ("unknown route name", setter("review", "on_failure", "retry"),
     "step 'review' on_failure", "unknown route 'retry'"),
    ("unknown retry field", setter("merge", "retry", {"max_attempts": 2, "backof": "1s"}),
     "step 'merge' retry", "unknown retry field(s) ['backof']"),
    ("missing owner", deleter("implement", "owner"),
     "step 'implement'", "'owner' is required on every step"),
    ("blank owner", setter("ci", "owner", "  "),
     "step 'ci'", "'owner' is required on every step"),
    ("duplicate step id", lambda d: d["steps"].append(copy.deepcopy(step(d, "merge"))),
     "step 'merge'", "duplicate step id; step ids must be unique"),
    ("unknown kind", setter("merge", "kind", "deploy"),
     "step 'merge'", "unknown kind 'deploy'; use one of ai, human, wait, code"),
    ("loop_back to itself", setter("review", "on_failure", {"loop_back": "review",
                                                           "max_attempts": 2}),
     "step 'review'", "loop_back target 'review' is the step itself"),
    ("loop_back forward", setter("review", "on_failure", {"loop_back": "merge",
                                                         "max_attempts": 2}),
     "step 'review'", "loop_back target 'merge' comes after it; loops may only go back"),
    ("loop_back to nowhere", setter("review", "on_failure", {"loop_back": "ghost",
                                                            "max_attempts": 2}),
     "step 'review'", "loop_back target 'ghost' does not exist"),
    ("loop_back without max_attempts", setter("review", "on_failure", {"loop_back": "implement"}),
     "step 'review' on_failure", "loop_back to 'implement' needs max_attempts"),
    ("loop_back with max_attempts 0",
     setter("review", "on_failure", {"loop_back": "implement", "max_attempts": 0}),
     "step 'review' on_failure", "max_attempts must be a whole number from 1 to 1000, got 0"),
    ("a success route that loops",
     setter("review", "on_success", {"loop_back": "implement", "max_attempts": 2}),
     "step 'review' on_success", "a success route cannot loop back"),
    ("halt as a success route", setter("review", "on_success", "halt"),
     "step 'review' on_success", "unknown route 'halt'; use continue | complete"),
    ("max_checks 0", setter("ci", "max_checks", 0),
     "step 'ci'", "max_checks must be a whole number from 1 to 100000, got 0"),
    ("max_checks negative", setter("ci", "max_checks", -2),
     "step 'ci'", "max_checks must be a whole number from 1 to 100000, got -2"),
    ("max_checks missing", deleter("ci", "max_checks"),
     "step 'ci'", "a wait step needs 'max_checks'"),
    ("separate_from a later step", setter("approve", "separate_from", ["merge"]),
     "step 'approve'", "separate_from names 'merge', which is not an earlier step"),
    ("separate_from itself", setter("approve", "separate_from", ["approve"]),
     "step 'approve'", "separate_from names 'approve', which is not an earlier step"),
    ("separate_from nowhere", setter("approve", "separate_from", ["ghost"]),
     "step 'approve'", "separate_from names 'ghost', which is not a step"),
    ("output schema not JSON Schema", setter("review", "output_schema", {"type": "objekt"}),
     "step 'review' output_schema", "not a valid JSON Schema"),
    ("output schema of the wrong type", setter("review", "output_schema", ["approved"]),
     "step 'review' output_schema", "must be a JSON Schema mapping, got list"),
    ("unknown built-in schema", setter("review", "output_schema", "reviw"),
     "step 'review' output_schema", "unknown built-in schema 'reviw'; built in: review"),
    ("on_failure continue on the last step", setter("merge", "on_failure", "continue"),
     "step 'merge'", "on_failure: continue on the last step"),
    ("on_failure continue on a human step", setter("approve", "on_failure", "continue"),
     "step 'approve'", "on_failure: continue on a human step"),
    ("outcomes without an output schema", setter("implement", "outcomes", {"ok": "pass"}),
     "step 'implement'", "'outcomes' needs an output_schema"),
    ("an outcome mapped to an unknown route",
     lambda d: step(d, "review").update(
         output_schema={"type": "object", "properties": {"outcome": {"type": "string"}}},
         outcomes={"ok": "pass", "meh": "skip"}),
     "step 'review'", "outcome 'meh' maps to 'skip'; use pass, fail or halt"),
    ("a bad duration", setter("ci", "every", "5 minutes"),
     "step 'ci' every", "expected a duration like 90s, 10m, 2h or 2d, got '5 minutes'"),
    ("approvers without a role", setter("approve", "approvers", ["alice"]),
     "step 'approve'", "approvers must be {role: ROLE"),
    ("a human step without approvers", deleter("approve", "approvers"),
     "step 'approve'", "a human step needs 'approvers'"),
    ("an ai step without an agent", deleter("implement", "agent"),
     "step 'implement'", "a ai step needs 'agent'"),
    ("a step id that is not a name", setter("ci", "id", "wait for ci"),
     "steps[3]", "'id' must be a name of 1-64 letters"),
    ("a step that is not a mapping", lambda d: d["steps"].append("deploy"),
     "steps[5]", "a step must be a mapping, got str"),
    ("empty step list", lambda d: d.__setitem__("steps", []),
     "'steps' is empty", "a workflow needs at least one step"),
    ("missing step list", lambda d: d.pop("steps"),
     "'steps' is missing", "a workflow needs at least one step"),
    ("steps not a list", lambda d: d.__setitem__("steps", {"implement": {}}),
     "'steps' must be a list", "got dict"),
    ("missing workflow name", lambda d: d.pop("workflow"),
     "'workflow'", "'workflow' must be a name of 1-64 letters"),
    ("version 0", lambda d: d.__setitem__("version", 0),
     "'version'", "must be a whole number from 1 to 2147483647, got 0"),
]


@pytest.mark.parametrize(("edit", "where", "rule"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_broken_rule_is_refused_naming_file_step_and_rule(
    tmp_path: Path, edit: Edit, where: str, rule: str
) -> None:
    data = base()
    edit(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(DefinitionError) as info:
        load_workflow(path)
    err = info.value
    assert len(err.problems) == 1, err.problems
    assert err.source == str(path)
    message = str(err)
    assert message.startswith(f"{path}: ")
    assert where in message
    assert rule in message


def test_the_base_definition_is_valid() -> None:
    assert [s.id for s in workflow_from_dict(base()).steps] == [
        "implement", "review", "approve", "ci", "merge"
    ]


def test_every_problem_is_reported_at_once() -> None:
    data = base()
    step(data, "implement").pop("owner")
    step(data, "ci")["max_checks"] = 0
    step(data, "review")["on_failure"] = {"loop_back": "merge", "max_attempts": 2}
    with pytest.raises(DefinitionError) as info:
        workflow_from_dict(data, "three.yaml")
    text = str(info.value)
    assert len(info.value.problems) == 3
    assert "three.yaml: step 'implement': 'owner' is required" in text
    assert "three.yaml: step 'ci': max_checks must be a whole number from 1 to 100000" in text
    assert "three.yaml: step 'review': loop_back target 'merge' comes after it" in text


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("- id: a\n  kind: ai\n", "a workflow must be a YAML mapping with 'workflow' and "
                                   "'steps', got list"),
        ("just words\n", "a workflow must be a YAML mapping with 'workflow' and 'steps', got str"),
        ("42\n", "got int"),
        ("", "got NoneType"),
        ("workflow: x\nsteps: [\n", "not valid YAML at line"),
        ("workflow: x\n  steps: - a\n", "not valid YAML at line 2"),
    ],
    ids=["a list", "a scalar", "a number", "an empty file", "unclosed bracket", "bad indent"],
)
def test_a_file_that_is_not_a_yaml_mapping_is_refused(
    tmp_path: Path, text: str, rule: str
) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DefinitionError) as info:
        load_workflow(path)
    assert str(info.value).startswith(f"{path}: ")
    assert rule in str(info.value)
    assert len(info.value.problems) == 1


def test_a_missing_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(DefinitionError, match=r"nope\.yaml: file not found"):
        load_workflow(path)


def test_definition_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'steps' is empty"):
        workflow_from_dict({"workflow": "x", "steps": []})
