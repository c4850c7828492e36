"""Seed 002's concurrent edit, on every backend: an effect that finds its record changed
since the proposal answers ``conflict`` (a command by its ``conflict_exit`` status, a callable
by raising ConflictError). A conflict is never retried as a transient error: the step's
``on_conflict`` route takes the task back for a new proposal and a new approval."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from people.support import People
from statewright._errors import DefinitionError
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker

PREPARE = """
import json, os
record = json.load(open("record.json"))
json.dump({"record": "R-1", "version": record["version"]}, open(os.environ["STATEWRIGHT_OUTPUT"], "w"))
"""
APPLY = """
import json, sys
record = json.load(open("record.json"))
if record["version"] != int(sys.argv[1]):
    sys.exit(9)
record.update(version=record["version"] + 1, writes=record.get("writes", 0) + 1)
json.dump(record, open("record.json", "w"))
"""
RETRY = {"max_attempts": 5, "initial_backoff": "1s", "jitter": False}


def _change(**apply: Any) -> Workflow:
    """prepare (reads the record's version) -> approve (shows it) -> apply (sends it)."""
    return workflow_from_dict({"workflow": "change", "steps": [
        {"id": "prepare", "kind": "code", "owner": "t", "run": {"command": [sys.executable, "-c", PREPARE]}},
        {"id": "approve", "kind": "human", "owner": "t", "approvers": {"role": "finance"},
         "proposal": ["results.prepare.record", "results.prepare.version"]},
        {"id": "apply", "kind": "code", "owner": "t", "retry": RETRY,
         "run": {"command": [sys.executable, "-c", APPLY, "{results.prepare.version}"], "conflict_exit": 9},
         **apply},
    ]}, "<change>")


class Change:
    def __init__(self, engine: Engine, tmp_path: Path, wf: Workflow) -> None:
        self.engine = engine
        self.ws = tmp_path / "ws"
        self.ws.mkdir()
        self.record = self.ws / "record.json"
        self.record.write_text(json.dumps({"version": 4}))
        self.tid = engine.submit(wf, {"workspace": str(self.ws)})
        self.approver = People(engine).add("fay", "finance")
        self.drain()

    def drain(self) -> None:
        Worker(self.engine).run(until_idle=True)

    @property
    def state(self) -> Any:
        return self.engine.state(self.tid)

    def approve(self) -> str:
        shown = str(self.state.current.proposal_hash)
        self.engine.approve(self.tid, self.approver, proposal_hash=shown)
        return shown

    def edit_record(self) -> None:
        """Someone else changes the record between the approval and the write."""
        self.record.write_text(json.dumps({"version": 5}))


def test_a_command_answering_conflict_goes_back_for_a_new_approval(engine: Engine, tmp_path: Path) -> None:
    case = Change(engine, tmp_path, _change(on_conflict={"loop_back": "prepare", "max_attempts": 3}))
    first = case.approve()
    case.edit_record()
    case.drain()
    st = case.state
    assert (st.status, st.current.step, st.current.attempt) == (TaskStatus.AWAITING_APPROVAL, "approve", 2)
    [conflict] = st.attempts_of("apply")
    assert (conflict.outcome.value, conflict.reason, conflict.retries) == ("failed", "conflict", 0)  # never retried
    assert st.loop_backs[-1].reason == "conflict"
    assert st.results["prepare"]["version"] == 5
    assert st.current.proposal_hash != first
    with pytest.raises(Exception, match="hash"):
        engine.approve(case.tid, case.approver, proposal_hash=first)  # the old approval covers nothing now
    case.approve()
    case.drain()
    done = case.state
    assert done.status is TaskStatus.COMPLETED, done.halt
    assert json.loads(case.record.read_text()) == {"version": 6, "writes": 1}
    assert verify_task(engine, case.tid) == []


def test_a_callable_raising_conflict_error_is_not_retried(engine: Engine, tmp_path: Path) -> None:
    wf = workflow_from_dict({"workflow": "raise", "steps": [
        {"id": "write", "kind": "code", "owner": "t", "retry": RETRY,
         "run": {"callable": "results.res_steps:conflicted"}},
    ]}, "<raise>")
    (tmp_path / "ws").mkdir()
    tid = engine.submit(wf, {"workspace": str(tmp_path / "ws")})
    Worker(engine).run(until_idle=True)
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED
    [attempt] = st.attempts
    assert (attempt.reason, attempt.retries) == ("conflict", 0)
    assert "version 5" in st.halt.detail


ANALYSE = {"id": "analyse", "kind": "code", "owner": "t", "run": {"command": ["true"]}}
APPROVE = {"id": "approve", "kind": "human", "owner": "t", "approvers": {"role": "finance"}}
REFRESH = {"id": "refresh", "kind": "code", "owner": "t", "run": {"command": ["true"]}}


@pytest.mark.parametrize(("step", "line"), [
    ({"id": "w", "kind": "code", "owner": "t", "run": {"command": ["true"]}, "on_conflict": "continue"},
     "step 'w': on_conflict: continue would act on a record that changed"),
    ({"id": "w", "kind": "code", "owner": "t", "run": {"command": ["true"]},
      "on_conflict": {"loop_back": "w", "max_attempts": 2}},
     "step 'w': on_conflict loop_back target 'w' is not an earlier step"),
    ({"id": "w", "kind": "code", "owner": "t", "run": {"callable": "m:f", "conflict_exit": 9}},
     "step 'w': run: run 'conflict_exit' applies to a 'command'"),
    ({"id": "w", "kind": "code", "owner": "t", "run": {"command": ["true"], "conflict_exit": 0}},
     "step 'w': run: run 'conflict_exit' must be an exit status from 1 to 255; got 0"),
    ({"id": "w", "kind": "ai", "owner": "t", "agent": {"type": "command", "command": ["true"]},
      "on_conflict": "halt"},
     "step 'w': unknown field 'on_conflict' for a ai step"),
    ({"id": "w", "kind": "code", "owner": "t", "run": {"command": ["true"]},
      "on_conflict": {"loop_back": "refresh", "max_attempts": 2}},
     "step 'w': on_conflict loop_back target 'refresh' comes after the approval 'approve', which would still "
     "hold for a record that changed; loop back to 'approve' or an earlier step"),
], ids=["continue", "not-earlier", "callable-exit", "exit-0", "ai-step", "after-the-approval"])
def test_a_conflict_route_that_cannot_hold_is_refused_at_load_time(step: dict[str, Any], line: str) -> None:
    """Among them a loop-back that would run the effect again under the approval it had."""
    with pytest.raises(DefinitionError) as caught:
        workflow_from_dict({"workflow": "bad", "steps": [ANALYSE, APPROVE, REFRESH, step]}, "bad.yaml")
    assert len(caught.value.problems) == 1, caught.value.problems
    assert caught.value.problems[0].startswith(line), caught.value.problems[0]


def test_a_conflict_may_loop_back_to_the_approval_itself() -> None:
    wf = workflow_from_dict({"workflow": "ok", "steps": [
        ANALYSE, APPROVE, {**REFRESH, "on_conflict": {"loop_back": "approve", "max_attempts": 2}}]}, "<ok>")
    assert wf.steps[2].on_conflict is not None
