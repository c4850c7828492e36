"""The sfn worker records each execution in statewright's store as a task (on every store
backend, the execution on moto's Step Functions interpreter): its attempts, checks and a
person's decision are audited events the reducer replays, so ``statewright show`` and
``verify`` read them like any task's; what the record cannot follow ends it there, and the
execution runs on as before."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statewright.cli import cli
from statewright.integrations.aws_sfn import SfnWorker
from statewright.integrations.sfn_record import Recorder
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task

from .sfn_harness import StepFunctions, definition
from .test_sfn_worker import drive, steps, workflow

__all__ = ["steps"]  # the fixture, used here


@pytest.fixture
def engine(open_engine: Any) -> Engine:
    engine: Engine = open_engine()
    root = engine.users.authenticate(engine.users.bootstrap("root").token)
    engine.users.add(root, "erin", ["editor"])
    engine.users.add(root, "walt", ["writer"])
    return engine


def _run(aws: StepFunctions, engine: Engine, steps: Path, last: str, answer: Any) -> tuple[str, dict[str, Any]]:
    wf = workflow(last=last)
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws", wait_seconds=0,
                       echo=lines.append, recorder=Recorder(engine, echo=lines.append))
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})
    end = drive(aws, wf, worker, execution, lines, answer)
    recorded = [json.loads(line) for line in lines if json.loads(line).get("kind") == "recorded"]
    assert [r["task"] for r in recorded] == [execution]
    return str(recorded[0]["task_id"]), end


def _answer(actor: str, approved: bool = True) -> Any:
    def answer(message: dict[str, Any]) -> None:
        out: dict[str, Any] = {"approved": approved, "actor": actor}
        if not approved:
            out["reason_code"] = "policy_denial"
        StepFunctions().sfn.send_task_success(taskToken=message["task_token"], output=json.dumps(out))
    return answer


def test_a_completed_execution_is_a_completed_task_that_verifies(
    aws: StepFunctions, engine: Engine, steps: Path, store_url: str,
) -> None:
    """The draft's repair turn, the check, erin's approval and the publish are the task's
    history; its state is Step Functions' outcome; show and verify read it."""
    tid, end = _run(aws, engine, steps, "publish", _answer("erin"))
    assert end["status"] == "SUCCEEDED"
    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert [(a.step, a.number, a.outcome.value) for a in st.attempts] == [
        ("draft", 1, "passed"), ("ready", 1, "passed"), ("approve", 1, "passed"), ("publish", 1, "passed")]
    assert st.results["publish"] == {"url": "https://example.test/sfn"}
    assert st.approvals[-1].actor == "erin"
    types = [e.type for e in engine.events(tid)]
    assert types == ["TaskSubmitted", "AttemptReported", "AttemptReported", "CheckReported", "ApprovalGranted",
                     "AttemptReported"]  # the draft's bad verdict and its repair turn
    assert engine.store.outbox(tid) == []  # Step Functions runs it: nothing for a statewright worker
    assert verify_task(engine, tid) == []
    shown = CliRunner().invoke(cli, ["show", tid, "--db", store_url])
    assert shown.exit_code == 0, shown.output
    assert "completed" in shown.output and "erin" in shown.output
    verified = CliRunner().invoke(cli, ["verify", "--db", store_url])
    assert verified.exit_code == 0, verified.output


@pytest.mark.parametrize("backend", ["memory"])  # the routes are the recorder's; the store is the same
def test_a_rejection_halts_the_record_as_it_halts_the_execution(
    aws: StepFunctions, engine: Engine, steps: Path,
) -> None:
    tid, end = _run(aws, engine, steps, "publish", _answer("erin", approved=False))
    assert (end["status"], end.get("error")) == ("FAILED", "policy_denial")
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None
    assert (st.halt.step, st.halt.reason) == ("approve", "policy_denial")
    assert verify_task(engine, tid) == []


@pytest.mark.parametrize("backend", ["memory"])  # the routes are the recorder's; the store is the same
def test_a_failed_step_is_its_failed_attempt_with_the_reason(aws: StepFunctions, engine: Engine,
                                                             steps: Path) -> None:
    tid, end = _run(aws, engine, steps, "refuse", _answer("erin"))
    assert (end["status"], end.get("error")) == ("FAILED", "failed")
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None and st.halt.step == "refuse"
    assert st.attempts[-1].reason == "failed" and "the target said no" in st.attempts[-1].output
    assert verify_task(engine, tid) == []


@pytest.mark.parametrize("backend", ["memory"])  # the routes are the recorder's; the store is the same
def test_retries_spent_on_step_functions_are_recorded_from_the_dead_letter(
    aws: StepFunctions, engine: Engine, steps: Path,
) -> None:
    """A transient error is the state's Retry's, not an attempt; when the retries are spent
    the execution halts, and its dead letter's reason is the attempt's."""
    tid, end = _run(aws, engine, steps, "throttled", _answer("erin"))
    assert (end["status"], end.get("error")) == ("FAILED", "retries_exhausted")
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None
    assert (st.halt.step, st.halt.reason) == ("throttled", "retries_exhausted")
    assert verify_task(engine, tid) == []


def test_a_decision_the_stores_rules_refuse_ends_the_record_not_the_execution(
    aws: StepFunctions, engine: Engine, steps: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """walt lacks the editor role: Step Functions takes his approval (IAM decides there),
    the record does not; it stops at the approval, says so once, and verifies."""
    with caplog.at_level(logging.WARNING, logger="statewright.sfn"):
        tid, end = _run(aws, engine, steps, "publish", _answer("walt"))
    assert end["status"] == "SUCCEEDED"
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL
    stops = [r.getMessage() for r in caplog.records if "record" in r.getMessage() and "stops here" in r.getMessage()]
    assert len(stops) == 1 and "walt" in stops[0] and "editor" in stops[0]
    assert verify_task(engine, tid) == []


@pytest.mark.parametrize("backend", ["memory"])  # the routes are the recorder's; the store is the same
def test_an_approval_that_ends_the_execution_is_recorded_from_its_end_message(
    aws: StepFunctions, engine: Engine, steps: Path,
) -> None:
    """Nothing runs after a last human step: the execution sends an ``ended`` message with
    the decision, and the record completes with the approval."""
    from statewright.definition import workflow_from_dict

    wf = workflow_from_dict({"workflow": "sign-off", "steps": [
        {"id": "publish", "kind": "code", "owner": "writers", "run": {"callable": "sfn_steps:publish"}},
        {"id": "approve", "kind": "human", "owner": "editors", "approvers": {"role": "editor"},
         "proposal": ["results.publish.url"]},
    ]})
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws", wait_seconds=0,
                       echo=lines.append, recorder=Recorder(engine))
    execution = aws.start(definition(wf, aws.tasks), {"topic": "last"})
    end = drive(aws, wf, worker, execution, lines, _answer("erin"))
    assert end["status"] == "SUCCEEDED"
    tid = Recorder(engine).task_of(execution)
    assert tid is not None
    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED and st.approvals[-1].actor == "erin"
    assert verify_task(engine, tid) == []


@pytest.mark.parametrize("backend", ["sqlite"])  # the command opens the database by its URL
def test_the_sfn_worker_command_records_in_its_db(aws: StepFunctions, steps: Path, store_url: str,
                                                  tmp_path: Path, open_engine: Any) -> None:
    """``statewright sfn worker --db URL --once`` answers the first message and records it;
    the task it prints is in that store."""
    wf_file = tmp_path / "post.yaml"
    wf_file.write_text(json.dumps(workflow().raw))
    execution = aws.start(definition(workflow(), aws.tasks), {"topic": "cli"})
    result = CliRunner().invoke(cli, ["sfn", "worker", "--queue", aws.tasks, "--workflow", str(wf_file), "--once",
                                      "--region", "us-east-1", "--db", store_url,
                                      "--workspace-root", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    recorded = [json.loads(line) for line in result.output.splitlines() if line.startswith('{"kind": "recorded"')]
    assert [r["task"] for r in recorded] == [execution]
    engine = open_engine()
    st = engine.state(recorded[0]["task_id"])
    assert [a.step for a in st.attempts] == ["draft"] and st.current is not None and st.current.step == "ready"
    no_record = CliRunner().invoke(cli, ["sfn", "worker", "--queue", aws.tasks, "--workflow", str(wf_file),
                                         "--once", "--region", "us-east-1", "--no-record",
                                         "--workspace-root", str(tmp_path / "ws")])
    assert no_record.exit_code == 0 and "recorded" not in no_record.output
    aws.sfn.stop_execution(executionArn=execution)  # nothing of it may reach a later test's queue
