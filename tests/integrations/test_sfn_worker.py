"""The sfn worker against moto's Step Functions interpreter: it takes the exported state
machine's task tokens from SQS, runs the steps with statewright's executors (a repair turn
for a bad verdict, a failure answered with its reason code, a transient error answered as
``transient`` until the state's retries run out) and a person answers the human step with
``statewright sfn answer``.

moto 5's interpreter keeps a retried waitForTaskToken task's token and the outcome of the
try before, so a retried try fails again at once whatever its answer (AWS gives each try a
new token). A retry that then succeeds cannot be run there; test_asl_export.py checks the
Retry clauses a step's policy becomes, and here the retries are run until they are spent."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statewright.cli import cli
from statewright.definition import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.integrations.aws_sfn import SfnWorker, present_results, state_at

from .sfn_harness import StepFunctions, definition

STEPS = '''
import json
from pathlib import Path
from statewright import TransientError


def _count(ctx, name):
    mark = Path(ctx.workspace) / name
    n = int(mark.read_text()) + 1 if mark.exists() else 1
    mark.write_text(str(n))
    return n


def draft(brief, ctx):
    if _count(ctx, "draft") == 1:
        return {"verdict": {"approved": "yes"}}  # not the schema's: one repair turn follows
    return {"verdict": {"approved": True, "summary": "drafted " + brief["input"]["topic"]}}


def publish(ctx):
    _count(ctx, "publish")
    return {"ok": True, "output": {"url": "https://example.test/" + ctx.input["topic"]}}


def throttled(ctx):
    _count(ctx, "throttled")
    raise TransientError("the API throttled us")


def refuse(ctx):
    return {"ok": False, "output": "the target said no"}


def leak(ctx):
    return {"ok": False, "output": "token is " + ctx.env["API_TOKEN"]}


def huge(ctx):
    return {"ok": True, "output": {"blob": "x" * 300_000}}


def slow(ctx):
    import time
    time.sleep(0.4)
    return {"ok": True, "output": {"done": True}}


def analyse_once(ctx):
    if _count(ctx, "analyse") == 1:
        return {"ok": True, "output": {"run": 1}}
    return {"ok": False, "output": "the second look failed"}


def gate_once(ctx):
    return _count(ctx, "gate") > 1


def free_verdict(brief, ctx):
    return {"verdict": {"found": brief["input"]["topic"]}}
'''


def workflow(last: str = "publish") -> Workflow:
    return workflow_from_dict({"workflow": "post", "steps": [
        {"id": "draft", "kind": "ai", "owner": "writers", "agent": {"type": "python", "callable": "sfn_steps:draft"},
         "output_schema": {"type": "object", "properties": {"approved": {"type": "boolean"},
                                                            "summary": {"type": "string"}},
                           "required": ["approved", "summary"]}},
        {"id": "ready", "kind": "wait", "owner": "writers", "check": {"command": ["true"]}, "every": "1m",
         "max_checks": 2},
        {"id": "approve", "kind": "human", "owner": "editors", "approvers": {"role": "editor"},
         "proposal": ["results.draft.summary"]},
        {"id": last, "kind": "code", "owner": "writers", "run": {"callable": f"sfn_steps:{last}"},
         "retry": {"max_attempts": 2, "initial_backoff": "1s", "max_backoff": "1s", "jitter": False}},
    ]})


@pytest.fixture
def steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "sfn_steps.py").write_text(STEPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def drive(aws: StepFunctions, wf: Workflow, worker: SfnWorker, execution: str, lines: list[str],
          answer: Any = None) -> dict[str, Any]:
    """Let the worker take messages until the execution ends; a person answers the human step."""
    deadline = time.monotonic() + 30
    while True:
        # The status is read before the poll: whatever an ended execution sent (a dead
        # letter just before its Fail state) is already in the queue when the poll looks.
        running = aws.status(execution)["status"] == "RUNNING"
        took = worker.poll()
        if not took and not running:
            break
        if not took:
            time.sleep(0.02)  # a busy poll starves moto's execution threads of the interpreter
        if time.monotonic() > deadline:
            events = aws.sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
            raise AssertionError(f"{execution} did not end: {[json.dumps(e, default=str)[:300] for e in events[-3:]]}")
        for line in list(lines):
            asked = json.loads(line)
            if asked.get("kind") == "human" and answer is not None:
                lines.remove(line)
                answer(asked)
    return aws.status(execution)


def test_the_worker_runs_an_exported_workflow_to_completion(aws: StepFunctions, steps: Path) -> None:
    """A repair turn, a check, a person's approval through the CLI: the execution succeeds
    with the steps' verdict, check and result in its state."""
    wf = workflow()
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws",
                       wait_seconds=0, echo=lines.append)
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})
    asked: list[dict[str, Any]] = []

    def approve(message: dict[str, Any]) -> None:
        asked.append(message)
        result = CliRunner().invoke(cli, ["sfn", "answer", "--token", message["task_token"], "--actor", "erin",
                                          "--approve", "--region", "us-east-1"])
        assert result.exit_code == 0, result.output

    end = drive(aws, wf, worker, execution, lines, approve)
    assert end["status"] == "SUCCEEDED", end
    out = json.loads(end["output"])
    assert out["outcome"] == "completed"
    assert out["results"]["draft"] == {"approved": True, "summary": "drafted sfn"}
    assert out["results"]["publish"] == {"url": "https://example.test/sfn"}
    assert out["results"]["ready"]["passed"] is True
    [message] = asked
    assert (message["step"], message["role"]) == ("approve", "editor")
    assert message["proposal"]["fields"] == {"results.draft.summary": "drafted sfn"}
    assert len(message["proposal_hash"]) == 64
    assert (steps / "ws").exists()
    publish_dir = next((steps / "ws").iterdir())
    assert (publish_dir / "publish").read_text() == "1"
    assert (publish_dir / "draft").read_text() == "2"  # the turn and its repair


ARGV = "import json, os, sys; json.dump({'argv': sys.argv[1:]}, open(os.environ['STATEWRIGHT_OUTPUT'], 'w'))"


def test_a_result_the_latest_attempt_did_not_record_is_not_referenced(aws: StepFunctions, steps: Path) -> None:
    """``analyse`` records ``{"run": 1}``, a gate sends the task back, and its second attempt
    fails (advisory) with no result: the next step's reference to it finds nothing on Step
    Functions too, and the task halts there with ``missing_reference``."""
    wf = workflow_from_dict({"workflow": "again", "steps": [
        {"id": "analyse", "kind": "code", "owner": "team", "run": {"callable": "sfn_steps:analyse_once"},
         "on_failure": "continue"},
        {"id": "gate", "kind": "code", "owner": "team", "run": {"callable": "sfn_steps:gate_once"},
         "on_failure": {"loop_back": "analyse", "max_attempts": 2}},
        {"id": "use", "kind": "code", "owner": "team",
         "run": {"command": [sys.executable, "-c", ARGV, "{results.analyse.run}"]}},
    ]})
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws",
                       wait_seconds=0, echo=lines.append)
    execution = aws.start(definition(wf, aws.tasks), {})
    end = drive(aws, wf, worker, execution, lines)
    assert (end["status"], end.get("error")) == ("FAILED", "missing_reference")
    assert "analyse: no result" in aws.entered(execution)
    [dead] = [json.loads(line) for line in lines if json.loads(line).get("kind") == "halted"]
    assert dead["step"] == "use"


def test_an_ai_steps_verdict_without_a_schema_is_its_result_on_step_functions(
        aws: StepFunctions, steps: Path) -> None:
    """A verdict given on an ai step without an output_schema is kept in the execution's
    results, and a later step's reference reads it."""
    wf = workflow_from_dict({"workflow": "free", "steps": [
        {"id": "judge", "kind": "ai", "owner": "team",
         "agent": {"type": "python", "callable": "sfn_steps:free_verdict"}},
        {"id": "use", "kind": "code", "owner": "team",
         "run": {"command": [sys.executable, "-c", ARGV, "{results.judge.found}"]}},
    ]})
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws",
                       wait_seconds=0, echo=lambda line: None)
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})
    end = drive(aws, wf, worker, execution, [])
    assert end["status"] == "SUCCEEDED", end
    results = json.loads(end["output"])["results"]
    assert results == {"judge": {"found": "sfn"}, "use": {"argv": ["sfn"]}}


def test_a_failed_step_halts_with_its_reason_and_a_dead_letter(aws: StepFunctions, steps: Path) -> None:
    """A code step that fails is answered with its reason code; the task halts, the dead
    letter names the step and reason, and the worker prints it."""
    wf = workflow(last="refuse")
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws",
                       wait_seconds=0, echo=lines.append)
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})

    def approve(message: dict[str, Any]) -> None:
        aws.sfn.send_task_success(taskToken=message["task_token"],
                                  output=json.dumps({"approved": True, "actor": "erin"}))

    end = drive(aws, wf, worker, execution, lines, approve)
    assert (end["status"], end.get("error")) == ("FAILED", "failed")
    dead = [json.loads(line) for line in lines if json.loads(line).get("kind") == "halted"]
    assert [(d["step"], d["reason"]) for d in dead] == [("refuse", "failed")]


def test_a_step_whose_retries_run_out_halts_as_retries_exhausted(aws: StepFunctions, steps: Path) -> None:
    """A step that keeps raising TransientError is answered ``transient``; when the state's
    Retry has run its course the task halts with ``retries_exhausted``."""
    wf = workflow(last="throttled")
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws",
                       wait_seconds=0, echo=lines.append)
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})

    def approve(message: dict[str, Any]) -> None:
        aws.sfn.send_task_success(taskToken=message["task_token"],
                                  output=json.dumps({"approved": True, "actor": "erin"}))

    end = drive(aws, wf, worker, execution, lines, approve)
    assert (end["status"], end.get("error")) == ("FAILED", "retries_exhausted")
    assert "throttled: retries spent" in aws.entered(execution)
    [dead] = [json.loads(line) for line in lines if json.loads(line).get("kind") == "halted"]
    assert (dead["step"], dead["reason"]) == ("throttled", "retries_exhausted")
    # moto records a SendTaskFailure's error but not its cause, so the detail cannot be checked here


def test_a_rejection_without_a_reason_code_fails_the_step_as_not_approved(aws: StepFunctions,
                                                                           steps: Path) -> None:
    """``{"approved": false, "actor": NAME}`` with no reason code fails the human step as
    ``not_approved`` (statewright's own answer always carries a code)."""
    wf = workflow()
    lines: list[str] = []
    worker = SfnWorker([wf], aws.tasks, sqs=aws.sqs, sfn=aws.sfn, workspace_root=steps / "ws",
                       wait_seconds=0, echo=lines.append)
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})

    def reject(message: dict[str, Any]) -> None:
        aws.sfn.send_task_success(taskToken=message["task_token"],
                                  output=json.dumps({"approved": False, "actor": "erin"}))

    end = drive(aws, wf, worker, execution, lines, reject)
    assert (end["status"], end.get("error")) == ("FAILED", "not_approved")
    assert "approve: not approved" in aws.entered(execution)


def test_a_message_for_a_workflow_the_worker_does_not_know_fails_its_step(aws: StepFunctions,
                                                                           steps: Path) -> None:
    """A worker started without the workflow's file answers ``unknown_workflow``: the task
    halts instead of waiting for ever."""
    wf = workflow()
    worker = SfnWorker([workflow(last="refuse")], aws.tasks, sqs=aws.sqs, sfn=aws.sfn,
                       workspace_root=steps / "ws", wait_seconds=0, echo=lambda line: None)
    execution = aws.start(definition(wf, aws.tasks), {"topic": "sfn"})
    end = drive(aws, wf, worker, execution, [])
    assert (end["status"], end.get("error")) == ("FAILED", "unknown_workflow")


def test_answer_refuses_an_agent_and_a_rejection_without_a_code() -> None:
    """``sfn answer`` takes a person's name and exactly one of --approve / --reject CODE."""
    runner = CliRunner()
    bad = runner.invoke(cli, ["sfn", "answer", "--token", "t", "--actor", "agent:bot", "--approve"])
    assert bad.exit_code == 1 and "never a person" in bad.output
    neither = runner.invoke(cli, ["sfn", "answer", "--token", "t", "--actor", "erin"])
    assert neither.exit_code == 1 and "--approve or --reject" in neither.output


class Recorder:
    """Stands in for the SQS and Step Functions clients: what the worker sent, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda **kwargs: self.calls.append((name, kwargs))


def test_a_running_step_heartbeats_and_a_message_that_is_not_a_task_is_dropped(steps: Path) -> None:
    """While a step runs its token gets heartbeats, then one answer; a body that is not a
    JSON object is deleted without an answer and the worker goes on."""
    wf = workflow(last="slow")
    sqs, sfn = Recorder(), Recorder()
    worker = SfnWorker([wf], "q", sqs=sqs, sfn=sfn, workspace_root=steps / "ws", heartbeat_seconds=0.15,
                       echo=lambda line: None)
    body = {"task_token": "tok", "task": "arn:aws:states:::execution:m:t1", "workflow_hash": wf.content_hash,
            "step": "slow", "kind": "code", "attempt": 1, "input": {"topic": "x"}, "results": {}}
    worker.handle({"Body": json.dumps(body), "ReceiptHandle": "r1"})
    worker.handle({"Body": "not json", "ReceiptHandle": "r2"})
    names = [name for name, _ in sfn.calls]
    assert names.count("send_task_heartbeat") >= 2
    assert names[-1] == "send_task_success" and json.loads(sfn.calls[-1][1]["output"]) == {"result": {"done": True}}
    assert [kwargs["ReceiptHandle"] for name, kwargs in sqs.calls if name == "delete_message"] == ["r1", "r2"]
    assert worker.handled == 1


@pytest.mark.parametrize(("name", "fields", "error"), [
    ("leak", {"secrets": ["API_TOKEN"]}, "failed"),
    ("huge", {"result_limit": "64KiB"}, "output_too_large"),
])
def test_what_leaves_for_step_functions_is_screened_and_redacted(
        steps: Path, monkeypatch: pytest.MonkeyPatch, name: str, fields: dict[str, Any], error: str) -> None:
    """A step's secret never reaches Step Functions, and a result past the step's limit is a
    failure (``output_too_large``), as in a report to the store."""
    monkeypatch.setenv("API_TOKEN", "s3cr3t-t0ken-value")
    wf = workflow_from_dict({"workflow": "w", "steps": [
        {"id": name, "kind": "code", "owner": "team", "run": {"callable": f"sfn_steps:{name}"}, **fields}]})
    sqs, sfn = Recorder(), Recorder()
    worker = SfnWorker([wf], "q", sqs=sqs, sfn=sfn, workspace_root=steps / "ws", echo=lambda line: None)
    body = {"task_token": "tok", "task": "t1", "workflow_hash": wf.content_hash, "step": name, "kind": "code",
            "attempt": 1, "input": {}, "results": {}}
    worker.handle({"Body": json.dumps(body), "ReceiptHandle": "r"})
    [(_, kwargs)] = [c for c in sfn.calls if c[0] != "send_task_heartbeat"]
    sent = json.dumps(kwargs)
    assert "s3cr3t-t0ken-value" not in sent
    reason = kwargs.get("error") or json.loads(kwargs["output"])["failure"]["reason"]
    assert reason == error, sent[:300]


def test_a_null_result_in_a_message_is_no_result(steps: Path) -> None:
    """The state machine clears a result to null: the worker reads it as none (a reference to
    it fails with ``missing_reference``), in a map step's children's results too."""
    wf = workflow_from_dict({"workflow": "w", "steps": [
        {"id": "analyse", "kind": "code", "owner": "team", "run": {"callable": "sfn_steps:publish"}},
        {"id": "use", "kind": "code", "owner": "team",
         "run": {"command": [sys.executable, "-c", ARGV, "{results.analyse.run}"]}}]})
    sqs, sfn = Recorder(), Recorder()
    worker = SfnWorker([wf], "q", sqs=sqs, sfn=sfn, workspace_root=steps / "ws", echo=lambda line: None)
    body = {"task_token": "tok", "task": "t1", "workflow_hash": wf.content_hash, "step": "use", "kind": "code",
            "attempt": 1, "input": {}, "results": {"analyse": None}}
    worker.handle({"Body": json.dumps(body), "ReceiptHandle": "r"})
    [(_, kwargs)] = [c for c in sfn.calls if c[0] != "send_task_heartbeat"]
    assert kwargs["error"] == "missing_reference"
    assert state_at(wf, body).results == {}
    child = {"look": None, "judge": {"ok": True}}
    mapped = {"id": "each", "kind": "map", "owner": "team", "workflow": "one.yaml", "items": "input.files"}
    (steps / "one.yaml").write_text("workflow: one\nsteps:\n  - {id: look, kind: code, owner: team, "
                                    "run: {command: [\"true\"]}}\n  - {id: judge, kind: code, owner: team, "
                                    "run: {command: [\"true\"]}}\n", encoding="utf-8")
    parent = workflow_from_dict({"workflow": "p", "steps": [mapped]}, str(steps / "p.yaml"))
    assert present_results(parent, {"each": {"results": [child, None]}, "gone": None}) == {
        "each": {"results": [{"judge": {"ok": True}}, None]}}
