"""Map steps exported as Map states, run by moto's Step Functions interpreter against
statewright's reducer on the same scripted outcomes: each child workflow's steps (per item),
the parent's steps, and the end (passed; ``map_failures`` at the first failed child when none
is tolerated; passed with failures within the tolerated count or percentage; a missing or
non-list ``items``) are alike. moto runs a Distributed Map (the one Step Functions counts
tolerated failures in) without failing it past the threshold, so that end is checked on
the export's fields, not run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statewright._errors import InputError
from statewright.definition import load_workflow
from statewright.definition.model import Workflow
from statewright.export.asl import Queues, to_asl

from .sfn_harness import Script, StepFunctions, definition, run_reducer, run_sfn

CHILD = {"workflow": "one-item", "input_schema": {"type": "object", "properties": {
    "item": {"type": "string"}, "index": {"type": "integer"}}, "required": ["item"]},
    "steps": [{"id": "look", "kind": "code", "owner": "team", "run": {"command": ["true"]}},
              {"id": "judge", "kind": "ai", "owner": "team", "agent": {"type": "command", "command": ["true"]},
               "output_schema": "review", "on_failure": {"loop_back": "look", "max_attempts": 2}}]}


def parent(tmp_path: Path, timeouts: bool = False, **map_fields: Any) -> Workflow:
    extra = {"timeout": "1m"} if timeouts else {}
    child = {**CHILD, "steps": [{**s, **extra} for s in CHILD["steps"]]}  # type: ignore[dict-item]
    (tmp_path / "one-item.yaml").write_text(json.dumps(child))
    (tmp_path / "each.yaml").write_text(json.dumps({"workflow": "each", "steps": [
        {"id": "start", "kind": "code", "owner": "team", "run": {"command": ["true"]}, **extra},
        {"id": "each", "kind": "map", "owner": "team", "workflow": "one-item.yaml", "items": "input.files",
         **map_fields},
        {"id": "sum", "kind": "code", "owner": "team", "run": {"command": ["true"]}, **extra},
    ]}))
    return load_workflow(tmp_path / "each.yaml")


FILES = {"files": ["a.py", "b.py", "c.py", "d.py"]}
PASS: Script = {"start": ("pass",), "each": ("pass",), "sum": ("pass",)}


@pytest.mark.parametrize(("fields", "script", "task_input", "end"), [
    ({"max_concurrency": 3}, PASS, FILES, ("completed",)),
    ({"max_concurrency": 2, "tolerated_failures": 1}, {**PASS, "each#1:judge": ("reject",)}, FILES, ("completed",)),
    ({"max_concurrency": 1}, {**PASS, "each#1:look": ("fail",)}, FILES, ("halted", "map_failures", "each")),
    ({"max_concurrency": 1, "tolerated_failures": "50%"},
     {**PASS, "each#0:look": ("fail",), "each#3:look": ("fail",)}, FILES, ("completed",)),
    ({}, PASS, {"files": []}, ("completed",)),
    ({}, PASS, {}, ("halted", "missing_reference", "each")),
    ({}, PASS, {"files": "a.py"}, ("halted", "items_not_a_list", "each")),
], ids=["all-pass", "one-tolerated", "none-tolerated", "half-tolerated", "no-items", "no-list", "not-a-list"])
def test_a_map_step_runs_alike_on_step_functions(
    aws: StepFunctions, tmp_path: Path, fields: dict[str, Any], script: Script, task_input: dict[str, Any],
    end: tuple[str, ...],
) -> None:
    wf = parent(tmp_path, **fields)
    trace, got, _ = run_sfn(aws, wf, script, task_input)
    assert (trace, got) == run_reducer(wf, script, task_input)
    assert got == end
    if script is PASS and isinstance(task_input.get("files"), list) and task_input["files"]:
        assert ("each#3/judge", "ai", 1, 0) in trace


def test_the_map_state_carries_the_map_steps_settings(tmp_path: Path) -> None:
    wf = parent(tmp_path, max_concurrency=3, tolerated_failures="25%")
    state = to_asl(wf, Queues(default="https://q"))["States"]["each: run"]
    assert (state["Type"], state["ItemsPath"], state["MaxConcurrency"]) == ("Map", "$.input['files']", 3)
    assert state["ToleratedFailurePercentage"] == 25 and "ToleratedFailureCount" not in state
    assert state["ItemProcessor"]["States"]["look: run"]["Parameters"]["MessageBody"]["task.$"].startswith(
        "States.Format('{}/each/{}/{}', $$.Execution.Id")
    assert state["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    counted = to_asl(parent(tmp_path, tolerated_failures=2), Queues(default="https://q"))["States"]["each: run"]
    assert counted["ToleratedFailureCount"] == 2
    inline = to_asl(parent(tmp_path), Queues(default="https://q"))["States"]["each: run"]
    assert inline["ItemProcessor"]["ProcessorConfig"] == {"Mode": "INLINE"} and "ToleratedFailureCount" not in inline
    with pytest.raises(InputError, match=r"^step 'each': tolerated_failures need a Distributed Map"):
        to_asl(parent(tmp_path, timeouts=True, tolerated_failures=1), Queues(default="https://q"), express=True,
               functions=Queues(default="arn:aws:lambda:us-east-1:1:function:f"))
    assert definition(wf, "https://q")["States"]["each: run"]["Type"] == "Map"


def test_the_sfn_worker_runs_a_map_steps_children_and_records_each(
    aws: StepFunctions, tmp_path: Path, open_engine: Any,
) -> None:
    """The worker started with the parent's file knows its child workflow; each child is a
    task of its own in the store, named by the execution, the step, its attempt and index."""
    from statewright.integrations.aws_sfn import SfnWorker
    from statewright.integrations.sfn_record import Recorder, record_key
    from statewright.machine.state import TaskStatus
    from statewright.runtime.verify import verify_task

    from .test_sfn_worker import drive

    (tmp_path / "one.yaml").write_text(json.dumps({"workflow": "one", "steps": [
        {"id": "touch", "kind": "code", "owner": "team",
         "run": {"command": ["sh", "-c", "test -n \"$0\"", "{input.item}"]}}]}))
    (tmp_path / "all.yaml").write_text(json.dumps({"workflow": "all", "steps": [
        {"id": "each", "kind": "map", "owner": "team", "workflow": "one.yaml", "items": "input.files",
         "max_concurrency": 2}]}))
    wf = load_workflow(tmp_path / "all.yaml")
    engine = open_engine()
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=tmp_path / "ws", wait_seconds=0,
                       echo=lambda line: None, recorder=Recorder(engine))
    execution = aws.start(definition(wf, aws.tasks), {"files": ["a", "b", "c"]})
    end = drive(aws, wf, worker, execution, [])
    assert end["status"] == "SUCCEEDED", end
    assert len(json.loads(end["output"])["results"]["each"]["results"]) == 3
    for index in range(3):
        tid = engine.store.task_by_key(record_key(f"{execution}/each/1/{index}"))
        assert tid is not None
        assert engine.state(tid).status is TaskStatus.COMPLETED
        assert verify_task(engine, tid) == []
