"""The example workflows load, say what their source documents say, and run through the
pure reducer with their stand-in callables doing the work."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from statewright import TaskStatus, load_workflow
from statewright.definition import OutcomeRoute, RouteKind, StepKind, Workflow
from statewright.machine.commands import Command, RequestApproval, RunCheck, RunStep, StartTimer
from statewright.machine.events import (
    ApprovalGranted,
    AttemptReported,
    CheckReported,
    Event,
    TaskSubmitted,
    TimerFired,
)
from statewright.machine.state import TaskState, new_task
from statewright.machine.task import transition

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
YAML_FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_the_three_source_workflows_are_there() -> None:
    names = {p.name for p in YAML_FILES}
    assert {"fix-bug.yaml", "bug-triage.yaml", "supplier-bank-change.yaml"} <= names


@pytest.mark.parametrize("path", YAML_FILES, ids=[p.name for p in YAML_FILES])
def test_every_example_loads(path: Path) -> None:
    workflow = load_workflow(path)
    assert workflow.steps
    assert all(step.owner for step in workflow.steps)


@pytest.mark.parametrize("path", YAML_FILES, ids=[p.name for p in YAML_FILES])
def test_every_python_callable_an_example_names_resolves(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for step in load_workflow(path).steps:
        for spec in (step.agent, step.run, step.check):
            if spec and "callable" in spec:
                module, _, name = str(spec["callable"]).partition(":")
                assert callable(getattr(importlib.import_module(module), name)), spec


def test_fix_bug_has_loops_a_bound_approval_a_wait_and_a_merge() -> None:
    wf = load_workflow(EXAMPLES / "fix-bug.yaml")
    kinds = [s.kind for s in wf.steps]
    assert kinds == [StepKind.AI, StepKind.CODE, StepKind.AI, StepKind.HUMAN, StepKind.WAIT,
                     StepKind.CODE]
    implement, test, review, approve, _, _ = wf.steps
    assert implement.agent == {"type": "command",
                               "command": ["python", "examples/agents/fixer.py"]}
    assert review.agent == {"type": "command",
                            "command": ["python", "examples/agents/reviewer.py"]}
    assert review.output_schema is not None
    assert "approved" in review.output_schema["properties"]
    for step in (test, review):
        assert step.on_failure.kind is RouteKind.LOOP_BACK
        assert step.on_failure.target == "implement"
    assert approve.approvers_role
    assert approve.separate_from == ("implement",)
    assert approve.expires_after_seconds


def test_bug_triage_completes_early_on_its_happy_branch_only() -> None:
    wf = load_workflow(EXAMPLES / "bug-triage.yaml")
    decide, confirm, close = wf.steps
    assert (decide.kind, confirm.kind, close.kind) == (StepKind.AI, StepKind.HUMAN,
                                                       StepKind.CODE)
    assert decide.on_success.kind is RouteKind.COMPLETE
    assert decide.on_failure.kind is RouteKind.CONTINUE


def test_supplier_bank_change_has_the_seed_verdict_outcomes_and_bound_approval() -> None:
    wf = load_workflow(EXAMPLES / "supplier-bank-change.yaml")
    analyse = wf.step("analyse")
    assert analyse.output_schema is not None
    assert set(analyse.output_schema["properties"]) == {
        "outcome", "missingEvidence", "riskFlags", "evidenceRefs", "summary"
    }
    assert analyse.output_schema["additionalProperties"] is False
    assert analyse.outcomes == {"sufficient": OutcomeRoute.PASS,
                                "needs_clarification": OutcomeRoute.FAIL,
                                "suspected_fraud": OutcomeRoute.HALT}
    loop = wf.step("confirm-evidence").on_failure
    assert (loop.kind, loop.target) == (RouteKind.LOOP_BACK, "analyse")
    approve = wf.step("approve")
    assert (approve.approvers_role, approve.separate_from) == ("finance-approver", ("intake",))
    assert wf.step("execute").kind is StepKind.CODE


# --- the examples, run: the reducer decides, the stand-in callables do the work ---------


class MiniWorker:
    """Performs each command with the example's callables and reports back, in one process.

    People are scripted: ``people`` maps a human step to the (actor, roles) who approves."""

    def __init__(self, workflow: Workflow, workspace: Path,
                 people: dict[str, tuple[str, tuple[str, ...]]]) -> None:
        self.state: TaskState = new_task("t1", workflow)
        self.workspace = workspace
        self.people = people
        self.now_ms = 1_000_000
        self.serial = 0

    def event(self, cls: type[Event], **fields: Any) -> Event:
        self.serial += 1
        self.now_ms += 1000
        return cls(event_id=f"e{self.serial}", at_ms=self.now_ms, **fields)

    def run(self, payload: dict[str, Any], on_wait: Any = None, limit: int = 60) -> TaskState:
        queue: list[Command] = []
        self.state, queue = transition(self.state, self.event(TaskSubmitted, input=payload))
        for _ in range(limit):
            if not queue:
                return self.state
            command = queue.pop(0)
            event = self.perform(command, on_wait)
            if event is None:
                continue
            self.state, more = transition(self.state, event)
            queue.extend(more)
        raise AssertionError("the example did not settle")

    def perform(self, command: Command, on_wait: Any) -> Event | None:
        step = self.state.workflow.step(command.step)
        ctx = SimpleNamespace(task_id="t1", step=step.id, attempt=command.attempt,
                              idempotency_key=command.command_id, workspace=self.workspace,
                              timeout_seconds=30.0)
        if isinstance(command, RunStep):
            spec = step.agent if step.kind is StepKind.AI else step.run
            assert spec is not None
            module, _, name = str(spec["callable"]).partition(":")
            fn = getattr(importlib.import_module(module), name)
            if step.kind is StepKind.AI:
                out = fn(dict(command.brief), ctx)
                return self.event(AttemptReported, command_id=command.command_id,
                                  step=step.id, attempt=command.attempt, actor="agent:model",
                                  verdict=out["verdict"], artifacts=out.get("artifacts", {}),
                                  note=out.get("note", ""))
            out = fn(ctx)
            return self.event(AttemptReported, command_id=command.command_id, step=step.id,
                              attempt=command.attempt, actor=f"code:{step.id}", ok=out["ok"],
                              error=None if out["ok"] else "failed",
                              output=out.get("output", ""))
        if isinstance(command, RunCheck):
            assert step.check is not None
            module, _, name = str(step.check["callable"]).partition(":")
            out = getattr(importlib.import_module(module), name)(ctx)
            if not out["passed"] and on_wait is not None:
                on_wait(self.workspace)
            return self.event(CheckReported, command_id=command.command_id, step=step.id,
                              attempt=command.attempt, check_number=command.check_number,
                              passed=out["passed"], detail=out.get("detail", ""))
        if isinstance(command, RequestApproval):
            actor, roles = self.people[step.id]
            return self.event(ApprovalGranted, step=step.id, actor=actor, roles=roles,
                              proposal_hash=command.proposal_hash)
        if isinstance(command, StartTimer) and command.purpose == "wait_check":
            self.now_ms = max(self.now_ms, command.due_at_ms)
            return self.event(TimerFired, timer_id=command.timer_id)
        return None  # an approval-expiry timer that never fires: the person was on time


@pytest.fixture
def examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.mark.usefixtures("examples_importable")
def test_bug_triage_run_that_reproduces_ends_early(tmp_path: Path) -> None:
    worker = MiniWorker(load_workflow(EXAMPLES / "bug-triage.yaml"), tmp_path, {})
    failing = [sys.executable, "-c", "raise SystemExit('boom: add(-1, 1) == 2')"]
    state = worker.run({"repo": "acme/calc", "issue": 7, "title": "add is wrong",
                        "reproduce": failing})
    assert state.status is TaskStatus.COMPLETED_EARLY
    assert [(a.step, a.outcome.value) for a in state.attempts] == [("reproduce", "passed")]
    assert (tmp_path / "triage-7.md").exists()


@pytest.mark.usefixtures("examples_importable")
def test_bug_triage_run_that_does_not_reproduce_is_confirmed_and_closed(tmp_path: Path) -> None:
    worker = MiniWorker(load_workflow(EXAMPLES / "bug-triage.yaml"), tmp_path,
                        {"confirm-close": ("tariq", ("triager",))})
    state = worker.run({"repo": "acme/calc", "issue": 8, "title": "works for me",
                        "reproduce": [sys.executable, "-c", "pass"]})
    assert state.status is TaskStatus.COMPLETED
    assert [(a.step, a.outcome.value) for a in state.attempts] == [
        ("reproduce", "failed"), ("confirm-close", "passed"), ("close", "passed")
    ]
    assert (tmp_path / "closed.json").exists()
